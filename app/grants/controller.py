"""HTTP for grants (free calls): POST /v1/grants, GET /v1/grants, DELETE /v1/grants/{id}; and
the guard that keeps an owner named in `x-memory-owner` to the routes a grant covers."""

from __future__ import annotations

from typing import Any

import asyncpg
from litestar import Controller, delete, get, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.handlers.base import BaseRouteHandler
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from app.agents import service as agents
from app.core.errors import Forbidden
from app.core.request_values import MEMORY_OWNER_HEADER, WALLET_OWNER_HEADER
from app.grants.schemas import (
    Access,
    Grant,
    GrantIn,
    GrantList,
    GrantRevoked,
    grant_to_wire,
)
from app.grants.service import GrantService
from app.history import service as history
from app.http.openapi import error_responses
from app.http.params import Conn, WalletRequest
from app.http.state import state_of
from app.memory import provenance
from app.memory.actor import OWNER, Actor
from app.memory.schemas import DEFAULT_NAMESPACE

Grants = NamedDependency[GrantService]
# Handler opt: the route serves a grantee that names an owner (recall, list, get, store,
# update, context); every other route refuses one (app-level guard below).
ACTS_FOR_OWNER_OPT = "acts_for_owner"


def acts_for_owner() -> dict[str, Any]:
    return {ACTS_FOR_OWNER_OPT: True}


def owner_named(request: WalletRequest) -> str | None:
    """The owner a request names (x-memory-owner), when it is not the caller."""
    owner = request.headers.get(MEMORY_OWNER_HEADER)
    return owner if owner and owner.lower() != request.user else None


def acting_agent(request: WalletRequest) -> str | None:
    """The agent key's own address, when one acts for its owner in this request."""
    delegation = state_of(request.scope).get("delegation")
    return None if delegation is None else delegation.agent


def only_where_grants_reach(connection: ASGIConnection[Any, Any, Any, Any],
                            handler: BaseRouteHandler) -> None:  # fmt: skip
    """A request naming another owner reaches only the routes a grant covers: deleting a
    namespace, managing grants, relations, history, MCP and the rest answer 403. So does an
    agent key acting for its owner (x-wallet-owner), which never uses the owner's grants."""
    if state_of(connection.scope).get("delegation") is not None:
        only_where_delegations_reach(connection, handler)
        return
    owner = connection.headers.get(MEMORY_OWNER_HEADER)
    if not owner or handler.opt.get(ACTS_FOR_OWNER_OPT):
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
    if not handler.opt.get(ACTS_FOR_OWNER_OPT):
        raise Forbidden(
            f"An agent key covers {agents.COVERED_ROUTES} only", {"header": WALLET_OWNER_HEADER}
        )


async def reached(
    request: WalletRequest,
    conn: asyncpg.Connection,
    grants: GrantService,
    namespace: str | None,
    need: Access,
) -> tuple[str, Actor]:
    """The wallet whose memories this request reaches, and who acts there (app/memory/actor.py):
    (the caller, OWNER) for its own; (the owner, a grantee kept to the namespace) for a grantee
    naming an owner (x-memory-owner) with a live grant covering `need` there (403 otherwise);
    (the owner, an agent key kept to the namespace, or to none) for an agent key whose
    delegation covers `need` there. A grantee's or an agent's writes are recorded in history as
    theirs."""
    delegation = state_of(request.scope).get("delegation")
    if delegation is not None:
        kept = agents.kept_to(delegation, namespace, need)
        history.ACTOR.set(delegation.agent)
        provenance.written_as("agent", delegation.agent)
        return request.user, Actor(for_owner=True, kept_to=kept)
    owner = owner_named(request)
    if owner is None:
        return request.user, OWNER
    kept_to = namespace or DEFAULT_NAMESPACE
    wallet = await grants.acting_for(conn, request.user, owner, kept_to, need)
    history.ACTOR.set(request.user)
    provenance.written_as("grantee", request.user)
    return wallet, Actor(for_owner=True, kept_to=kept_to)


class GrantController(Controller):
    path = "/v1/grants"
    tags = ["grants"]

    @post("", status_code=HTTP_201_CREATED)
    async def create_grant(
        self, request: WalletRequest, conn: Conn, grants_service: Grants, data: JSONBody[GrantIn]
    ) -> Grant:
        """Grant another wallet `read` or `write` on one of the caller's namespaces."""
        return grant_to_wire(await grants_service.grant(conn, request.user, data))

    @get("")
    async def list_grants(
        self, request: WalletRequest, conn: Conn, grants_service: Grants
    ) -> GrantList:
        """The caller's live grants: given and received."""
        rows = await grants_service.of(conn, request.user)
        return GrantList(
            given=[grant_to_wire(r) for r in rows if r["owner"] == request.user],
            received=[grant_to_wire(r) for r in rows if r["grantee"] == request.user],
        )

    @delete(
        "/{grant_id:str}",
        status_code=HTTP_200_OK,
        responses=error_responses(not_found="No live grant with this id given by the caller"),
    )
    async def revoke_grant(
        self, request: WalletRequest, conn: Conn, grants_service: Grants, grant_id: FromPath[str]
    ) -> GrantRevoked:
        """Revoke a grant the caller gave; the grantee loses it on its next request."""
        revoked = await grants_service.revoke(conn, request.user, grant_id)
        return GrantRevoked(id=str(revoked), revoked=True)
