"""Wire structs of the console's sign-in endpoints (its pages are HTML)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct

from app.agents.schemas import MAX_NAMESPACES, Nonce, Scope
from app.core.schemas import Name, StrictStruct

Address = Annotated[str, Meta(min_length=42, max_length=42)]
Signature = Annotated[str, Meta(min_length=2, max_length=1024)]


class ChallengeIn(StrictStruct):
    address: Address


class ChallengeOut(Struct):
    challenge: dict[str, Any]  # GET /auth/nonce's shape: sign `message`, send it back as is
    message: str  # the EIP-4361 text the wallet signs (as x402's create_siwx_message writes it)


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


class AgentDraft(StrictStruct):
    """An agent key the owner is about to sign for (the team page's form)."""

    agent: Address
    scopes: Annotated[list[Scope], Meta(min_length=1, max_length=2)]
    namespaces: Annotated[list[Name], Meta(min_length=1, max_length=MAX_NAMESPACES)] | None = None
    expires_at: str | None = None


class AgentMessage(Struct):
    message: str  # what the owner's wallet signs (EIP-191), app/agents/service.py's text
    nonce: str
    issued_at: str  # sent back with the signature, as the message names it


class AgentSigned(AgentDraft, kw_only=True):
    nonce: Nonce
    signature: Signature
    issued_at: Annotated[str, Meta(max_length=64)]


class AgentAdded(Struct):
    id: str
    agent: str
