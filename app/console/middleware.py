"""Who a console request is, and the rule that keeps the console's cookie to Engram's own pages.

- On every route, the REST ones included: a request that carries the console's session cookie
  and an `Origin` other than Engram's own is refused (403), before anything else reads it. A
  page elsewhere can make a browser send the cookie only with its own Origin.
- On /console routes: the cookie's live session puts its wallet on the request (`scope["user"]`,
  as the wallet auth middleware does for the REST routes), so the same access rules and the
  per-wallet rate limit apply; the session itself rides on the request for the CSRF check.
"""

from __future__ import annotations

from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from app.auth.middleware import database, origin_of_request
from app.console.service import ConsoleSessions
from app.core.errors import Forbidden
from app.http.state import state_of

COOKIE_NAME = "engram_console"
CONSOLE_PATH = "/console"
STATIC_PATH = "/console/static"  # its files need no session: no database read for them


# No inline script or style anywhere: every script is a file under /console/static.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none';"
    " form-action 'self'; frame-ancestors 'none'"
)
# On every /console response, pages, errors, redirects and static files alike (set by
# app/http/headers.py, which sees every response).
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
# And on every one but the static files: pages, JSON, redirects and errors hold a wallet's
# memories, its CSRF token or where its session goes next, so no cache (the browser's, a
# proxy's, the back button's) keeps them. The static files (scripts, stylesheet, icon) are the
# same for everyone and hold nothing of a wallet: caches may keep them.
NO_STORE = {"Cache-Control": "no-store"}


def console_headers(path: str) -> dict[str, str]:
    """The headers a /console response at `path` carries."""
    return SECURITY_HEADERS if path.startswith(STATIC_PATH) else {**SECURITY_HEADERS, **NO_STORE}


async def add_console_headers(message: Message, scope: Scope) -> None:
    """A `before_send` hook: a /console response gets the console's security headers, its
    Content-Security-Policy and (but its static files) `Cache-Control: no-store`."""
    path = str(scope.get("path", ""))
    if message["type"] != "http.response.start" or not path.startswith(CONSOLE_PATH):
        return
    headers = MutableScopeHeaders.from_message(message)
    for name, value in console_headers(path).items():
        headers[name] = value


def cookie_token(headers: Headers) -> str | None:
    """The console cookie's value, if the request carries one (the last, as http.cookies reads
    a repeated name). Read by splitting the header's `name=value; ...` pairs (RFC 6265's
    cookie-string), not with http.cookies: it runs on every request before any sign-in, and
    that parser's time is quadratic in the backslashes of a quoted value (CVE-2024-7592, fixed
    only in Python 3.11.10; a 16,000-character cookie took 0.6 s). Engram's tokens are
    URL-safe, so a quoted value is only unwrapped, never unescaped."""
    raw = headers.get("cookie")
    if not raw or COOKIE_NAME not in raw:
        return None
    token = None
    for pair in raw.split(";"):
        name, equals, value = pair.partition("=")
        if equals and name.strip() == COOKIE_NAME:
            value = value.strip()
            token = value[1:-1] if len(value) > 1 and value[0] == value[-1] == '"' else value
    return token or None


def foreign_origin(scope: Scope, headers: Headers, public_url: str | None) -> str | None:
    """The request's Origin when it is not Engram's own (a missing Origin is not foreign)."""
    origin = headers.get("origin")
    if origin is None or origin == origin_of_request(scope, public_url):
        return None
    return origin


class ConsoleMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    def __init__(self, sessions: ConsoleSessions, public_url: str | None = None) -> None:
        self.sessions = sessions
        self.public_url = public_url

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        headers = Headers.from_scope(scope)
        token = cookie_token(headers)
        if token is not None:
            refuse_foreign_origin(scope, headers, self.public_url)
            path = str(scope["path"])
            if path.startswith(CONSOLE_PATH) and not path.startswith(STATIC_PATH):
                await self._identify(scope, token)
        await next_app(scope, receive, send)

    async def _identify(self, scope: Scope, token: str) -> None:
        async with database(scope) as conn:
            session = await self.sessions.find(conn, token)
        if session is not None:
            scope["user"] = session.wallet
            state = state_of(scope)
            state["console_session"] = session
            state["console_token"] = token


def refuse_foreign_origin(scope: Scope, headers: Headers, public_url: str | None) -> None:
    origin = foreign_origin(scope, headers, public_url)
    if origin is not None:
        raise Forbidden(
            f"A request with the console's session cookie must come from Engram's own pages;"
            f" Origin {origin!r} is not",
            {"header": "origin"},
        )
