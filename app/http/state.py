"""What a request carries in its state between the layers that handle it, declared in one place.

The payment gate, the request transaction, the response hooks and the handlers all read or write
a request's `scope["state"]`; each key is named here with its type, and read or written only
through these functions.
"""

from __future__ import annotations

from typing import TypedDict, cast

from litestar.types import Scope

from app.core.request_values import CapturedResponse, ConsoleSession, Delegation, Settled


class RequestState(TypedDict, total=False):
    request_id: str  # X-Request-Id: the client's (when sane) or one minted here
    free_tier_remaining: int  # the wallet's free calls left, once the gate has learnt it
    keeps_answer: bool  # paid by a payment (not the free tier): its answer is kept for a replay
    captured_response: CapturedResponse  # a paid call's answer, kept for a replay
    paid_response_headers: dict[str, str]  # the settlement receipt header
    settled_payment: Settled  # once settled on chain (before its work commits)
    relaxed_commit: bool  # the handler's own writes are bookkeeping only (recall's counts)
    delegation: Delegation  # an agent key acting for its owner (x-wallet-owner)
    console_session: ConsoleSession  # the console's signed-in browser (its cookie's session)
    console_token: str  # that cookie's value (signing out ends its session)


def state_of(scope: Scope) -> RequestState:
    """The request's state, typed: `request.state` of Litestar lives in the scope's `state`."""
    return cast(RequestState, scope.setdefault("state", {}))
