"""HTTP for the console (/console): server-rendered pages over the same services and access
rules as the REST API, a session cookie for identity (app/console/service.py).

Memory content is untrusted (agents and teammates write it): the templates autoescape it, the
scripts put it in the page as text only, and the Content-Security-Policy allows no inline
script. Every state-changing request needs the session's CSRF token, and the middleware
(app/console/middleware.py) refuses the cookie with a foreign Origin everywhere.

Console calls are free and unmetered: the owner looking at their own memories. They count
against the wallet's rate limit like any request.
"""

from __future__ import annotations

import functools
import logging
import math
import secrets
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast
from urllib.parse import urlencode, urlsplit

import asyncpg
import msgspec
from litestar import Controller, Request, Response, Router, get, post
from litestar.datastructures import Cookie, State
from litestar.di import NamedDependency, Provide
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, FromQuery, JSONBody, QueryParameter
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_303_SEE_OTHER
from pydantic import ValidationError
from x402.extensions.sign_in_with_x import SIWxPayload

from app.agents.schemas import DelegationIn
from app.agents.service import AgentService, delegation_message, issued_now, server_origin
from app.auth.middleware import origin_of_request
from app.auth.signature import ADDRESS_RE, WalletAuthError
from app.auth.siwx import MAX_DOMAIN_CHARS, SIWX_HEADER, SiwxVerifier
from app.console.middleware import COOKIE_NAME, STATIC_PATH, foreign_origin
from app.console.schemas import (
    AgentAdded,
    AgentDraft,
    AgentMessage,
    AgentSigned,
    ChallengeIn,
    ChallengeOut,
    LinkOut,
    SignedIn,
    SignInIn,
)
from app.console.service import LINK_TTL_SECONDS, ConsoleSessions
from app.core.errors import ApiError, Forbidden, InvalidInput, Unauthorized
from app.core.request_values import ConsoleSession
from app.core.schemas import parse_future_time
from app.grants.schemas import GrantIn
from app.grants.service import GrantService
from app.guard import service as guard
from app.history import service as history
from app.http.body import takes_form
from app.http.errors import handle_api_error
from app.http.markers import public, unlimited
from app.http.params import Conn
from app.http.state import state_of
from app.http.transaction import request_transaction
from app.memory.repository import LIST_SORTS, ListOrder
from app.memory.schemas import (
    MAX_RECALL_QUERY_CHARS,
    MemoryType,
    RecallIn,
    UpdateIn,
    split_tags,
    tags_of,
)
from app.memory.service import MemoryService, list_filter, parse_memory_id
from app.payments import repository as payments
from app.relations.service import RelationService
from app.usage.service import UsageService, report_days

log = logging.getLogger("engram.console")
HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
SCRIPTS = (
    "signin.js",
    "memory.js",
    "usage.js",
    "team.js",
    "link.js",
)  # built by setup.py from web/ (npm)
PAGE_SIZE = 50
GRAPH_DEPTH = 2
GRAPH_LIMIT = 50
SEARCH_LIMIT = 20
USAGE_DAYS = 30
RECEIPTS = 50
MEMORY_TYPES: tuple[str, ...] = MemoryType.__args__  # type: ignore[attr-defined]
T = TypeVar("T")
CSRF_HEADER = "x-csrf-token"  # the console's scripts send the page's token in it
PUBLIC = public()  # no wallet header: the console's cookie says who it is

Memories = NamedDependency[MemoryService]


class NotSignedIn(Unauthorized):
    """A console page without a live session: the browser goes to the sign-in page."""


def signed_in(request: Request[Any, Any, State]) -> ConsoleSession:
    session = state_of(request.scope).get("console_session")
    if session is None:
        raise NotSignedIn("Sign in to the console first")
    return session


Session = NamedDependency[ConsoleSession]


async def transaction_after_session(
    request: Request[Any, Any, State], session: Session
) -> AsyncGenerator[asyncpg.Connection, None]:
    """The request's transaction, opened once the session is known: a sign-in check failing
    beside it would cancel it half-way (app/http/transaction.py)."""
    async with request_transaction(request) as conn:
        yield conn


