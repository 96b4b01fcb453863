"""Session tokens: `POST /auth/session` trades one wallet signature for a 7-day JWT, sent after
that as `Authorization: Bearer <token>` wherever `x-wallet-auth` is accepted.

The sign-in proof is exactly the x-wallet-auth one (EIP-191 over `memoclaw-auth:{ts}`, 300 s
window), so a header captured within its window could also mint a session: the token adds no
new way in, it lengthens what one signature grants (MemoClaw's scheme; documented in
docs/pages/concepts/identity.md).

Tokens are HS256 JWTs: claims `sub` (lower-cased wallet), `iat`, `exp`, `jti`, `ver` (the
wallet's token version when issued); header `kid`. DELETE /auth/session bumps the wallet's
version in the database, and a token whose `ver` is not the current one is refused: every token
issued before is revoked, on every instance at once (tokens from before versions existed count
as version 0).

Sign-in takes either proof: MemoClaw's x-wallet-auth fields (a captured header can mint a token
within its window, as with MemoClaw) or a Sign-In-With-X header (app/auth/siwx.py: single use).
Keys come from ENGRAM_JWT_SECRETS, a comma-separated list of `kid:secret` or bare `secret`
entries (a bare secret's kid is derived from its SHA-256): the FIRST signs, ALL verify, so keys
rotate without downtime (prepend the new key, drop the old one once its tokens have expired).
With none configured, one secret is generated on first start and kept in `engram_settings`, so
restarts and every worker sharing the database accept the same tokens.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import asyncpg
import jwt

from app.auth import repository
from app.auth.signature import ADDRESS_RE

ALGORITHM = "HS256"
SESSION_TTL_SECONDS = 7 * 86_400  # contract: "JWT, 7 days"
# RFC 7518 §3.2: an HS256 key is at least as long as the hash output (256 bits).
MIN_SECRET_BYTES = 32
KID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
REQUIRED_CLAIMS = ("sub", "iat", "exp", "jti")
VERSION_CLAIM = "ver"
# Seconds of clock difference tolerated between the workers that issue and verify a token.
CLOCK_LEEWAY_SECONDS = 30
GENERATED_SECRET_SETTING = "session_jwt_secret"


class SessionTokenError(Exception):
    """Why a bearer token was refused; the message is shown to the client."""


class SessionConfigError(ValueError):
    """ENGRAM_JWT_SECRETS cannot be used; the message says which entry and why."""


@dataclass(frozen=True)
class SigningKey:
    kid: str
    secret: bytes = field(repr=False)


def derived_kid(secret: bytes) -> str:
    """A kid for a secret given without one: stable across restarts and workers."""
    return hashlib.sha256(secret).hexdigest()[:16]


def parse_key(entry: str) -> SigningKey:
    """`kid:secret` (the first colon separates them) or a bare `secret` without colons."""
    kid, sep, secret_text = entry.strip().partition(":")
    if not sep:
        kid, secret_text = "", kid
    secret = secret_text.encode()
    if len(secret) < MIN_SECRET_BYTES:
        raise SessionConfigError(
            f"ENGRAM_JWT_SECRETS: every secret needs at least {MIN_SECRET_BYTES} bytes"
            f" (entry {kid or '<no kid>'} has {len(secret)})"
        )
    if sep and not KID_RE.match(kid):
        raise SessionConfigError(
            f"ENGRAM_JWT_SECRETS: key id {kid!r} must be 1-64 of A-Z a-z 0-9 . _ -"
        )
    return SigningKey(kid or derived_kid(secret), secret)


def parse_keys(entries: Iterable[str]) -> list[SigningKey]:
    keys = [parse_key(e) for e in entries if e.strip()]
    kids = [k.kid for k in keys]
    duplicated = sorted({kid for kid in kids if kids.count(kid) > 1})
    if duplicated:
        raise SessionConfigError(f"ENGRAM_JWT_SECRETS: key ids used twice: {duplicated}")
    return keys


@dataclass(frozen=True)
class TokenClaims:
    wallet: str
    version: int  # the wallet's token version it was issued under


@dataclass(frozen=True)
class IssuedToken:
    token: str
    wallet: str
    expires_at: int  # unix seconds


class SessionTokens:
    """Issues and verifies session JWTs with the configured (or database-kept) keys."""

    def __init__(
        self, keys: Sequence[SigningKey] = (), ttl_seconds: int = SESSION_TTL_SECONDS
    ) -> None:
        if ttl_seconds < 1:
            raise SessionConfigError("ENGRAM_SESSION_TTL_SECONDS must be at least 1")
        self.configured = bool(keys)
        self.ttl_seconds = ttl_seconds
        self._keys: list[SigningKey] = list(keys)

    async def load(self, conn: asyncpg.Connection) -> None:
        """At startup, without configured keys: use the database's secret (made on first use)."""
        if self.configured:
            return
        stored = await repository.setting_or_create(
            conn, GENERATED_SECRET_SETTING, secrets.token_urlsafe(48)
        )
        secret = stored.encode()
        self._keys = [SigningKey(derived_kid(secret), secret)]

    @property
    def ready(self) -> bool:
        return bool(self._keys)

    def issue(self, wallet: str, now: float | None = None, version: int = 0) -> IssuedToken:
        if not self._keys:
            raise RuntimeError("session keys not loaded (SessionTokens.load runs at startup)")
        key = self._keys[0]
        issued_at = int(time.time() if now is None else now)
        expires_at = issued_at + self.ttl_seconds
        claims = {
            "sub": wallet, "iat": issued_at, "exp": expires_at, "jti": uuid.uuid4().hex,
            VERSION_CLAIM: version,
        }  # fmt: skip
        token = jwt.encode(claims, key.secret, algorithm=ALGORITHM, headers={"kid": key.kid})
        return IssuedToken(token, wallet, expires_at)

    def verify(self, token: str) -> TokenClaims:
        """The token's lower-cased wallet and version, or raise SessionTokenError saying why
        (the version is checked against the wallet's current one by the caller)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise SessionTokenError("Malformed bearer token: not a JWT") from exc
        if header.get("alg") != ALGORITHM:
            raise SessionTokenError(f"Bearer token must be signed with {ALGORITHM}")
        key = self._key(header.get("kid"))
        if key is None:
            raise SessionTokenError(
                "Bearer token was signed with an unknown or retired key; sign in again at"
                " POST /auth/session"
            )
        try:
            claims = jwt.decode(
                token,
                key.secret,
                algorithms=[ALGORITHM],
                options={"require": list(REQUIRED_CLAIMS)},
                leeway=CLOCK_LEEWAY_SECONDS,
            )
        except jwt.ExpiredSignatureError as exc:
            raise SessionTokenError(
                "Bearer token has expired; sign in again at POST /auth/session"
            ) from exc
        except jwt.PyJWTError as exc:
            raise SessionTokenError(f"Invalid bearer token: {exc}") from exc
        wallet = claims["sub"]
        if not isinstance(wallet, str) or not ADDRESS_RE.match(wallet):
            raise SessionTokenError("Invalid bearer token: its subject is not a wallet address")
        version = claims.get(VERSION_CLAIM, 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise SessionTokenError("Invalid bearer token: its version is not a number")
        return TokenClaims(wallet.lower(), version)

    def _key(self, kid: object) -> SigningKey | None:
        if not isinstance(kid, str):
            return None
        return next((k for k in self._keys if k.kid == kid), None)


async def check_not_revoked(conn: asyncpg.Connection, claims: TokenClaims) -> None:
    if claims.version != await repository.token_version(conn, claims.wallet):
        raise SessionTokenError(
            "Bearer token was revoked (DELETE /auth/session); sign in again at POST /auth/session"
        )
