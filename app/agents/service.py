"""Agent keys that act for a wallet (delegations). An owner signs a delegation, naming the agent's
address, its scopes (`read`, `write`: which reads too), the namespaces (all when none) and an
expiry; the owner or the agent registers it. The agent then calls with its own identity and names
the owner (x-wallet-owner): the request acts as the owner (its memories, its free tier) within
the scopes, and history records the agent.

Replay: the signed message names the server and a nonce that registers once, so a delegation
cannot be registered again (after its revocation, say) nor on another server: the Server line is
this server's configured origin (ENGRAM_PUBLIC_URL), or on a server listening on loopback only
its own address, never one taken from the request's headers. It carries the time the owner
issued it: a delegation registers only when issued after every earlier one of the owner to that
agent (live, replaced, revoked or expired), so an older, broader body never replaces a newer one;
and the owner may cancel a nonce before it is registered (or revoke it, if it was). The owner header
itself is not signed: it only chooses among the delegations the calling agent holds, looked up
on every request, so a replayed agent header can do no more than the agent could; an agent that
wants replay-proof calls signs in with SIGN-IN-WITH-X.

No HTTP types here (controller.py, app/auth/middleware.py); no SQL (repository.py)."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg
from eth_account import Account
from eth_account.messages import encode_defunct

from app.agents import repository as repo
from app.agents.schemas import NONCE_PATTERN, DelegationIn
from app.auth.signature import ADDRESS_RE, is_high_s, personal_signer
from app.auth.siwx import origin_of
from app.config import ServerSettings
from app.core.errors import (
    Conflict,
    DelegationCancelled,
    DelegationNotNewer,
    Forbidden,
    InvalidInput,
    NotFound,
    PublicUrlUnset,
    id_or_not_found,
)
from app.core.request_values import WALLET_OWNER_HEADER, Delegation
from app.core.schemas import iso, nfc_names, parse_future_time, parse_time

TITLE = "Engram agent delegation"
# How far past this server's clock a delegation's issued_at may be: the owner's clock, at most
# this fast (the same leeway as an x-wallet-auth header's, app/auth/signature.py)
ISSUED_SKEW = timedelta(minutes=5)
NONCE_RE = re.compile(NONCE_PATTERN)


def delegation_message(
    server: str,
    owner: str,
    agent: str,
    scopes: Sequence[str],
    namespaces: Sequence[str] | None,
    issued_at: str,
    expires_at: str | None,
    nonce: str,
) -> str:
    """The text an owner signs (EIP-191 personal_sign). Addresses lower-case; lists and times
    as JSON, so no two different delegations read alike. Namespaces as the owner wrote them
    (the delegation keeps them in NFC, as every namespace is compared)."""
    return "\n".join((
        TITLE,
        f"Server: {server}",
        f"Owner: {owner.lower()}",
        f"Agent: {agent.lower()}",
        f"Scopes: {json.dumps(list(scopes))}",
        f"Namespaces: {json.dumps(None if namespaces is None else list(namespaces))}",
        f"Issued: {json.dumps(issued_at)}",
        f"Expires: {json.dumps(expires_at)}",
        f"Nonce: {nonce}",
    ))  # fmt: skip


def issued_now(now: datetime | None = None) -> str:
    """An issued-at for a delegation signed now (ISO 8601 UTC, milliseconds: two delegations
    signed in one second still come in order)."""
    moment = now or datetime.now(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def on_loopback(host: str) -> bool:
    """Whether a listen address is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_origin(settings: ServerSettings, bound: Sequence[object] | None) -> str:
    """The origin a delegation registered here must name (its Server line): ENGRAM_PUBLIC_URL's;
    unset, on a server listening on loopback, the address it listens on (`bound`: the ASGI
    scope's `server`, the connection's own socket; else the settings' host and port), never
    one a request's headers name; unset beyond loopback, none (503: the operator sets it)."""
    if settings.public_url:
        return origin_of(settings.public_url)
    if not on_loopback(settings.host):
        raise PublicUrlUnset(settings.host)
    host, port = (bound[0], bound[1]) if bound else (settings.host, settings.port)
    name = f"[{host}]" if ":" in str(host) else str(host)
    return f"http://{name}" if port in (80, None) else f"http://{name}:{port}"


def parse_issued(value: str, now: datetime) -> datetime:
    issued = parse_time(value, "issued_at") or now  # a str parses to a time, or raises
    if issued > now + ISSUED_SKEW:
        raise InvalidInput(
            f"issued_at is in the future (this server's clock reads {iso(now)})",
            {"field": "issued_at"},
        )
    return issued


def sign_delegation(private_key: str, message: str) -> str:
    """The owner's signature of a delegation (used by `engram wallet delegate` and tests)."""
    signed = Account.from_key(private_key).sign_message(encode_defunct(text=message))
    hex_signature: str = signed.signature.hex()
    return "0x" + hex_signature.removeprefix("0x")