def check_csrf(session: ConsoleSession, submitted: str | None) -> None:
    if not session.csrf_matches(submitted):
        raise Forbidden(
            "This console request lacks its CSRF token (reload the page and try again)",
            {"field": "csrf_token"},
        )


def own_origin(request: Request[Any, Any, State]) -> str:
    return origin_of_request(request.scope, request.app.state.settings.server.public_url)


def delegation_server(request: Request[Any, Any, State]) -> str:
    """The Server line of a delegation registered here (POST /v1/agents's rule)."""
    return server_origin(request.app.state.settings.server, request.scope.get("server"))


def require_own_origin(request: Request[Any, Any, State]) -> None:
    """Sign-in requests carry no session yet: they must come from the console's own page."""
    public_url = request.app.state.settings.server.public_url
    if request.headers.get("origin") is None or foreign_origin(
        request.scope, request.headers, public_url
    ):
        raise Forbidden("Sign in from Engram's own console page", {"header": "origin"})


def session_cookie(request: Request[Any, Any, State], token: str, max_age: int) -> Cookie:
    public_url = request.app.state.settings.server.public_url or ""
    secure = request.url.scheme == "https" or public_url.startswith("https://")
    return Cookie(
        key=COOKIE_NAME, value=token, max_age=max_age, path="/", httponly=True,
        samesite="strict", secure=secure,
    )  # fmt: skip


def cleared_cookie() -> Cookie:
    return Cookie(
        key=COOKIE_NAME, value="", max_age=0, path="/", httponly=True, samesite="strict",
        expires=0,
    )  # fmt: skip


def see_other(path: str) -> Redirect:
    """Where a form's POST sends the browser next (a GET)."""
    return Redirect(path, status_code=HTTP_303_SEE_OTHER)


