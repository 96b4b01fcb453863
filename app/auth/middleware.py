"""Who is calling: verify `x-wallet-auth` and put the wallet on the request (`scope["user"]`).

Rules (memoclaw-api.md, "Identity rules Engram follows"): a bad header is 401 everywhere; no
header is 401 on free routes and passes through on paid routes, where the payment gate answers
402 (an x402 payment alone identifies a payer). Public handlers set `exclude_from_auth=True`.
"""

from __future__ import annotations

from litestar.datastructures import Headers
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from app.api.errors import Unauthorized
from app.auth.signature import WalletAuthError, WalletVerifier
from app.payments.prices import price_of

WALLET_HEADER = "x-wallet-auth"
EXCLUDE_OPT_KEY = "exclude_from_auth"


class WalletAuthMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)
    exclude_opt_key = EXCLUDE_OPT_KEY

    @staticmethod
    def should_bypass_for_scope(scope: Scope) -> bool:
        # Litestar's own OpenAPI handlers cannot carry our opt key; the docs are public.
        return str(scope["path"]).startswith("/docs")

    def __init__(self, verifier: WalletVerifier) -> None:
        self.verifier = verifier

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        scope["user"] = self._identify(scope)
        await next_app(scope, receive, send)

    def _identify(self, scope: Scope) -> str | None:
        raw = Headers.from_scope(scope).get(WALLET_HEADER)
        if raw:
            try:
                return self.verifier.verify(raw)
            except WalletAuthError as exc:
                raise Unauthorized(str(exc)) from exc
        if price_of(scope.get("route_handler")) is not None:
            return None  # the payment gate decides: 402 with requirements
        raise Unauthorized(
            "Missing x-wallet-auth header: send {address}:{unix_timestamp}:{signature}, the"
            " signature being EIP-191 over 'memoclaw-auth:{unix_timestamp}'"
        )
