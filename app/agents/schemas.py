"""Delegations on the wire: an owner lets an agent key act for it, within scopes.

The owner signs the delegation's message (EIP-191 personal_sign of `delegation_message`); anyone
holding it (the owner or the agent) registers it with `POST /v1/agents`. The agent then signs
its own identity (x-wallet-auth, a session token or SIGN-IN-WITH-X) and names the owner in an
`x-wallet-owner` header.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from app.auth.signature import ADDRESS_RE, SIGNATURE_RE
from app.core.schemas import Name, StrictStruct, absent_if_none, iso

Scope = Literal["read", "write"]
Address = Annotated[str, Meta(pattern=ADDRESS_RE.pattern)]
# A delegation's nonce: the owner's choice, once per owner (a registered or cancelled one is
# never taken again)
NONCE_PATTERN = r"^[A-Za-z0-9_-]{8,128}$"
Nonce = Annotated[str, Meta(pattern=NONCE_PATTERN)]
Signature = Annotated[str, Meta(pattern=SIGNATURE_RE.pattern)]
MAX_NAMESPACES = 100


class DelegationIn(StrictStruct):
    owner: Address
    agent: Address
    scopes: Annotated[list[Scope], Meta(min_length=1, max_length=2)]
    nonce: Nonce
    signature: Signature
    # ISO 8601, when the owner signed it (at most a few minutes ahead of this server's clock):
    # it registers only if issued after the owner's earlier delegations to the agent
    issued_at: Annotated[str, Meta(max_length=64)]
    # none: every namespace of the owner. Kept as sent here (the signature is over this
    # spelling); the delegation compares them in NFC, as every namespace is.
    namespaces: Annotated[list[Name], Meta(min_length=1, max_length=MAX_NAMESPACES)] | None = None
    expires_at: str | None = None  # ISO 8601, in the future; none: until revoked


class AgentKey(Struct, kw_only=True):
    id: str
    owner: str
    agent: str
    scopes: list[Scope]
    issued_at: str  # when the owner signed it (a newer one replaces it, never an older one)
    created_at: str
    namespaces: list[str] | UnsetType = UNSET  # absent: every namespace
    expires_at: str | UnsetType = UNSET


class AgentKeyList(Struct):
    given: list[AgentKey]  # by the caller as owner, live ones
    held: list[AgentKey]  # to the caller as agent, live ones


class AgentKeyRevoked(Struct):
    id: str
    revoked: bool


class NonceCancelled(Struct, kw_only=True):
    nonce: str
    cancelled: bool  # true: a delegation signed with this nonce never registers
    revoked: str | UnsetType = UNSET  # the id of the live delegation it ended, if registered


def agent_key_to_wire(row: Any) -> AgentKey:
    return AgentKey(
        id=str(row["id"]),
        owner=row["owner"],
        agent=row["agent"],
        scopes=list(row["scopes"]),
        issued_at=iso(row["issued_at"]),
        created_at=iso(row["created_at"]),
        namespaces=absent_if_none(None if row["namespaces"] is None else list(row["namespaces"])),
        expires_at=absent_if_none(iso(row["expires_at"])),
    )
