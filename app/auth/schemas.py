"""Wire structs for auth: the sign-in body of POST /auth/session."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from app.auth.signature import ADDRESS_RE, SIGNATURE_RE
from app.kit.schemas import StrictStruct

UnixSeconds = Annotated[int, Meta(ge=0, le=10**12)]


class SessionIn(StrictStruct):
    """The x-wallet-auth proof as fields. A malformed field is 422; a stale timestamp or a
    signature by someone else is 401 (the proof is well-formed but does not identify)."""

    address: Annotated[str, Meta(pattern=ADDRESS_RE.pattern)]
    # Clients send unix seconds as a number or as a string of digits.
    timestamp: UnixSeconds | Annotated[str, Meta(pattern=r"^\d{1,12}$")]
    signature: Annotated[str, Meta(pattern=SIGNATURE_RE.pattern)]
