"""Keep a paid call's response so a replay of its settled payment gets the same answer (a call
paid by a payment: the gate marks its state `keeps_answer`).

Litestar's `after_request` hook sees the response object before the request transaction's cleanup
runs (where settlement happens) but not the request; a context variable set by `before_request`,
in the same task, links the two.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import msgspec
from litestar import Request, Response

from app.core.request_values import CapturedResponse
from app.http.markers import price_of
from app.http.state import RequestState, state_of

_paid_call_state: ContextVar[RequestState | None] = ContextVar("paid_call_state", default=None)


async def mark_paid_call(request: Request[Any, Any, Any]) -> None:
    paid = price_of(request.scope.get("route_handler")) is not None
    _paid_call_state.set(state_of(request.scope) if paid else None)


async def capture_paid_response(response: Response[Any]) -> Response[Any]:
    """A call paid by a payment keeps its answer, encoded once: the same bytes are kept and
    sent (Litestar sends bytes content as it is). A free-tier call's answer is not kept."""
    state = _paid_call_state.get()
    if state is not None and state.get("keeps_answer"):
        encoded = msgspec.json.encode(response.content)
        state["captured_response"] = CapturedResponse(response.status_code or 200, encoded)
        response.content = encoded
    return response