def signer_of(message: str, signature: str) -> str | None:
    """The lower-cased address that signed `message`, or None for a signature that cannot be
    recovered or is the non-canonical (high-s) twin of one."""
    raw = bytes.fromhex(signature.removeprefix("0x"))
    return None if is_high_s(raw) else personal_signer(message, raw)


def nonce_registered() -> Conflict:
    return Conflict(
        "This delegation's nonce was registered before: the owner signs a new one",
        {"field": "nonce"},
    )


def check_caller_is_party(caller: str, owner: str, agent: str) -> None:
    if caller not in (owner, agent):
        raise Forbidden("Only the owner or the agent of a delegation registers it")


def check_distinct(values: Sequence[str], field: str) -> None:
    if len(set(values)) != len(values):
        raise InvalidInput(f"{field} lists a value twice", {"field": field})


def check_signed_by_owner(message: str, signature: str, owner: str, server: str) -> None:
    if signer_of(message, signature) != owner:
        raise InvalidInput(
            "signature is not the owner's over this delegation's message"
            " (docs/pages/guides/team-memory.md, agent keys;"
            f" its Server line here is {server})",
            {"field": "signature"},
        )


class AgentService:
    async def register(
        self, conn: asyncpg.Connection, caller: str, server: str, req: DelegationIn
    ) -> asyncpg.Record:
        owner, agent = req.owner.lower(), req.agent.lower()
        check_caller_is_party(caller, owner, agent)
        if owner == agent:
            raise InvalidInput("a wallet cannot delegate to itself", {"field": "agent"})
        check_distinct(req.scopes, "scopes")
        # compared as every namespace is: one spelling (NFC) per name
        namespaces = None if req.namespaces is None else nfc_names(req.namespaces)
        if namespaces is not None:
            check_distinct(namespaces, "namespaces")
        now = datetime.now(UTC)
        issued_at = parse_issued(req.issued_at, now)
        expires_at = parse_future_time(req.expires_at, "expires_at", now)
        message = delegation_message(server, owner, agent, req.scopes, req.namespaces,
                                     req.issued_at, req.expires_at, req.nonce)  # fmt: skip
        check_signed_by_owner(message, req.signature, owner, server)
        # One registration or cancellation of the owner's at a time: what is read next holds
        await repo.lock_owner(conn, owner)
        taken = await repo.nonce_taken(conn, owner, req.nonce)
        if taken == "cancelled":
            raise DelegationCancelled(req.nonce)
        if taken == "registered":
            raise nonce_registered()
        newest = await repo.newest_issued(conn, owner, agent)
        if newest is not None and issued_at <= newest:
            raise DelegationNotNewer(iso(issued_at), iso(newest))
        await repo.supersede(conn, owner, agent)
        try:
            row = await repo.insert(conn, owner, agent, req.scopes, namespaces, issued_at,
                                    expires_at, req.nonce, req.signature)  # fmt: skip
        except asyncpg.UniqueViolationError:  # another registration for the agent committed first
            raise Conflict(
                "Another delegation to this agent was registered at the same time; send it again"
            ) from None
        if row is None:
            raise nonce_registered()
        return row

    async def cancel(self, conn: asyncpg.Connection, owner: str, nonce: str) -> UUID | None:
        """Take the owner's nonce for good, so the delegation signed with it never registers;
        revoke it if it is registered and live (its id). Cancelling again changes nothing."""
        if not NONCE_RE.match(nonce):
            raise InvalidInput("nonce must be 8 to 128 of A-Z a-z 0-9 _ -", {"field": "nonce"})
        await repo.lock_owner(conn, owner)
        await repo.cancel(conn, owner, nonce)
        return await repo.revoke_nonce(conn, owner, nonce)

    async def of(self, conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
        return await repo.live_of(conn, wallet)

    async def revoke(self, conn: asyncpg.Connection, wallet: str, raw_id: str) -> UUID:
        delegation_id = id_or_not_found(raw_id, "Agent key")
        if not await repo.revoke(conn, wallet, delegation_id):
            raise NotFound(f"Agent key {raw_id} not found")
        return delegation_id


async def delegation_for(conn: asyncpg.Connection, agent: str, owner: str) -> Delegation:
    """The live delegation that lets `agent` act for `owner`; 403 when there is none (never
    given, revoked, expired, or given by another owner)."""
    if not ADDRESS_RE.match(owner):
        raise InvalidInput(
            f"{WALLET_OWNER_HEADER} must be a wallet address", {"header": WALLET_OWNER_HEADER}
        )
    owner = owner.lower()
    row = await repo.live_one(conn, owner, agent)
    if row is None:
        raise Forbidden(
            f"No live delegation of {owner} to this agent", {"owner": owner, "agent": agent}
        )
    namespaces = row["namespaces"]
    return Delegation(
        agent=agent,
        owner=owner,
        scopes=frozenset(row["scopes"]),
        namespaces=None if namespaces is None else tuple(namespaces),
    )
