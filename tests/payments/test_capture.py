"""A call paid by a payment keeps its answer for a replay, encoded once (the same bytes kept and
sent); a free-tier call's answer is not kept (issue 40: no answer built twice). That a payment's
kept answer is what a replay gets is tests/payments/test_x402.py's and test_channels.py's."""

from __future__ import annotations

import msgspec
from litestar import Response

from app.http.state import RequestState
from app.payments import capture

ANSWER = {"memories": [{"id": "m1", "score": 0.5}], "query_tokens": 3}


async def _after_request(state: RequestState | None) -> Response[object]:
    token = capture._paid_call_state.set(state)
    try:
        return await capture.capture_paid_response(Response(content=ANSWER))
    finally:
        capture._paid_call_state.reset(token)


async def test_a_free_calls_answer_is_neither_kept_nor_encoded_here() -> None:
    state: RequestState = {}
    response = await _after_request(state)
    assert response.content == ANSWER and "captured_response" not in state


async def test_a_payments_answer_is_kept_and_sent_as_the_same_bytes() -> None:
    state: RequestState = {"keeps_answer": True}
    response = await _after_request(state)
    assert response.content == msgspec.json.encode(ANSWER)
    assert state["captured_response"].body == response.content
    assert state["captured_response"].status == 200


async def test_a_free_route_keeps_nothing() -> None:
    response = await _after_request(None)
    assert response.content == ANSWER
