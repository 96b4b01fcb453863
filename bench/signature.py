"""Wallet-header verification cost: a fresh recovery vs a header already verified (cache hit).

Run: .venv/bin/python bench/signature.py [N]
"""

from __future__ import annotations

import sys
import time

from eth_account import Account
from eth_keys.backends import get_backend

from app.auth.signature import WalletVerifier, sign_header


def main(n: int) -> None:
    headers = [sign_header(Account.create().key.hex()) for _ in range(n)]
    verifier = WalletVerifier()
    started = time.perf_counter()
    for header in headers:
        verifier.verify(header)
    fresh = (time.perf_counter() - started) / n
    started = time.perf_counter()
    for header in headers:
        verifier.verify(header)
    cached = (time.perf_counter() - started) / n
    print(f"backend: {type(get_backend()).__name__}")
    print(f"fresh recovery: {fresh * 1e6:8.1f} µs/header ({n} headers)")
    print(f"cached header:  {cached * 1e6:8.1f} µs/header  ratio {fresh / cached:.0f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
