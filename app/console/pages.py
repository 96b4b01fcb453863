"""What the console's controllers share (app/console/*_controller.py): the signed-in session and
its transaction, CSRF and origin checks, the session cookie, rendering a page, form decoding, and
errors shown as pages (sign-in's JSON keeps the contract's shape).

Memory content is untrusted (agents and teammates write it): the templates autoescape it, the
scripts put it in the page as text only, and the Content-Security-Policy allows no inline
script. Every state-changing request needs the session's CSRF token, and the middleware
(app/console/middleware.py) refuses the cookie with a foreign Origin everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import msgspec
from litestar import Controller, Request, Response
from litestar.datastructures import Cookie, State
from litestar.di import NamedDependency, Provide
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_200_OK, HTTP_303_SEE_OTHER

from app.agents.service import server_origin
from app.auth.middleware import origin_of_request
from app.console.middleware import COOKIE_NAME, foreign_origin
from app.core.errors import ApiError, Forbidden, InvalidInput, Unauthorized
from app.core.request_values import ConsoleSession
from app.http.errors import handle_api_error
from app.http.markers import public
from app.http.state import state_of
from app.http.transaction import request_transaction

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
T = TypeVar("T")
CSRF_HEADER = "x-csrf-token"  # the console's scripts send the page's token in it
PUBLIC = public()  # no wallet header: the console's cookie says who it is


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


class PageController(Controller):
    """What every page controller of the console is: under /console, public to the wallet
    middleware (the cookie says who it is), with the signed-in session and then the request's
    transaction as dependencies."""

    path = "/console"
    opt = PUBLIC
    dependencies = {
        "session": Provide(signed_in, sync_to_thread=False),
        "conn": Provide(transaction_after_session),
    }


class CsrfForm(msgspec.Struct, kw_only=True):
    csrf_token: str = ""


Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def converted(fields: dict[str, Any], kind: type[T], what: str) -> T:
    """A form's fields as the REST body they stand for, checked as strictly (422 otherwise)."""
    try:
        return msgspec.convert(fields, kind)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"Invalid {what}: {exc}", {"field": "$"}) from exc


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
