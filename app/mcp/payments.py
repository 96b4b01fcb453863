"""x402's MCP transport on top of the REST payment gate.

x402 over MCP (the `x402.mcp` helpers' wire): a paid tool called without payment answers an
error result whose `structuredContent` is the x402 `PaymentRequired`; the client retries with
the signed payload in the request's `_meta["x402/payment"]`; the result's
`_meta["x402/payment-response"]` carries the settlement.

Engram does not use `x402.mcp`'s server wrapper, which would verify and settle outside Engram's
ledger and transaction. Instead the payload becomes the REST request's `PAYMENT-SIGNATURE`
header, and the REST gate does the rest exactly as for HTTP clients: the same price and free
tier, settlement before the commit, one ledger row (listed by GET /v1/payments), and a replayed
payment answered from the ledger without a second charge. This module only translates.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from x402.http.utils import (
    decode_payment_required_header,
    decode_payment_response_header,
    encode_payment_signature_header,
)
from x402.mcp import MCP_PAYMENT_META_KEY, MCP_PAYMENT_RESPONSE_META_KEY
from x402.mcp.utils import extract_payment_from_meta

from app.mcp.rest import RestAnswer

PAYMENT_SIGNATURE_HEADER = "PAYMENT-SIGNATURE"
PAYMENT_REQUIRED_HEADER = "payment-required"
PAYMENT_RESPONSE_HEADER = "payment-response"


class MalformedPayment(ValueError):
    """`_meta["x402/payment"]` is present but is not an x402 payment payload."""


def payment_headers(meta: dict[str, Any]) -> dict[str, str]:
    """The REST header carrying the payment in the tool call's `_meta`, if there is one."""
    if meta.get(MCP_PAYMENT_META_KEY) is None:
        return {}
    payload = extract_payment_from_meta({"_meta": meta})
    if payload is None:
        raise MalformedPayment(f"_meta[{MCP_PAYMENT_META_KEY!r}] is not an x402 payment payload")
    return {PAYMENT_SIGNATURE_HEADER: encode_payment_signature_header(payload)}


def payment_required(answer: RestAnswer) -> dict[str, Any] | None:
    """The x402 PaymentRequired of a 402 answer (v2, from its header), with a failed
    settlement's receipt alongside as x402's MCP server puts it; None if the answer has none
    (e.g. a server not configured for x402)."""
    raw = answer.headers.get(PAYMENT_REQUIRED_HEADER)
    if answer.status != 402 or not raw:
        return None
    try:
        required = decode_payment_required_header(raw)
    except (ValueError, ValidationError):
        return None
    body = required.model_dump(by_alias=True, exclude_none=True)
    receipt = settlement(answer)
    if receipt is not None:
        body[MCP_PAYMENT_RESPONSE_META_KEY] = receipt
    return body


def settlement(answer: RestAnswer) -> dict[str, Any] | None:
    """The settlement receipt of a paid answer (PAYMENT-RESPONSE), as result `_meta` holds it."""
    raw = answer.headers.get(PAYMENT_RESPONSE_HEADER)
    if not raw:
        return None
    try:
        receipt = decode_payment_response_header(raw)
    except (ValueError, ValidationError, json.JSONDecodeError):
        return None
    return receipt.model_dump(by_alias=True, exclude_none=True)
