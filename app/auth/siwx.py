"""Sign-In-With-X (x402's extension: a CAIP-122 / EIP-4361 message), Engram's replay-proof way to
say which wallet is calling. Clients opt into it; MemoClaw's x-wallet-auth stays accepted.

1. `GET /auth/nonce` hands out a challenge: Engram's domain and URI, a fresh nonce, issuedAt and
   expirationTime (the auth window), the chain id and a statement. The nonce is kept in
   PostgreSQL (`auth_nonces`), where every instance sees it.
2. The client signs the challenge as a SIWE message (x402's `create_siwx_payload` does it) and
   sends `SIGN-IN-WITH-X: base64(payload)` (x402's `encode_siwx_header`), on any request or on
   `POST /auth/session` to mint a session token.
3. Engram checks it with x402's own helpers: the domain and URI are its origin, issuedAt is within
   the window and not ahead, the message has not expired, the chain is Engram's, the signature
   is the address's; then it uses the nonce up (deleting its row succeeds once).

Against x-wallet-auth this protects from replay (a captured header works for no one: its nonce
is spent), from use on another site (the domain is signed) and from pre-dating (the server sets
issuedAt). Nonces are used only after the signature checks out, so a forged header cannot burn
someone's nonce.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import asyncpg
from x402.extensions.sign_in_with_x import (
    SIWxValidationOptions,
    parse_siwx_header,
    validate_siwx_message,
    verify_siwx_signature,
)

from app.auth import repository
from app.auth.schemas import SiwxChallenge
from app.auth.signature import WalletAuthError

SIWX_HEADER = "sign-in-with-x"
STATEMENT = "Sign in to Engram with this wallet."
SIWX_VERSION = "1"


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def origin_of(url: str) -> str:
    """scheme://host[:port] of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class SiwxVerifier:
    def __init__(self, chain_id: str, window_seconds: int) -> None:
        self.chain_id = chain_id  # CAIP-2, the x402 network's (eip155:8453 on Base)
        self.window_seconds = window_seconds

    async def challenge(
        self, conn: asyncpg.Connection, origin: str, now: datetime | None = None
    ) -> SiwxChallenge:
        """A fresh single-use challenge for `origin`, in SIWX's extension-info shape."""
        issued = (now or datetime.now(UTC)).replace(microsecond=0)
        nonce = secrets.token_hex(16)
        await repository.issue_nonce(conn, nonce, self.window_seconds)
        return SiwxChallenge(
            domain=urlsplit(origin).netloc,
            uri=origin,
            version=SIWX_VERSION,
            statement=STATEMENT,
            nonce=nonce,
            issuedAt=_iso(issued),
            expirationTime=_iso(issued + timedelta(seconds=self.window_seconds)),
            chainId=self.chain_id,
            type="eip191",
            header=SIWX_HEADER.upper(),
        )

    async def verify(self, conn: asyncpg.Connection, raw: str, origin: str) -> str:
        """The lower-cased wallet of a SIGN-IN-WITH-X header, its nonce used up; else raises
        WalletAuthError saying why."""
        try:
            payload = parse_siwx_header(raw.strip())
        except ValueError as exc:
            raise WalletAuthError(f"Malformed SIGN-IN-WITH-X header: {exc}") from exc
        options = SIWxValidationOptions(maxAge=self.window_seconds * 1000)
        checked = await validate_siwx_message(payload, origin, options)
        if not checked.is_valid:
            raise WalletAuthError(
                f"SIGN-IN-WITH-X refused ({checked.invalid_reason}): {checked.invalid_message}"
            )
        if payload.chain_id != self.chain_id:
            raise WalletAuthError(
                f"SIGN-IN-WITH-X refused: chain {payload.chain_id!r} is not {self.chain_id!r}"
            )
        signed = await verify_siwx_signature(payload)
        if not signed.is_valid or not signed.payer:
            raise WalletAuthError(
                f"SIGN-IN-WITH-X refused ({signed.invalid_reason}): {signed.invalid_message}"
            )
        if not await repository.consume_nonce(conn, payload.nonce):
            raise WalletAuthError(
                "SIGN-IN-WITH-X refused: its nonce is unknown, expired or already used; get a"
                " fresh one at GET /auth/nonce"
            )
        return signed.payer.lower()
