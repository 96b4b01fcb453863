"""Engram: a self-hostable memory API for AI agents (the `engram` command, app/cli/)."""

# The name pip installs it by: `engram` on PyPI is an unrelated project (deploy/README.md).
DISTRIBUTION = "engram-x402"
