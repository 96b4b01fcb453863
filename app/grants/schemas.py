"""Grants on the wire: an owner shares one namespace with another wallet, to read or to write."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from app.auth.signature import ADDRESS_RE
from app.core.schemas import Name, StrictStruct, absent_if_none, iso

Access = Literal["read", "write"]
Address = Annotated[str, Meta(pattern=ADDRESS_RE.pattern)]


class GrantIn(StrictStruct):
    grantee: Address
    namespace: Name
    access: Access
    expires_at: str | None = None  # ISO 8601, in the future; none: until revoked


class Grant(Struct, kw_only=True):
    id: str
    owner: str
    grantee: str
    namespace: str
    access: Access
    created_at: str
    expires_at: str | UnsetType = UNSET


class GrantList(Struct):
    given: list[Grant]  # by the caller, live ones
    received: list[Grant]  # to the caller, live ones


class GrantRevoked(Struct):
    id: str
    revoked: bool


def grant_to_wire(row: Any) -> Grant:
    return Grant(
        id=str(row["id"]),
        owner=row["owner"],
        grantee=row["grantee"],
        namespace=row["namespace"],
        access=row["access"],
        created_at=iso(row["created_at"]),
        expires_at=absent_if_none(iso(row["expires_at"])),
    )
