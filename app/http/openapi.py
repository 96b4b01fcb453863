"""The error answers of the OpenAPI document: every route declares each status it can fail with,
and each one's body is ErrorBody (app/core/errors.py), the one shape app/http/errors.py renders.

What follows from a route's metadata is derived here, so it cannot drift from the middleware that
answers it (`document_errors`, run by create_app):

- 401 unless the route is public (`exclude_from_auth`): no valid wallet proof;
- 402 (PaymentRequiredBody) and 409 (a payment in flight) when it has a price (`paid()`);
- 422 when it takes input (a body or parameters), 413 and 415 when it takes a body;
- 429 unless it is `unlimited()`, and 503 on every route (a part Engram needs is down).

What only the handler knows (a memory that may not exist, one that is immutable), it declares
with `responses=error_responses(...)`, as Polar's endpoints declare `responses={404: ...}`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from litestar import Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Operation

from app.core.errors import ErrorBody
from app.http.markers import PUBLIC_OPT_KEY, UNLIMITED_OPT_KEY, price_of

# Descriptions a handler passes to error_responses (or its own, more precise).
NO_SUCH_MEMORY = (
    "No memory with this id among the caller's memories (or, for a grantee or an agent key,"
    " none it may read: the same answer)"
)
IMMUTABLE_MEMORY = "The memory is immutable: it cannot be changed or deleted"
VERSION_CONFLICT = (
    "The memory changed since the version the writer named (If-Match or expected_version):"
    " `details.current_version` says which it is at"
)

AUTH_REFUSED = (
    "No valid wallet proof: x-wallet-auth, Authorization: Bearer <session token> or"
    " SIGN-IN-WITH-X is missing, malformed, expired or revoked"
)
PAYMENT_REQUIRED = (
    "The free tier is used up (or the payment sent does not pay for this call): pay with x402;"
    " the body's `accepts` and the PAYMENT-REQUIRED header carry the payment requirements"
)
PAYMENT_IN_FLIGHT = (
    "The payment sent is being settled by another request: retry shortly to get its result"
)
INVALID_INPUT = (
    "The request does not validate (a body field, a parameter, malformed JSON):"
    " `details` says where"
)
BODY_TOO_LARGE = "The body is larger than this route accepts"
NOT_JSON = "The body is not sent as application/json"
OWNER_NOT_REACHED = (
    "Another wallet named (x-memory-owner, x-wallet-owner) that no live grant or agent key lets"
    " the caller reach here (docs/pages/guides/team-memory.md); nothing was changed or charged"
)
RATE_LIMITED = (
    "Rate limit exceeded: retry after Retry-After seconds (`details` has the limit and reset_at)"
)
PART_UNAVAILABLE = (
    "A part Engram needs (the database, Redis, a language model) is unavailable: nothing was"
    " changed or charged; retry after Retry-After seconds"
)


# a store or update that a grantee or an agent key may not send (app/memory/actor.py)
OWNER_ONLY_FIELD = (
    "From a grantee or an agent key, a field only the owner sets (`expires_at`,"
    " `immutable: true`): `details.fields` names it; nothing was changed or charged"
)


def _error(description: str, body: type[ErrorBody] = ErrorBody) -> ResponseSpec:
    return ResponseSpec(data_container=body, description=description, generate_examples=False)


def error_responses(
    *,
    not_found: str | None = None,
    conflict: str | None = None,
    unauthorized: str | None = None,
    precondition: str | None = None,
    forbidden: str | None = None,
) -> dict[int, ResponseSpec]:
    """A handler's own error answers, each described: 404 (what may not be found), 409 (what
    may conflict), 401 (on a public route that still refuses, such as sign-in)."""
    own = {404: not_found, 409: conflict, 401: unauthorized, 412: precondition, 403: forbidden}
    return {status: _error(text) for status, text in own.items() if text is not None}


def derived_responses(
    handler: HTTPRouteHandler, payment_required: type[Any]
) -> dict[int, ResponseSpec]:
    """The error answers a route's metadata implies (module docstring). 422, 413 and 415 are
    offered to every route; DocumentedOperation keeps them only where there is input. A paid
    route's 402 is described by `payment_required`, the payments feature's body."""
    opt = handler.opt
    responses: dict[int, ResponseSpec] = {}
    if not opt.get(PUBLIC_OPT_KEY):
        responses[401] = _error(AUTH_REFUSED)
        responses[403] = _error(OWNER_NOT_REACHED)
    if price_of(handler) is not None:
        responses[402] = _error(PAYMENT_REQUIRED, payment_required)
        responses[409] = _error(PAYMENT_IN_FLIGHT)
    responses[413] = _error(BODY_TOO_LARGE)
    responses[415] = _error(NOT_JSON)
    responses[422] = _error(INVALID_INPUT)
    if not opt.get(UNLIMITED_OPT_KEY):
        responses[429] = _error(RATE_LIMITED)
    responses[503] = _error(PART_UNAVAILABLE)
    return responses


def _merged(
    derived: dict[int, ResponseSpec], own: dict[int, ResponseSpec]
) -> dict[int, ResponseSpec]:
    """`own` over `derived`; a status both declare is described by both."""
    merged = dict(derived)
    for status, spec in own.items():
        if status in derived and spec.data_container is derived[status].data_container:
            spec = replace(
                spec, description=f"{spec.description}; or: {derived[status].description}"
            )
        merged[status] = spec
    return merged


@dataclass
class DocumentedOperation(Operation):
    """An operation with the input errors only where there is input.

    Litestar documents a route that takes a body or parameters with a 400 of its own shape
    ({status_code, detail, extra}); Engram never sends it: its validation errors are 422 in
    ErrorBody (app/http/errors.py). So the 400 goes, and marks the routes with input: 422 stays
    on those and is dropped from the others; 413 and 415 stay where there is a body."""

    def __post_init__(self) -> None:
        responses: dict[str, Any] = dict(self.responses or {})
        if responses.pop("400", None) is None:
            responses.pop("422", None)
        if self.request_body is None:
            responses.pop("413", None)
            responses.pop("415", None)
        self.responses = dict(sorted(responses.items()))


def document_errors(app: Litestar, payment_required: type[Any]) -> None:
    """Declare every documented route's error answers: derived, then the handler's own; a 402
    in `payment_required`'s shape (app/asgi.py passes the payments feature's body)."""
    for route in app.routes:
        for handler in getattr(route, "route_handlers", ()):
            if (
                isinstance(handler, HTTPRouteHandler)
                and handler.resolve_include_in_schema()
                and handler.operation_class is not DocumentedOperation  # one handler, many paths
            ):
                own = dict(handler.responses or {})
                handler.responses = _merged(derived_responses(handler, payment_required), own)
                handler.operation_class = DocumentedOperation
