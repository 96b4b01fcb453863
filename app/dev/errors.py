"""The dev tools' one error, raised by every part of the local chain (npm, anvil, contracts, the
token) and caught by `engram serve --dev-chain` to print why in one line."""

from __future__ import annotations


class DevChainError(RuntimeError):
    """The local chain could not be installed, started or set up (the message says why)."""
