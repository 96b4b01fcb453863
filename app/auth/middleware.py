"""Who is calling: verify `x-wallet-auth` and put the wallet on the request (`scope["user"]`).

Rules (docs/api-contract.md, "Identity rules"): a bad header is 401 everywhere; no
header is 401 on free routes and passes through on paid routes, where the payment gate answers
402 (an x402 payment alone identifies a payer). Public handlers set `exclude_from_auth=True`.

`Authorization: Bearer <session token>` (from POST /auth/session, app/auth/session.py) and
`SIGN-IN-WITH-X` (app/auth/siwx.py, replay-proof) are equal alternatives to x-wallet-auth: the
same wallet, the same free tier. A bad, expired, revoked or unknown-key token is 401 like a bad
header; two identities naming different wallets is 401, and so is any of these headers sent
twice (which one would count is not for the server to guess). Other Authorization schemes are
ignored (they are not Engram's).

Bearer tokens and SIGN-IN-WITH-X need the database (the wallet's token version, the nonce); a
connection is taken for just that, before the request's own transaction.

An agent key names the owner it acts for in `x-wallet-owner` (app/agents/service.py): with a
live delegation the request's wallet is the owner's, and the delegation rides on the request
(its scopes are kept by the routes); without one it is 403.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg
from litestar.datastructures import Headers
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from app.auth.session import SessionTokenError, SessionTokens, check_not_revoked
from app.auth.signature import WalletAuthError, WalletVerifier
from app.auth.siwx import SIWX_HEADER, SiwxVerifier, origin_of
from app.core import provenance
from app.core.errors import Forbidden, PartUnavailable, Unauthorized
from app.core.request_values import WALLET_OWNER_HEADER, Delegation
from app.db.errors import CONNECT_FAILURES
from app.http.markers import PUBLIC_OPT_KEY, price_of
from app.http.state import state_of

WALLET_HEADER = "x-wallet-auth"
SURFACE_HEADER = "x-engram-surface"
BEARER_PREFIX = "bearer "
# RFC 6750 §3: a refused bearer token says so in WWW-Authenticate.
INVALID_TOKEN_CHALLENGE = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
IDENTITY_HEADERS = (WALLET_HEADER, "authorization", SIWX_HEADER, WALLET_OWNER_HEADER)


# The live delegation that lets an agent act for an owner, or a 403 (app/agents/service.py
# delegation_for, handed in by app/asgi.py): (conn, agent, owner) -> the delegation.
DelegationLookup = Callable[[asyncpg.Connection, str, str], Awaitable[Delegation]]


class WalletAuthMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)
    exclude_opt_key = PUBLIC_OPT_KEY

    @staticmethod
    def should_bypass_for_scope(scope: Scope) -> bool:
        # Litestar's own OpenAPI handlers cannot carry our opt key; the docs are public.
        return str(scope["path"]).startswith("/docs")

    def __init__(
        self,
        verifier: WalletVerifier,
        sessions: SessionTokens | None = None,
        siwx: SiwxVerifier | None = None,
        public_url: str | None = None,
        delegations: DelegationLookup | None = None,
    ) -> None:
        self.verifier = verifier
        self.delegations = delegations
        self.sessions = sessions
        self.siwx = siwx
        self.public_url = public_url

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        scope["user"] = await self._identify(scope)
        # what the request came through, as the caller says (app/core/provenance.py): MCP and
        # the plugins' hooks name themselves; anything else is REST
        surface = Headers.from_scope(scope).get(SURFACE_HEADER, "").strip().lower()
        provenance.begin("mcp" if surface == "mcp" else "hook" if surface == "hook" else "rest")
        await next_app(scope, receive, send)

    async def _identify(self, scope: Scope) -> str | None:
        headers = Headers.from_scope(scope)
        refuse_duplicates(headers)
        wallets: list[str] = []
        raw = headers.get(WALLET_HEADER)
        if raw:
            try:
                wallets.append(self.verifier.verify(raw))
            except WalletAuthError as exc:
                raise Unauthorized(str(exc)) from exc
        token = _bearer_token(headers.get("authorization"))
        if token is not None:
            wallets.append(await self._session_wallet(scope, token))
        proof = headers.get(SIWX_HEADER)
        if proof:
            wallets.append(await self.siwx_wallet(scope, proof))
        if len(set(wallets)) > 1:
            raise Unauthorized(
                "The identity headers name different wallets; send one",
                headers=INVALID_TOKEN_CHALLENGE if token is not None else None,
            )
        owner = headers.get(WALLET_OWNER_HEADER)
        if wallets:
            if owner and owner.lower() != wallets[0]:
                return await self._acting_for(scope, wallets[0], owner)
            return wallets[0]
        if owner:
            raise Unauthorized(
                f"{WALLET_OWNER_HEADER} names the wallet an agent key acts for: send the agent's"
                " own identity too (x-wallet-auth, a session token or SIGN-IN-WITH-X)"
            )
        if price_of(scope.get("route_handler")) is not None:
            return None  # the payment gate decides: 402 with requirements
        raise Unauthorized(
            "Missing x-wallet-auth header: send {address}:{unix_timestamp}:{signature}, the"
            " signature being EIP-191 over 'memoclaw-auth:{unix_timestamp}' (or"
            " Authorization: Bearer <token from POST /auth/session>, or SIGN-IN-WITH-X with a"
            " nonce from GET /auth/nonce)"
        )

    async def _acting_for(self, scope: Scope, agent: str, owner: str) -> str:
        """An agent key naming its owner: the owner, when a live delegation covers the agent
        (403 otherwise); the delegation goes on the request for the routes to keep to."""
        if self.delegations is None:
            raise Forbidden("Agent keys are not served here", {"header": WALLET_OWNER_HEADER})
        async with database(scope) as conn:
            delegation = await self.delegations(conn, agent, owner)
        state_of(scope)["delegation"] = delegation
        return delegation.owner

    async def _session_wallet(self, scope: Scope, token: str) -> str:
        if self.sessions is None or not self.sessions.ready:
            raise Unauthorized(
                "Session tokens are not available on this server; use x-wallet-auth",
                headers=INVALID_TOKEN_CHALLENGE,
            )
        try:
            claims = self.sessions.verify(token)
            async with database(scope) as conn:
                await check_not_revoked(conn, claims)
        except SessionTokenError as exc:
            raise Unauthorized(str(exc), headers=INVALID_TOKEN_CHALLENGE) from exc
        return claims.wallet

    async def siwx_wallet(self, scope: Scope, proof: str) -> str:
        """The wallet a SIGN-IN-WITH-X header proves (its nonce used up), else 401."""
        if self.siwx is None:
            raise Unauthorized("SIGN-IN-WITH-X is not available on this server")
        try:
            async with database(scope) as conn:
                return await self.siwx.verify(conn, proof, self.origin(scope))
        except WalletAuthError as exc:
            raise Unauthorized(str(exc)) from exc

    def origin(self, scope: Scope) -> str:
        """The origin clients address: ENGRAM_PUBLIC_URL's, else the request's own."""
        return origin_of_request(scope, self.public_url)


def origin_of_request(scope: Scope, public_url: str | None) -> str:
    """ENGRAM_PUBLIC_URL's origin, else the one the request was sent to (its Host header, and
    its scheme: X-Forwarded-Proto only from ENGRAM_TRUSTED_PROXIES' peers, app/cli/serve.py). For
    Sign-In-With-X (its nonce was issued here) and the console's same-origin checks; an agent
    key's delegation never names a Host header's origin (app/agents/service.py server_origin)."""
    if public_url:
        return origin_of(public_url)
    host = Headers.from_scope(scope).get("host") or "localhost"
    return f"{scope.get('scheme', 'http')}://{host}"


def refuse_duplicates(headers: Headers) -> None:
    for name in IDENTITY_HEADERS:
        if len(headers.getall(name, [])) > 1:
            raise Unauthorized(f"{name} sent more than once; send it once")


@asynccontextmanager
async def database(scope: Scope) -> AsyncIterator[asyncpg.Connection]:
    """A connection for an identity check, a 503 when the database is down."""
    pool: asyncpg.Pool = scope["litestar_app"].state.pool
    try:
        conn = await pool.acquire()
    except CONNECT_FAILURES as exc:
        raise PartUnavailable("database") from exc
    try:
        yield conn
    finally:
        await pool.release(conn)


def _bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>` (scheme case-insensitive), else None."""
    if not authorization or authorization[: len(BEARER_PREFIX)].lower() != BEARER_PREFIX:
        return None
    return authorization[len(BEARER_PREFIX) :].strip()
