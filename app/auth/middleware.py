"""Who is calling: verify `x-wallet-auth` and put the wallet on the request (`scope["user"]`).

Rules (memoclaw-api.md, "Identity rules Engram follows"): a bad header is 401 everywhere; no
header is 401 on free routes and passes through on paid routes, where the payment gate answers
402 (an x402 payment alone identifies a payer). Public handlers set `exclude_from_auth=True`.

`Authorization: Bearer <session token>` (from POST /auth/session, app/auth/session.py) is an
equal alternative to x-wallet-auth: the same wallet, the same free tier. A bad, expired or
unknown-key token is 401 like a bad header; both sent and naming different wallets is 401.
Other Authorization schemes are ignored (they are not Engram's).
"""

from __future__ import annotations

from litestar.datastructures import Headers
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from app.api.errors import Unauthorized
from app.auth.session import SessionTokenError, SessionTokens
from app.auth.signature import WalletAuthError, WalletVerifier
from app.payments.prices import price_of

WALLET_HEADER = "x-wallet-auth"
BEARER_PREFIX = "bearer "
# RFC 6750 §3: a refused bearer token says so in WWW-Authenticate.
INVALID_TOKEN_CHALLENGE = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
EXCLUDE_OPT_KEY = "exclude_from_auth"


class WalletAuthMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)
    exclude_opt_key = EXCLUDE_OPT_KEY

    @staticmethod
    def should_bypass_for_scope(scope: Scope) -> bool:
        # Litestar's own OpenAPI handlers cannot carry our opt key; the docs are public.
        return str(scope["path"]).startswith("/docs")

    def __init__(self, verifier: WalletVerifier, sessions: SessionTokens | None = None) -> None:
        self.verifier = verifier
        self.sessions = sessions

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        scope["user"] = self._identify(scope)
        await next_app(scope, receive, send)

    def _identify(self, scope: Scope) -> str | None:
        headers = Headers.from_scope(scope)
        raw = headers.get(WALLET_HEADER)
        wallet = None
        if raw:
            try:
                wallet = self.verifier.verify(raw)
            except WalletAuthError as exc:
                raise Unauthorized(str(exc)) from exc
        token = _bearer_token(headers.get("authorization"))
        if token is not None:
            session_wallet = self._session_wallet(token)
            if wallet is not None and session_wallet != wallet:
                raise Unauthorized(
                    "x-wallet-auth and the bearer token name different wallets; send one",
                    headers=INVALID_TOKEN_CHALLENGE,
                )
            wallet = session_wallet
        if wallet is not None:
            return wallet
        if price_of(scope.get("route_handler")) is not None:
            return None  # the payment gate decides: 402 with requirements
        raise Unauthorized(
            "Missing x-wallet-auth header: send {address}:{unix_timestamp}:{signature}, the"
            " signature being EIP-191 over 'memoclaw-auth:{unix_timestamp}' (or"
            " Authorization: Bearer <token from POST /auth/session>)"
        )

    def _session_wallet(self, token: str) -> str:
        if self.sessions is None or not self.sessions.ready:
            raise Unauthorized(
                "Session tokens are not available on this server; use x-wallet-auth",
                headers=INVALID_TOKEN_CHALLENGE,
            )
        try:
            return self.sessions.verify(token)
        except SessionTokenError as exc:
            raise Unauthorized(str(exc), headers=INVALID_TOKEN_CHALLENGE) from exc


def _bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>` (scheme case-insensitive), else None."""
    if not authorization or authorization[: len(BEARER_PREFIX)].lower() != BEARER_PREFIX:
        return None
    return authorization[len(BEARER_PREFIX) :].strip()
