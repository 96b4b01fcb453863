"""The console's team page: grants given and received, and agent keys (delegations) signed in
the owner's browser wallet."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_303_SEE_OTHER

from app.agents.schemas import DelegationIn
from app.agents.service import AgentService, delegation_message, issued_now
from app.console.pages import (
    CSRF_HEADER,
    CsrfForm,
    Form,
    PageController,
    Session,
    check_csrf,
    converted,
    delegation_server,
    render,
    see_other,
)
from app.console.schemas import AgentAdded, AgentDraft, AgentMessage, AgentSigned
from app.core.schemas import parse_future_time
from app.grants.schemas import GrantIn
from app.grants.service import GrantService
from app.http.body import takes_form
from app.http.params import Conn


class GrantForm(CsrfForm, kw_only=True):
    grantee: str
    namespace: str
    access: str
    expires_at: str = ""


class ConsoleTeamController(PageController):
    """Team memory: grants and agent keys."""

    @get("/team")
    async def team(
        self, conn: Conn, session: Session, grants_service: NamedDependency[GrantService],
        agents_service: NamedDependency[AgentService],
    ) -> Template:  # fmt: skip
        """Team memory: the grants given and received, and the agent keys (delegations)."""
        grants = await grants_service.of(conn, session.wallet)
        keys = await agents_service.of(conn, session.wallet)
        return render(
            "team.html", session,
            given=[g for g in grants if g["owner"] == session.wallet],
            received=[g for g in grants if g["owner"] != session.wallet],
            keys=keys,
        )  # fmt: skip

    @post("/team/grants", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def grant(
        self, conn: Conn, session: Session, grants_service: NamedDependency[GrantService],
        data: Annotated[GrantForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        fields = {"grantee": data.grantee.strip(), "namespace": data.namespace.strip(),
                  "access": data.access, "expires_at": data.expires_at.strip() or None}  # fmt: skip
        await grants_service.grant(conn, session.wallet, converted(fields, GrantIn, "grant"))
        return see_other("/console/team")

    @post("/team/grants/{grant_id:str}/revoke", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def revoke_grant(
        self, conn: Conn, session: Session, grants_service: NamedDependency[GrantService],
        grant_id: FromPath[str], data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        await grants_service.revoke(conn, session.wallet, grant_id)
        return see_other("/console/team")

    @post("/team/agents/message", status_code=HTTP_200_OK)
    async def agent_message(
        self, request: Request[Any, Any, State], session: Session, data: JSONBody[AgentDraft]
    ) -> AgentMessage:
        """The delegation text the owner's browser wallet signs for a new agent key."""
        check_csrf(session, request.headers.get(CSRF_HEADER))
        # an expiry POST /v1/agents would refuse is refused before the wallet is asked to sign
        parse_future_time(data.expires_at, "expires_at", datetime.now(UTC))
        nonce, issued_at = secrets.token_hex(16), issued_now()
        message = delegation_message(
            delegation_server(request), session.wallet, data.agent, data.scopes, data.namespaces,
            issued_at, data.expires_at, nonce,
        )  # fmt: skip
        return AgentMessage(message, nonce, issued_at)

    @post("/team/agents", status_code=HTTP_201_CREATED)
    async def add_agent(
        self, request: Request[Any, Any, State], conn: Conn, session: Session,
        agents_service: NamedDependency[AgentService], data: JSONBody[AgentSigned],
    ) -> AgentAdded:  # fmt: skip
        """Register the agent key the owner signed for (POST /v1/agents's rules)."""
        check_csrf(session, request.headers.get(CSRF_HEADER))
        req = DelegationIn(
            owner=session.wallet, agent=data.agent, scopes=data.scopes, nonce=data.nonce,
            signature=data.signature, issued_at=data.issued_at, namespaces=data.namespaces,
            expires_at=data.expires_at,
        )  # fmt: skip
        row = await agents_service.register(conn, session.wallet, delegation_server(request), req)
        return AgentAdded(str(row["id"]), row["agent"])

    @post("/team/agents/{key_id:str}/revoke", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def revoke_agent(
        self, conn: Conn, session: Session, agents_service: NamedDependency[AgentService],
        key_id: FromPath[str], data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        await agents_service.revoke(conn, session.wallet, key_id)
        return see_other("/console/team")
