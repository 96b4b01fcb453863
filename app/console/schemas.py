"""Wire structs of the console's sign-in endpoints (its pages are HTML)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct

from app.kit.schemas import StrictStruct

Address = Annotated[str, Meta(min_length=42, max_length=42)]
Signature = Annotated[str, Meta(min_length=2, max_length=1024)]


class ChallengeIn(StrictStruct):
    address: Address


class ChallengeOut(Struct):
    challenge: dict[str, Any]  # GET /auth/nonce's shape: sign `message`, send it back as is
    message: str  # the EIP-4361 text the wallet signs (x402's create_siwx_message)


class SignInIn(StrictStruct):
    challenge: Annotated[dict[str, Any], Meta(max_length=16)]
    address: Address
    signature: Signature


class SignedIn(Struct):
    wallet: str
    next: str  # where the browser goes now


class LinkOut(Struct):
    url: str  # opens a console session once, within expires_in seconds
    wallet: str
    expires_in: int