def render(
    name: str, session: ConsoleSession | None, *, status_code: int = HTTP_200_OK, **context: Any
) -> Template:  # fmt: skip
    return Template(
        template_name=name,
        context={"session": session, "csrf_token": session.csrf_token if session else "",
                 "scripts_built": scripts_built(), **context},
        status_code=status_code,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# sign-in


class LinkForm(msgspec.Struct, kw_only=True):
    """What the link's page posts: nothing (its script, or its button), or, from the page that
    asks before a switch of wallet, `confirm=switch` with the signed-in session's CSRF token."""

    confirm: str = ""
    csrf_token: str = ""

    def confirms_switch_from(self, session: ConsoleSession | None) -> bool:
        return (
            session is not None and self.confirm == "switch"
            and session.csrf_matches(self.csrf_token)
        )  # fmt: skip


class ConsoleAuthController(Controller):
    path = "/console/auth"
    opt = PUBLIC

    @post("/challenge", status_code=HTTP_200_OK)
    async def challenge(
        self, request: Request[Any, Any, State], conn: Conn, siwx: NamedDependency[SiwxVerifier],
        data: JSONBody[ChallengeIn],
    ) -> ChallengeOut:  # fmt: skip
        """A SIGN-IN-WITH-X challenge for a browser wallet, and the message to sign."""
        require_own_origin(request)
        if not ADDRESS_RE.match(data.address):
            raise InvalidInput("address must be a 0x-prefixed 20-byte hex address",
                               {"field": "address"})  # fmt: skip
        origin = own_origin(request)
        if len(urlsplit(origin).netloc) > MAX_DOMAIN_CHARS:  # no proof for it could sign in
            raise InvalidInput(f"The Host header is longer than {MAX_DOMAIN_CHARS} characters",
                               {"header": "host"})  # fmt: skip
        challenge = await siwx.challenge(conn, origin)
        # Engram's own linear formatter, not x402's create_siwx_message: that one runs siwe's
        # ABNF grammar over the URI, which comes from the Host header here (app/auth/siwx.py).
        message = siwx.message_for(challenge, data.address)
        return ChallengeOut(msgspec.to_builtins(challenge), message)

    @post("/signin", status_code=HTTP_200_OK)
    async def sign_in(
        self, request: Request[Any, Any, State], conn: Conn, siwx: NamedDependency[SiwxVerifier],
        console_sessions: NamedDependency[ConsoleSessions], data: JSONBody[SignInIn],
    ) -> Response[SignedIn]:  # fmt: skip
        """The challenge back, signed by the browser wallet: a session cookie."""
        require_own_origin(request)
        origin = own_origin(request)
        try:
            payload = SIWxPayload.model_validate(
                {**data.challenge, "address": data.address, "signature": data.signature}
            )
            wallet = await siwx.verify_payload(conn, payload, origin)
        except ValidationError as exc:
            raise InvalidInput("The signed challenge is malformed", {"field": "challenge"}) from exc
        except WalletAuthError as exc:
            raise Unauthorized(f"Sign-in refused: {exc}") from exc
        started = await console_sessions.start(conn, wallet)
        return Response(
            SignedIn(wallet, "/console/memories"),
            cookies=[session_cookie(request, started.token, console_sessions.ttl_seconds)],
        )

    @post("/links", status_code=HTTP_200_OK)
    async def link(
        self, request: Request[Any, Any, State], conn: Conn, siwx: NamedDependency[SiwxVerifier],
        console_sessions: NamedDependency[ConsoleSessions],
    ) -> LinkOut:  # fmt: skip
        """`engram console`: a SIGN-IN-WITH-X header buys a one-time sign-in link."""
        proof = request.headers.get(SIWX_HEADER)
        if not proof:
            raise Unauthorized("Send a SIGN-IN-WITH-X header (nonce from GET /auth/nonce)")
        origin = own_origin(request)
        try:
            wallet = await siwx.verify(conn, proof, origin)
        except WalletAuthError as exc:
            raise Unauthorized(f"Sign-in refused: {exc}") from exc
        token = await console_sessions.issue_link(conn, wallet)
        return LinkOut(f"{origin}/console/auth/link/{token}", wallet, LINK_TTL_SECONDS)

    @get("/link/{token:str}")
    async def link_page(self, token: FromPath[str]) -> Template:
        """A one-time link from `engram console`: a page whose script (or button) posts it back.
        Opening the link spends nothing, so a chat app that fetches links to preview them
        cannot use it up; only a browser that runs the page signs in."""
        return render("link.html", None, token=token)

    @post("/link/{token:str}", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def open_link(
        self, request: Request[Any, Any, State], conn: Conn, token: FromPath[str],
        console_sessions: NamedDependency[ConsoleSessions],
        data: Annotated[LinkForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Response[Any]:  # fmt: skip
        """Spend the link: a session for its wallet, once, from the link's own page.

        A browser signed in as another wallet is asked first, and the server holds to it (the
        page's script posts the link at once, with no confirmation): the answer is a page that
        names both wallets, the link unspent and the session kept, until the person confirms
        from that page (its `confirm` field and the session's CSRF token). Only then does the
        link end the old session and start its own. Else a link someone else sent would sign a
        browser in to their wallet without a word (login CSRF)."""
        require_own_origin(request)
        current: ConsoleSession | None = state_of(request.scope).get("console_session")
        wallet = await console_sessions.link_wallet(conn, token)
        switching = wallet is not None and current is not None and current.wallet != wallet
        if switching and not data.confirms_switch_from(current):
            return render("switch.html", current, token=token, wallet=wallet)
        if wallet is None or await console_sessions.redeem_link(conn, token) is None:
            return render(
                "signin.html", None, status_code=401,
                error="This sign-in link was used already or has expired: run `engram console`"
                      " again for a new one.",
            )  # fmt: skip
        if switching:
            await console_sessions.end(conn, state_of(request.scope)["console_token"])
        started = await console_sessions.start(conn, wallet)
        return Redirect(
            "/console/memories",
            status_code=HTTP_303_SEE_OTHER,
            cookies=[session_cookie(request, started.token, console_sessions.ttl_seconds)],
        )


# ---------------------------------------------------------------------------------------------
# pages


class CsrfForm(msgspec.Struct, kw_only=True):
    csrf_token: str = ""


class EditForm(CsrfForm, kw_only=True):
    content: str
    importance: str
    memory_type: str
    tags: str = ""
    namespace: str


class PinForm(CsrfForm, kw_only=True):
    pinned: str


class GrantForm(CsrfForm, kw_only=True):
    grantee: str
    namespace: str
    access: str
    expires_at: str = ""


Form = Body(media_type=RequestEncodingType.URL_ENCODED)


@dataclass(frozen=True)
class ListQuery:
    """The memories view's filters, as the page's form sends them (blank: no filter)."""

    namespace: str
    memory_type: str
    tags: str
    pinned: str
    sort: str
    order: str
    page: int
    q: str

    def link(self, **changes: Any) -> str:
        values = {**self.__dict__, **changes}
        kept = {k: v for k, v in values.items() if v != "" and (k, v) != ("page", 1)}
        return "/console/memories" + (f"?{urlencode(kept)}" if kept else "")


def bar(value: float) -> float:
    return round(min(max(value, 0.0), 1.0), 4)


def signal_bars(signals: Any) -> list[tuple[str, float, float]]:
    """The four signals a recall score is made of: (name, bar 0..1, value)."""
    return [
        ("vector", bar(signals.vector), signals.vector),
        ("keyword", bar(signals.keyword), signals.keyword),
        ("recency", bar(signals.recency), signals.recency),
        ("importance", bar(signals.effective_importance), signals.effective_importance),
    ]


class ConsolePagesController(Controller):
    path = "/console"
    opt = PUBLIC
    dependencies = {
        "session": Provide(signed_in, sync_to_thread=False),
        "conn": Provide(transaction_after_session),
    }

    @get("/", include_in_schema=False)
    async def home(self, request: Request[Any, Any, State]) -> Redirect:
        signed = state_of(request.scope).get("console_session") is not None
        return Redirect("/console/memories" if signed else "/console/signin")

    @get("/signin")
    async def signin_page(self, request: Request[Any, Any, State]) -> Response[Any]:
        if state_of(request.scope).get("console_session") is not None:
            return Redirect("/console/memories")
        return render("signin.html", None)

    @post("/signout", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def sign_out(
        self, request: Request[Any, Any, State], conn: Conn, session: Session,
        console_sessions: NamedDependency[ConsoleSessions],
        data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        await console_sessions.end(conn, state_of(request.scope)["console_token"])
        return Redirect("/console/signin", status_code=HTTP_303_SEE_OTHER,
                        cookies=[cleared_cookie()])  # fmt: skip

    @get("/memories")
    async def memories(
        self, conn: Conn, session: Session, memory_service: Memories,
        namespace: FromQuery[str] = "", memory_type: FromQuery[str] = "",
        tags: FromQuery[str] = "", pinned: FromQuery[str] = "",
        sort: FromQuery[str] = "created_at", order: FromQuery[str] = "desc",
        page_number: Annotated[int, QueryParameter(name="page")] = 1,
        q: Annotated[str, QueryParameter(max_length=MAX_RECALL_QUERY_CHARS)] = "",
    ) -> Template:  # fmt: skip
        query = ListQuery(namespace, memory_type, tags, pinned, sort, order, page_number, q)
        checked = _checked(query)
        names = await memory_service.namespace_names(conn, session.wallet)
        common: dict[str, Any] = {"query": query, "namespaces": names,
                  "memory_types": MEMORY_TYPES, "sorts": LIST_SORTS}  # fmt: skip
        if query.q.strip():
            found = await memory_service.recall(
                conn, session.wallet,
                RecallIn(query=query.q.strip(), limit=SEARCH_LIMIT,
                         namespace=query.namespace or None,
                         memory_type=cast(Any, checked.memory_type), tags=checked.tags or None),
            )  # fmt: skip
            results = [
                {"row": r.row, "tags": tags_of(r.row), "score": r.signals.score,
                 "bars": signal_bars(r.signals)}
                for r in found.recalled
            ]  # fmt: skip
            return render("memories.html", session, results=results, searched=True, **common)
        f = list_filter(
            session.wallet, namespace=query.namespace or None, memory_type=checked.memory_type,
            tags=checked.tags or None, pinned=checked.pinned,
        )  # fmt: skip
        offset = (query.page - 1) * PAGE_SIZE
        rows, total = await memory_service.list_page(
            conn, f, PAGE_SIZE, offset, ListOrder(checked.sort, query.order == "desc")
        )
        pages = max(1, math.ceil(total / PAGE_SIZE))
        items = [{"row": r, "tags": tags_of(r)} for r in rows]
        return render("memories.html", session, items=items, total=total, pages=pages,
                    searched=False, **common)  # fmt: skip

    @get("/memories/{memory_id:str}")
    async def memory(
        self, conn: Conn, session: Session, memory_service: Memories,
        relations_service: NamedDependency[RelationService], memory_id: FromPath[str],
    ) -> Template:  # fmt: skip
        row = await memory_service.get(conn, session.wallet, memory_id)
        changes = await history.history_of(conn, session.wallet, row["id"])
        graph = await relations_service.graph(
            conn, session.wallet, str(row["id"]), GRAPH_DEPTH, GRAPH_LIMIT, None
        )
        timeline = [
            {"action": c["action"], "at": c["created_at"], "actor": c["actor"],
             "changes": sorted(history.readable(c["changes"]).items())}
            for c in reversed(changes)
        ]  # fmt: skip
        graph_data = {
            "root": str(row["id"]),
            "nodes": [{"id": str(n["id"]), "content": n["content"],
                       "memory_type": n["memory_type"], "depth": int(n["depth"])}
                      for n in graph.nodes],
            "edges": [{"id": str(e["id"]), "source": str(e["source_id"]),
                       "target": str(e["target_id"]), "relation_type": e["relation_type"]}
                      for e in graph.edges],
        }  # fmt: skip
        contents = {str(n["id"]): n["content"] for n in graph.nodes}
        return render("memory.html", session, row=row, tags=tags_of(row), timeline=timeline,
                      graph=graph_data, contents=contents, memory_types=MEMORY_TYPES)  # fmt: skip

    @post("/memories/{memory_id:str}", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def edit(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str],
        data: Annotated[EditForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        patch = _edit_patch(data)
        row, _ = await memory_service.update(conn, session.wallet, memory_id, patch)
        return see_other(f"/console/memories/{row['id']}")

    @post("/memories/{memory_id:str}/pin", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def pin(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str],
        data: Annotated[PinForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        if data.pinned not in ("true", "false"):
            raise InvalidInput("pinned must be true or false", {"field": "pinned"})
        row, _ = await memory_service.update(
            conn, session.wallet, memory_id, UpdateIn(pinned=data.pinned == "true")
        )
        return see_other(f"/console/memories/{row['id']}")

    @post("/memories/{memory_id:str}/approve", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def approve(
        self, conn: Conn, session: Session, memory_id: FromPath[str],
        data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        """Release a memory held for review (app/guard/service.py), recorded in its history."""
        check_csrf(session, data.csrf_token)
        row = await guard.approve(conn, session.wallet, parse_memory_id(memory_id))
        return see_other(f"/console/memories/{row['id']}")

    @get("/memories/{memory_id:str}/delete")
    async def confirm_delete(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str]
    ) -> Template:
        row = await memory_service.get(conn, session.wallet, memory_id)
        return render("delete.html", session, row=row)

    @post("/memories/{memory_id:str}/delete", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def delete(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str],
        data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        await memory_service.delete(conn, session.wallet, memory_id)
        return see_other("/console/memories")

    @get("/usage")
    async def usage(
        self, conn: Conn, session: Session, usage_service: NamedDependency[UsageService]
    ) -> Template:
        today = datetime.now(UTC).date()
        first, last = report_days(str(today - timedelta(days=USAGE_DAYS - 1)), str(today), "day")
        report = await usage_service.report(conn, session.wallet, first, last, "day")
        receipts, total = await payments.list_for_wallet(conn, session.wallet, RECEIPTS, 0)
        chart = {
            "days": [d.day for d in report.days],
            "endpoints": sorted({e for d in report.days for e in d.calls}),
            "calls": [d.calls for d in report.days],
            "paid_usdc": [d.paid_usdc for d in report.days],
        }
        receipts = [(r, usage_service.usdc(Decimal(r["amount"]))) for r in receipts]
        return render("usage.html", session, report=report, chart=chart, receipts=receipts,
                    receipts_total=total, first=first, last=last)  # fmt: skip

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


@dataclass(frozen=True)
class _Checked:
    memory_type: str | None
    tags: list[str] | None
    pinned: bool | None
    sort: Any


def _checked(query: ListQuery) -> _Checked:
    """The view's filters, validated as the REST list's are (422 in the contract's shape)."""
    if query.memory_type and query.memory_type not in MEMORY_TYPES:
        raise InvalidInput(f"memory_type must be one of {', '.join(MEMORY_TYPES)}",
                           {"field": "memory_type"})  # fmt: skip
    if query.pinned not in ("", "true", "false"):
        raise InvalidInput("pinned must be true, false or blank", {"field": "pinned"})
    if query.sort not in LIST_SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(LIST_SORTS)}", {"field": "sort"})
    if query.order not in ("asc", "desc"):
        raise InvalidInput("order must be asc or desc", {"field": "order"})
    if not 1 <= query.page <= 10**9:
        raise InvalidInput("page must be at least 1", {"field": "page"})
    tags = split_tags(query.tags)
    pinned = None if query.pinned == "" else query.pinned == "true"
    return _Checked(query.memory_type or None, tags, pinned, query.sort)


def converted(fields: dict[str, Any], kind: type[T], what: str) -> T:
    """A form's fields as the REST body they stand for, checked as strictly (422 otherwise)."""
    try:
        return msgspec.convert(fields, kind)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"Invalid {what}: {exc}", {"field": "$"}) from exc


def _edit_patch(data: EditForm) -> UpdateIn:
    """The edit form as an update, checked as PATCH /v1/memories/{id}'s body is."""
    try:
        importance = float(data.importance)
    except ValueError as exc:
        raise InvalidInput("importance must be a number from 0 to 1",
                           {"field": "importance"}) from exc  # fmt: skip
    if not math.isfinite(importance):
        raise InvalidInput("importance must be a number from 0 to 1", {"field": "importance"})
    fields = {
        "content": data.content, "importance": importance, "memory_type": data.memory_type,
        "namespace": data.namespace,
        "tags": split_tags(data.tags) or [],  # blank: no tags (None would keep them)
    }  # fmt: skip
    return converted(fields, UpdateIn, "edit")


# ---------------------------------------------------------------------------------------------
# errors: pages show them as a page; sign-in's JSON keeps the contract's shape


def wants_json(request: Request[Any, Any, State]) -> bool:
    """A script asking for JSON (and not a page) gets the contract's error shape."""
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def page_error(request: Request[Any, Any, State], exc: ApiError) -> Response[Any]:
    if isinstance(exc, NotSignedIn) and request.method == "GET":
        return Redirect("/console/signin")
    if wants_json(request):
        return handle_api_error(request, exc)
    if isinstance(exc, NotSignedIn):
        return render("error.html", None, status_code=exc.status_code, message=exc.message)
    session = state_of(request.scope).get("console_session")
    return render(
        "error.html", session, status_code=exc.status_code, message=exc.message, code=exc.code
    )


@functools.cache
def scripts_built() -> bool:
    """Looked at once per process: a build after start needs a restart (the page says so)."""
    return all((STATIC / "dist" / name).is_file() for name in SCRIPTS)


def console_router() -> Router:
    if not scripts_built():
        log.warning(
            "the console's scripts are not built (app/console/static/dist): its sign-in, charts"
            " and graph will not work; run `make console` (npm) or install Engram's wheel"
        )
    static = create_static_files_router(
        path=STATIC_PATH, directories=[STATIC], opt={**PUBLIC, **unlimited()},
        include_in_schema=False, cache_control=None,
    )  # fmt: skip
    pages = Router(
        path="/",
        route_handlers=[ConsolePagesController],
        exception_handlers={ApiError: page_error},
        include_in_schema=False,
    )
    return Router(
        path="/",
        route_handlers=[pages, ConsoleAuthController, static],
        include_in_schema=False,
    )
