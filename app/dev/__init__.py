"""Development tools, off the production path: a local anvil chain with a dev USDC (the payment
tests and `engram serve --dev-chain`), the demo wallet and an example paying agent.

Nothing in app/ imports this package but app/cli.py, for `--dev-chain`.
"""
