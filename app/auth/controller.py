"""Free-tier endpoints: the public description and a wallet's own status."""

from __future__ import annotations

from typing import Any

from litestar import Controller, get
from litestar.di import NamedDependency

from app.api.params import Conn, MaybeWalletRequest, WalletRequest
from app.auth.free_tier import FreeTier
from app.auth.middleware import EXCLUDE_OPT_KEY, WALLET_HEADER
from app.auth.signature import AUTH_MESSAGE_PREFIX


class FreeTierController(Controller):
    path = "/v1/free-tier"
    tags = ["free tier"]

    @get("/info", opt={EXCLUDE_OPT_KEY: True})
    async def info(
        self, free_tier: NamedDependency[FreeTier], request: MaybeWalletRequest
    ) -> dict[str, Any]:
        window = request.app.state.settings.auth_window_seconds
        return {
            "free_tier": {
                "enabled": free_tier.calls_per_wallet > 0,
                "calls_per_wallet": free_tier.calls_per_wallet,
                "description": (
                    f"Every wallet gets {free_tier.calls_per_wallet} free calls to paid endpoints;"
                    " free endpoints never count."
                ),
            },
            "auth": {
                "header": WALLET_HEADER,
                "format": "{address}:{unix_timestamp}:{signature}",
                "message_to_sign": AUTH_MESSAGE_PREFIX + "{unix_timestamp}",
                "signature_scheme": "EIP-191 personal_sign",
                "expiry_seconds": window,
            },
            "after_free_tier": {
                "payment": "x402",
                "currency": "USDC",
                "description": "Paid endpoints answer 402 with x402 payment requirements.",
            },
        }

    @get("/status")
    async def status(
        self, request: WalletRequest, conn: Conn, free_tier: NamedDependency[FreeTier]
    ) -> dict[str, Any]:
        return await free_tier.status(conn, request.user)
