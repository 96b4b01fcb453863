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

import re
import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import asyncpg
from pydantic import ValidationError
from x402.extensions.sign_in_with_x import (
    SIWxPayload,
    SIWxValidationOptions,
    validate_siwx_message,
    verify_siwx_signature,
)

from app.auth import repository
from app.auth.schemas import SiwxChallenge
from app.auth.signature import WalletAuthError
from app.kit.json_input import UnreadableJson, decode_base64_json

SIWX_HEADER = "sign-in-with-x"
STATEMENT = "Sign in to Engram with this wallet."
SIWX_VERSION = "1"
# What a SIGN-IN-WITH-X header may hold before it is parsed: a challenge signed as issued is
# about 1 KiB of base64 and 2 levels deep (the payload, its resources); these leave room for a
# long statement and resource list, and none for a document built to exhaust the decoder.
MAX_HEADER_CHARS = 8 * 1024
MAX_HEADER_DEPTH = 4
# What x402's SIWX helpers raise on values they cannot read (an URI that is no URL, a
# signature that is not hex, a date past the calendar): the header is malformed, not the server.
# EIP-4361's nonce: at least 8 alphanumerics (Engram issues 32 hex digits); anything else was
# never issued, and is not sent to the database (a NUL would be an error there).
NONCE_RE = re.compile(r"^[A-Za-z0-9]{8,128}$")
UNREADABLE_VALUES = (ValueError, TypeError, OverflowError, IndexError)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def origin_of(url: str) -> str:
    """scheme://host[:port] of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# Expired sign-in nonces deleted per statement of a sweep, and how often an instance sweeps.
NONCES_PER_SWEEP = 1000
NONCE_SWEEP_SECONDS = 60.0


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

    async def sweep_expired(self, pool: asyncpg.Pool) -> int:
        """Clear expired nonces (on a timer: app/asgi.py); a batch at a time, so a long backlog
        never holds locks for long. How many went."""
        swept = 0
        while True:
            async with pool.acquire() as conn:
                n = await repository.sweep_expired_nonces(conn, NONCES_PER_SWEEP)
            swept += n
            if n < NONCES_PER_SWEEP:
                return swept

    async def verify(self, conn: asyncpg.Connection, raw: str, origin: str) -> str:
        """The lower-cased wallet of a SIGN-IN-WITH-X header, its nonce used up; else raises
        WalletAuthError saying why."""
        return await self.verify_payload(conn, read_payload(raw), origin)

    async def verify_payload(self, conn: asyncpg.Connection, payload: SIWxPayload,
                             origin: str) -> str:  # fmt: skip
        """verify() for a payload already read (the console's browser sign-in sends it as JSON)."""
        try:
            wallet, nonce = await self._signed_by(payload, origin), payload.nonce
        except UNREADABLE_VALUES as exc:
            raise WalletAuthError(f"Malformed SIGN-IN-WITH-X proof: {exc}") from exc
        if not NONCE_RE.match(nonce) or not await repository.consume_nonce(conn, nonce):
            raise WalletAuthError(
                "SIGN-IN-WITH-X refused: its nonce is unknown, expired or already used; get a"
                " fresh one at GET /auth/nonce"
            )
        return wallet

    async def signer_of(self, raw: str, origin: str) -> tuple[str, str]:
        """(wallet, nonce) of a header signed for this origin and chain within the window,
        before its nonce is looked at; raises WalletAuthError, and nothing else, otherwise."""
        payload = read_payload(raw)
        try:
            return await self._signed_by(payload, origin), payload.nonce
        except UNREADABLE_VALUES as exc:
            raise WalletAuthError(f"Malformed SIGN-IN-WITH-X header: {exc}") from exc

    async def _signed_by(self, payload: SIWxPayload, origin: str) -> str:
        """The wallet that signed this message for this origin and chain, within the window."""
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
        return signed.payer.lower()


def read_payload(raw: str) -> SIWxPayload:
    """The header's payload (x402's SIWxPayload), its size and depth bounded before it is
    parsed; WalletAuthError("Malformed SIGN-IN-WITH-X header: ...") otherwise."""
    try:
        document = decode_base64_json(raw, MAX_HEADER_CHARS, MAX_HEADER_DEPTH)
        return SIWxPayload.model_validate(document)
    except UnreadableJson as exc:
        raise WalletAuthError(f"Malformed SIGN-IN-WITH-X header: {exc}") from exc
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "$" for e in exc.errors())
        raise WalletAuthError(f"Malformed SIGN-IN-WITH-X header: invalid {fields}") from exc
