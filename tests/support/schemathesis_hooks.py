"""Schemathesis hooks: every generated request carries a valid x-wallet-auth header for the
wallet whose key is in ENGRAM_ST_KEY, signed afresh every 30 s (a header lives 300 s)."""

from __future__ import annotations

import os
from typing import Any

import schemathesis

from app.auth.signature import sign_header

KEY = os.environ["ENGRAM_ST_KEY"]


@schemathesis.auth(refresh_interval=30)
class WalletAuth:
    def get(self, case: Any, ctx: Any) -> str:
        return sign_header(KEY)

    def set(self, case: Any, data: str, ctx: Any) -> None:
        case.headers = case.headers or {}
        case.headers["x-wallet-auth"] = data
