"""Authorization read off the request, once: who acts, for which owner, and how far they reach.

- `owner_named`: the owner a grantee names (x-memory-owner), when it is not the caller;
- `Acting` (the `acting` dependency, `acting_of`): all of it, resolved once per request; its
  `reach` gives the wallet a memory route works on and the `Actor` working there, after the
  grant or the delegation covers the namespace (403 otherwise); writes are then recorded as
  theirs;
- `only_where_grants_reach`: the app-level guard keeping both to the routes marked
  `acts_for_owner()` (app/http/markers.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.handlers.base import BaseRouteHandler

from app.access.rules import COVERED_ROUTES, OWNER, Actor, kept_to
from app.core import provenance
from app.core.contract import DEFAULT_NAMESPACE
from app.core.errors import Forbidden
from app.core.request_values import MEMORY_OWNER_HEADER, WALLET_OWNER_HEADER, Delegation
from app.grants.schemas import Access
from app.grants.service import GrantService
from app.history import service as history
from app.http.markers import serves_for_owner
from app.http.params import WalletRequest
from app.http.state import state_of


def owner_named(request: WalletRequest) -> str | None:
    """The owner a request names (x-memory-owner), when it is not the caller."""
    owner = request.headers.get(MEMORY_OWNER_HEADER)
    return owner if owner and owner.lower() != request.user else None


async def only_where_grants_reach(connection: ASGIConnection[Any, Any, Any, Any],
                                  handler: BaseRouteHandler) -> None:  # fmt: skip
    """A request naming another owner reaches only the routes a grant covers: deleting a
    namespace, managing grants, relations, history, MCP and the rest answer 403. So does an
    agent key acting for its owner (x-wallet-owner), which never uses the owner's grants.
    A coroutine although it awaits nothing: Litestar runs a plain function guard in a worker
    thread, a hop on every request (tests/http/test_no_thread_hops.py)."""
    if state_of(connection.scope).get("delegation") is not None:
        only_where_delegations_reach(connection, handler)
        return
    owner = connection.headers.get(MEMORY_OWNER_HEADER)
    if not owner or serves_for_owner(handler):
        return
    caller = connection.scope.get("user")
    if isinstance(caller, str) and owner.lower() == caller:
        return
    raise Forbidden(
        "A grant covers recall, list, get, store, update and context only",
        {"header": MEMORY_OWNER_HEADER},
    )


def only_where_delegations_reach(connection: ASGIConnection[Any, Any, Any, Any],
                                 handler: BaseRouteHandler) -> None:  # fmt: skip
    if connection.headers.get(MEMORY_OWNER_HEADER):
        raise Forbidden(
            f"An agent key acts for its owner only: send {WALLET_OWNER_HEADER} or"
            f" {MEMORY_OWNER_HEADER}, not both",
            {"header": MEMORY_OWNER_HEADER},
        )
    if not serves_for_owner(handler):
        raise Forbidden(
            f"An agent key covers {COVERED_ROUTES} only", {"header": WALLET_OWNER_HEADER}
        )


@dataclass(frozen=True)
class Acting:
    """Who acts in this request, resolved once from it (`acting_of`): the caller (for an agent
    key, the owner it acts for: app/auth/middleware.py), the other owner a grantee names
    (x-memory-owner), and the delegation an agent key acts under (x-wallet-owner); with the
    request's connection, which a grantee's reach reads its grant on."""

    caller: str
    named_owner: str | None
    delegation: Delegation | None
    grants: GrantService
    conn: asyncpg.Connection

    @property
    def agent(self) -> str | None:
        """The agent key's own address, when one acts for its owner."""
        return None if self.delegation is None else self.delegation.agent

    @property
    def for_another(self) -> bool:
        """A grantee naming an owner, or an agent key: someone acting for an owner."""
        return self.named_owner is not None or self.delegation is not None

    async def reach(self, namespace: str | None, need: Access) -> tuple[str, Actor]:
        """The wallet whose memories this request reaches, and who acts there
        (app/access/rules.py): (the caller, OWNER) for its own; (the owner, a grantee kept to the
        namespace) for a grantee naming an owner (x-memory-owner) with a live grant covering
        `need` there (403 otherwise); (the owner, an agent key kept to the namespace, or to none)
        for an agent key whose delegation covers `need` there. A grantee's or an agent's writes
        are recorded in history as theirs."""
        if self.delegation is not None:
            kept = kept_to(self.delegation, namespace, need)
            history.ACTOR.set(self.delegation.agent)
            provenance.written_as("agent", self.delegation.agent)
            return self.caller, Actor(for_owner=True, kept_to=kept)
        if self.named_owner is None:
            return self.caller, OWNER
        kept_to_namespace = namespace or DEFAULT_NAMESPACE
        wallet = await self.grants.acting_for(
            self.conn, self.caller, self.named_owner, kept_to_namespace, need
        )
        history.ACTOR.set(self.caller)
        provenance.written_as("grantee", self.caller)
        return wallet, Actor(for_owner=True, kept_to=kept_to_namespace)


def acting_of(
    request: WalletRequest,
    grants_service: NamedDependency[GrantService],
    conn: NamedDependency[asyncpg.Connection],
) -> Acting:
    """The `acting` dependency of the routes that serve an owner's memories. It takes the
    request's connection, so it is resolved once the transaction is open, never beside it
    (tests/http/test_hostile_input.py: a dependency beside the transaction could cancel it)."""
    return Acting(
        caller=request.user,
        named_owner=owner_named(request),
        delegation=state_of(request.scope).get("delegation"),
        grants=grants_service,
        conn=conn,
    )
