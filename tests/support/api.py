"""Calling the in-process API as a wallet: the signed `x-wallet-auth` header, and a memory
stored over HTTP."""

from __future__ import annotations

import time

from eth_account.signers.local import LocalAccount

from app.auth.signature import sign_header


def auth(account: LocalAccount, ts: int | None = None) -> dict[str, str]:
    return {
        "x-wallet-auth": sign_header(account.key.hex(), ts if ts is not None else int(time.time()))
    }
