"""HTTP for agent keys (free calls): POST /v1/agents, GET /v1/agents, DELETE /v1/agents/{id},
DELETE /v1/agents/nonces/{nonce} (the owner cancels a delegation it signed)."""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from app.agents.schemas import (
    AgentKey,
    AgentKeyList,
    AgentKeyRevoked,
    DelegationIn,
    NonceCancelled,
    agent_key_to_wire,
)
from app.agents.service import AgentService, server_origin
from app.core.schemas import absent_if_none
from app.http.openapi import error_responses
from app.http.params import Conn, WalletRequest

Agents = NamedDependency[AgentService]


class AgentController(Controller):
    path = "/v1/agents"
    tags = ["agents"]

    @post(
        "",
        status_code=HTTP_201_CREATED,
        responses=error_responses(
            conflict="The delegation's nonce was registered or cancelled before, or the owner"
            " registered a delegation to this agent issued at the same time or later",
            forbidden="The caller is neither the delegation's owner nor its agent",
        ),
    )
    async def register_agent(
        self, request: WalletRequest, conn: Conn, agents_service: Agents,
        data: JSONBody[DelegationIn],
    ) -> AgentKey:  # fmt: skip
        """Register a delegation the owner signed (the owner or the agent calls): the agent
        then acts for the owner within its scopes. It replaces the owner's earlier one to the
        same agent, and only one issued earlier. Its Server line names ENGRAM_PUBLIC_URL's
        origin (on a server listening on loopback without it, the address it listens on); a
        server listening beyond loopback without ENGRAM_PUBLIC_URL answers 503."""
        server = server_origin(request.app.state.settings.server, request.scope.get("server"))
        return agent_key_to_wire(await agents_service.register(conn, request.user, server, data))

    @get("")
    async def list_agents(
        self, request: WalletRequest, conn: Conn, agents_service: Agents
    ) -> AgentKeyList:
        """The caller's live delegations: given (as owner) and held (as agent)."""
        rows = await agents_service.of(conn, request.user)
        return AgentKeyList(
            given=[agent_key_to_wire(r) for r in rows if r["owner"] == request.user],
            held=[agent_key_to_wire(r) for r in rows if r["agent"] == request.user],
        )

    @delete(
        "/{agent_key_id:str}",
        status_code=HTTP_200_OK,
        responses=error_responses(not_found="No live delegation with this id given or held"),
    )
    async def revoke_agent(
        self, request: WalletRequest, conn: Conn, agents_service: Agents,
        agent_key_id: FromPath[str],
    ) -> AgentKeyRevoked:  # fmt: skip
        """Revoke a delegation (its owner, or the agent giving it up): it ends on the next
        request."""
        revoked = await agents_service.revoke(conn, request.user, agent_key_id)
        return AgentKeyRevoked(id=str(revoked), revoked=True)

    @delete("/nonces/{nonce:str}", status_code=HTTP_200_OK)
    async def cancel_nonce(
        self, request: WalletRequest, conn: Conn, agents_service: Agents, nonce: FromPath[str]
    ) -> NonceCancelled:
        """Cancel a delegation the caller signed as owner, by its nonce: it never registers
        (a 409 if anyone sends it), and if it is registered and live it is revoked."""
        revoked = await agents_service.cancel(conn, request.user, nonce)
        ended = None if revoked is None else str(revoked)
        return NonceCancelled(nonce=nonce, cancelled=True, revoked=absent_if_none(ended))
