"""Free-tier endpoints (the public description, a wallet's own status) and session sign-in."""

from __future__ import annotations

from datetime import UTC, datetime

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from app.auth import repository
from app.auth.middleware import WALLET_HEADER, origin_of_request
from app.auth.schemas import (
    AfterFreeTier,
    FreeTierInfo,
    FreeTierTerms,
    SessionIn,
    SessionsRevoked,
    SessionToken,
    SiwxChallenge,
    WalletAuthScheme,
)
from app.auth.session import SessionTokens
from app.auth.signature import AUTH_MESSAGE_PREFIX, WalletAuthError, WalletVerifier
from app.auth.siwx import SIWX_HEADER, SiwxVerifier
from app.core.errors import InvalidInput, Unauthorized
from app.core.schemas import iso
from app.free_tier.schemas import FreeTierStatus
from app.free_tier.service import FreeTier
from app.http.markers import public
from app.http.openapi import error_responses
from app.http.params import Conn, MaybeWalletRequest, WalletRequest


class FreeTierController(Controller):
    path = "/v1/free-tier"
    tags = ["free tier"]

    @get("/info", opt=public())
    async def info(
        self, free_tier: NamedDependency[FreeTier], request: MaybeWalletRequest
    ) -> FreeTierInfo:
        window = request.app.state.settings.auth.window_seconds
        return FreeTierInfo(
            free_tier=FreeTierTerms(
                enabled=free_tier.calls_per_wallet > 0,
                calls_per_wallet=free_tier.calls_per_wallet,
                description=(
                    f"Every wallet gets {free_tier.calls_per_wallet} free calls to paid endpoints;"
                    " free endpoints never count."
                ),
            ),
            auth=WalletAuthScheme(
                header=WALLET_HEADER,
                format="{address}:{unix_timestamp}:{signature}",
                message_to_sign=AUTH_MESSAGE_PREFIX + "{unix_timestamp}",
                signature_scheme="EIP-191 personal_sign",
                expiry_seconds=window,
            ),
            after_free_tier=AfterFreeTier(
                payment="x402",
                currency="USDC",
                description="Paid endpoints answer 402 with x402 payment requirements.",
            ),
        )

    @get("/status")
    async def status(
        self, request: WalletRequest, conn: Conn, free_tier: NamedDependency[FreeTier]
    ) -> FreeTierStatus:
        return await free_tier.status(conn, request.user)


class SessionController(Controller):
    path = "/auth"
    tags = ["auth"]

    # Public: the body (or the SIGN-IN-WITH-X header) carries the wallet's signature.
    @post(
        "/session",
        opt=public(),
        status_code=HTTP_200_OK,
        responses=error_responses(
            unauthorized="Sign-in refused: a stale timestamp, a signature by another wallet, or"
            " a SIGN-IN-WITH-X proof that does not check out (or was used already)"
        ),
    )
    async def create_session(
        self,
        request: MaybeWalletRequest,
        conn: Conn,
        sessions: NamedDependency[SessionTokens],
        wallet_verifier: NamedDependency[WalletVerifier],
        siwx: NamedDependency[SiwxVerifier],
        data: JSONBody[SessionIn | None] = None,
    ) -> SessionToken:
        """Trade one signature for a session token: the x-wallet-auth proof as body fields, or a
        SIGN-IN-WITH-X header (single use: a captured one mints nothing)."""
        proof = request.headers.get(SIWX_HEADER)
        try:
            if proof:
                origin = origin_of_request(
                    request.scope, request.app.state.settings.server.public_url
                )
                wallet = await siwx.verify(conn, proof, origin)
            elif data is not None:
                wallet = wallet_verifier.verify(f"{data.address}:{data.timestamp}:{data.signature}")
            else:
                raise InvalidInput(
                    "Send {address, timestamp, signature} or a SIGN-IN-WITH-X header",
                    {"field": "$"},
                )
        except WalletAuthError as exc:
            raise Unauthorized(f"Sign-in refused: {exc}") from exc
        issued = sessions.issue(wallet, version=await repository.token_version(conn, wallet))
        return SessionToken(
            token=issued.token,
            wallet=issued.wallet,
            expires_at=iso(datetime.fromtimestamp(issued.expires_at, UTC)),
            token_type="Bearer",
            expires_in=sessions.ttl_seconds,
        )

    @delete("/session", status_code=HTTP_200_OK)
    async def revoke_sessions(self, request: WalletRequest, conn: Conn) -> SessionsRevoked:
        """Revoke every session token of the calling wallet (on every instance at once)."""
        version = await repository.revoke_tokens(conn, request.user)
        return SessionsRevoked(revoked=True, wallet=request.user, token_version=version)

    @get("/nonce", opt=public())
    async def nonce(
        self, request: MaybeWalletRequest, conn: Conn, siwx: NamedDependency[SiwxVerifier]
    ) -> SiwxChallenge:
        """A Sign-In-With-X challenge: sign it as a SIWE message, send it as SIGN-IN-WITH-X."""
        origin = origin_of_request(request.scope, request.app.state.settings.server.public_url)
        return await siwx.challenge(conn, origin)
