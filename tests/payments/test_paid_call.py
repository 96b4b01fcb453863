"""A paid call's plain values never print the request's credentials: the transaction logs a
charge it could not record (app/http/transaction.py), and a log is no place for a bearer token."""

from __future__ import annotations

from decimal import Decimal

from app.payments.gate import X402Payment
from app.payments.service import PaidCall

SECRET = "Bearer session-token-secret"


def test_a_paid_call_and_its_charge_keep_the_headers_out_of_their_repr() -> None:
    call = PaidCall(
        method="POST", url="http://h/v1/store", path="/v1/store", query="", request_id="r1",
        headers={"authorization": SECRET, "payment-signature": "signed-secret"},
    )  # fmt: skip
    assert call.headers["authorization"] == SECRET
    charge = X402Payment(wallet="0xabc", price=Decimal("0.005"), payment=None, call=call)  # type: ignore[arg-type]
    for text in (repr(call), repr(charge)):
        assert "secret" not in text, text
    assert "r1" in repr(call) and "0xabc" in repr(charge)
