"""Free-tier endpoints (the public description, a wallet's own status) and session sign-in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from app.api.errors import Unauthorized
from app.api.params import Conn, MaybeWalletRequest, WalletRequest
from app.auth.free_tier import FreeTier
from app.auth.middleware import EXCLUDE_OPT_KEY, WALLET_HEADER
from app.auth.schemas import SessionIn
from app.auth.session import SessionTokens
from app.auth.signature import AUTH_MESSAGE_PREFIX, WalletAuthError, WalletVerifier
from app.memory.schemas import iso


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


class SessionController(Controller):
    path = "/auth"
    tags = ["auth"]

    # Public: the body carries the wallet's signature, so no header is needed to reach it.
    @post("/session", opt={EXCLUDE_OPT_KEY: True}, status_code=HTTP_200_OK)
    async def create_session(
        self,
        sessions: NamedDependency[SessionTokens],
        wallet_verifier: NamedDependency[WalletVerifier],
        data: JSONBody[SessionIn],
    ) -> dict[str, Any]:
        try:
            issued = sessions.sign_in(wallet_verifier, data.address, data.timestamp, data.signature)
        except WalletAuthError as exc:
            raise Unauthorized(f"Sign-in refused: {exc}") from exc
        return {
            "token": issued.token,
            "wallet": issued.wallet,
            "expires_at": iso(datetime.fromtimestamp(issued.expires_at, UTC)),
            "token_type": "Bearer",
            "expires_in": sessions.ttl_seconds,
        }
