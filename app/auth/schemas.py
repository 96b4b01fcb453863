"""Wire structs for auth: the sign-in body of POST /auth/session, and the answers of the free-tier
and session endpoints."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from app.auth.signature import ADDRESS_RE, SIGNATURE_RE
from app.core.schemas import StrictStruct

UnixSeconds = Annotated[int, Meta(ge=0, le=10**12)]


class SessionIn(StrictStruct):
    """The x-wallet-auth proof as fields. A malformed field is 422; a stale timestamp or a
    signature by someone else is 401 (the proof is well-formed but does not identify)."""

    address: Annotated[str, Meta(pattern=ADDRESS_RE.pattern)]
    # Clients send unix seconds as a number or as a string of digits.
    timestamp: UnixSeconds | Annotated[str, Meta(pattern=r"^\d{1,12}$")]
    signature: Annotated[str, Meta(pattern=SIGNATURE_RE.pattern)]


# ---- answers -----------------------------------------------------------------------------------


class FreeTierTerms(Struct):
    enabled: bool
    calls_per_wallet: int
    description: str


class WalletAuthScheme(Struct):
    """How to sign the x-wallet-auth header."""

    header: str
    format: str
    message_to_sign: str
    signature_scheme: str
    expiry_seconds: int


class AfterFreeTier(Struct):
    payment: str
    currency: str
    description: str


class FreeTierInfo(Struct):
    free_tier: FreeTierTerms
    auth: WalletAuthScheme
    after_free_tier: AfterFreeTier


class SessionToken(Struct):
    token: str
    wallet: str
    expires_at: str
    token_type: str
    expires_in: int  # seconds


class SessionsRevoked(Struct):
    revoked: bool
    wallet: str
    token_version: int  # tokens of an older version are refused from now on


class SiwxChallenge(Struct):
    """A Sign-In-With-X challenge, in SIWX's extension-info shape (app/auth/siwx.py)."""

    domain: str
    uri: str
    version: str
    statement: str
    nonce: str
    issuedAt: str
    expirationTime: str
    chainId: str
    type: str
    header: str
