"""Headers on every response, 404s and errors included: X-Request-Id, and the wallet's free-tier
count once a request has learnt it. A `before_send` hook, because app-level hooks also see the
responses Litestar makes before any route middleware runs (unknown paths, wrong methods). A
feature with headers of its own adds a hook beside this one (the console's security headers:
app/console/middleware.py, wired by app/asgi.py).

It also corrects the `Allow` of Litestar's automatic OPTIONS answer: when several controllers
register handlers on one path, the OPTIONS handler made for the first of them keeps that first
route's methods (`OPTIONS /v1/memories/{id}` listed only DELETE), so the path's full set is
read from the app's route map instead."""

from __future__ import annotations

import re
import uuid

from litestar.datastructures import MutableScopeHeaders
from litestar.types import Message, Scope

from app.http.markers import price_of
from app.http.state import state_of

REQUEST_ID_HEADER = "x-request-id"
FREE_TIER_HEADER = "x-free-tier-remaining"
_CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")


def request_id_of(scope: Scope) -> str:
    """Reuse a sane client-sent X-Request-Id (tracing across hops), else mint one, once."""
    state = state_of(scope)
    if "request_id" not in state:
        incoming = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin-1")
        state["request_id"] = incoming if _CLIENT_ID_RE.match(incoming) else uuid.uuid4().hex
    return state["request_id"]


async def add_response_headers(message: Message, scope: Scope) -> None:
    if message["type"] != "http.response.start":
        return
    headers = MutableScopeHeaders.from_message(message)
    headers[REQUEST_ID_HEADER] = request_id_of(scope)
    state = state_of(scope)
    remaining = state.get("free_tier_remaining")
    if remaining is not None:
        headers[FREE_TIER_HEADER] = str(remaining)
    if price_of(scope.get("route_handler")) is not None:
        # paid answers are per payer and per payment: never cached by anyone on the way
        headers["Cache-Control"] = "private, no-store"
    for name, value in state.get("paid_response_headers", {}).items():
        headers[name] = value
    if scope.get("method") == "OPTIONS" and "allow" in headers:
        headers["allow"] = allowed_methods(scope) or headers["allow"]


def allowed_methods(scope: Scope) -> str | None:
    """Every method the matched path has, as an Allow header value."""
    app = scope.get("litestar_app")
    template = scope.get("path_template")
    for route in app.routes if app is not None else []:
        if route.path_format == template:
            return ", ".join(sorted(route.methods))
    return None
