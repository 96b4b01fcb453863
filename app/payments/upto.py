"""x402's `upto` scheme for variable-cost calls: the payer signs a maximum, Engram settles what the
call really cost.

On with `ENGRAM_X402_SCHEMES=...,upto` (needs the relayer key: the payer's signature names the
facilitator that may settle, and that is Engram's own relayer). Only routes declared metered
(`paid(kind, metered=PER_ITEM | PER_1K_TOKENS)`, prices.py) offer it; their fixed price is the
maximum asked for, so `upto` never costs more than `exact`.

The protocol is x402's: the offer is x402's `upto` requirements, the payload is x402's
`UptoPermit2Payload`, its facilitator scheme (facilitators.py) verifies the maximum and settles
the cost through Permit2 and x402's upto proxy. What is Engram's:
- an `upto` proof is read into the same `Proof` as an `exact` one (the Permit2 nonce is its
  nonce), so the ledger's rules (one use per nonce, replays, pending rows, reconciliation) hold
  unchanged; the ledger row's amount is the cost settled;
- the cost is known, or bounded, before the work: a batch's items are counted from the request,
  an LLM call's tokens are bounded from the request's size; a call whose cost would pass the
  signed maximum is refused before any work (`check_cost_within`), never capped after it;
- after the work, the cost settled is the items stored, or the tokens the answer reports.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from x402.mechanisms.evm.constants import (
    ERR_PERMIT2_INVALID_SPENDER,
    ERR_PERMIT2_TOKEN_MISMATCH,
    ERR_UPTO_AMOUNT_EXCEEDS_PERMITTED,
    ERR_UPTO_FACILITATOR_MISMATCH,
    X402_UPTO_PERMIT2_PROXY_ADDRESS,
)
from x402.mechanisms.evm.types import UptoPermit2Authorization, UptoPermit2Payload
from x402.schemas import PaymentPayload

from app.core.contract import PER_ITEM
from app.payments.offers import UPTO_SCHEME, Offer
from app.payments.proofs import (
    ADDRESS_RE,
    V2_HEADER,
    Authorization,
    PaymentRejected,
    Proof,
    check_network,
    check_pay_to,
    check_time_window,
    decode_proof_json,
    offer_named,
    payment_id_of,
)

UINT256_MAX = 2**256 - 1
# A request's characters per token, at most: English runs ~4, code and JSON ~3; 2 keeps the bound
# above what a tokenizer counts. The prompt Engram wraps around it and the answer are bounded by
# the same count again (an extraction's answer is shorter than the conversation it reads).
CHARS_PER_TOKEN_AT_MOST = 2
PROMPT_AND_ANSWER_FACTOR = 2
PROMPT_TOKENS = 1_000  # the instructions around the conversation (app/ai/llm.py prompts)


def read_upto_proof(headers: Mapping[str, str], *offers: Offer) -> tuple[Offer, Proof] | None:
    """The request's proof when it pays with `upto` (a v2 proof whose `accepted.scheme` is
    upto), with the offer of the network it names; None for any other proof. An `upto` proof
    reads into a `Proof`: the Permit2 owner pays, the witness's `to` is paid, the permitted
    amount is the signed maximum, the deadline is its validBefore and the Permit2 nonce (a
    uint256) is its nonce, as 32 bytes of hex."""
    raw = headers.get(V2_HEADER)
    if not raw:
        return None
    data = decode_proof_json(raw)
    accepted = data.get("accepted")
    if not isinstance(accepted, dict) or accepted.get("scheme") != UPTO_SCHEME:
        return None
    if data.get("x402Version") != 2:
        raise PaymentRejected("invalid_x402_version", "upto payments are x402 v2 only")
    network = str(accepted.get("network", ""))
    offer = offer_named(network, 2, offers[0], offers[1:])
    requirements = offer.upto_requirements()
    if requirements is None:
        raise PaymentRejected("unsupported_scheme", "upto is not offered for this call")
    inner = data.get("payload")
    try:
        payload = PaymentPayload(
            payload=inner if isinstance(inner, dict) else {},
            accepted=requirements,
            resource=offer.resource(),
            extensions=offer.discovery_extensions() or None,
        )
        authorization = _authorization_of(UptoPermit2Payload.from_dict(payload.payload))
    except (KeyError, TypeError, ValueError, AttributeError, ValidationError) as exc:
        raise PaymentRejected("invalid_payload", "The upto payment is malformed") from exc
    proof = Proof(2, V2_HEADER, payload, authorization, UPTO_SCHEME, network,
                  payment_id_of(data.get("extensions")))  # fmt: skip
    return offer, proof


def _authorization_of(permit: UptoPermit2Payload) -> Authorization:
    auth = permit.permit2_authorization
    nonce, value = int(auth.nonce), int(auth.permitted.amount)
    after, before = int(auth.witness.valid_after), int(auth.deadline)
    addresses = (auth.from_address, auth.witness.to, auth.witness.facilitator, auth.spender,
                 auth.permitted.token)  # fmt: skip
    if not (
        all(isinstance(a, str) and ADDRESS_RE.match(a) for a in addresses)
        and all(0 <= n <= UINT256_MAX for n in (nonce, value, after, before))
        and isinstance(permit.signature, str)
    ):
        raise ValueError("malformed address or number")
    return Authorization(
        payer=auth.from_address.lower(),
        pay_to=auth.witness.to.lower(),
        value=value,
        valid_after=after,
        valid_before=before,
        nonce=f"0x{nonce:064x}",
    )


# ---- named checks, against Engram's offer -----------------------------------------------------


def check_spender(permit: UptoPermit2Authorization) -> None:
    spender = permit.spender
    if spender.lower() != X402_UPTO_PERMIT2_PROXY_ADDRESS.lower():
        raise PaymentRejected(
            ERR_PERMIT2_INVALID_SPENDER, "The permit must name x402's upto proxy as its spender"
        )


def check_facilitator(permit: UptoPermit2Authorization, facilitator: str) -> None:
    named = permit.witness
    if named.facilitator.lower() != facilitator.lower():
        raise PaymentRejected(
            ERR_UPTO_FACILITATOR_MISMATCH,
            f"The permit names facilitator {named.facilitator}; this server settles as"
            f" {facilitator}",
        )


def check_token(permit: UptoPermit2Authorization, asset: str) -> None:
    token = permit.permitted
    if token.token.lower() != asset.lower():
        raise PaymentRejected(
            ERR_PERMIT2_TOKEN_MISMATCH, f"The permit is for token {token.token}, not {asset}"
        )


def check_maximum(proof: Proof, maximum: int) -> None:
    """The signed maximum is the route's price, as offered (x402's facilitator checks the same)."""
    if proof.authorization.value != maximum:
        raise PaymentRejected(
            "invalid_upto_evm_payload_amount_mismatch",
            f"The permit is for {proof.authorization.value} units; the offer's maximum is"
            f" {maximum}",
        )


def check_cost_within(proof: Proof, cost: int) -> None:
    """Refused before the work: the call would cost more than the payer signed for."""
    if cost > proof.authorization.value:
        raise PaymentRejected(
            ERR_UPTO_AMOUNT_EXCEEDS_PERMITTED,
            f"This call would cost {cost} units, more than the {proof.authorization.value}"
            " signed for; split it or pay with `exact`",
        )


def check_upto_offer(proof: Proof, offer: Offer, facilitator: str, now: int) -> None:
    """The permit (read once) against the offer, each check with its own x402 reason."""
    permit = UptoPermit2Payload.from_dict(proof.payload.payload).permit2_authorization
    check_network(proof, offer)
    check_pay_to(proof, offer)
    check_spender(permit)
    check_facilitator(permit, facilitator)
    check_token(permit, offer.network.asset)
    check_maximum(proof, offer.amount)
    check_time_window(proof, now)


# ---- what a call costs --------------------------------------------------------------------------


def units_before(unit: str, body: bytes) -> int:
    """The call's units as known before its work: a batch's items, or a bound on an LLM call's
    tokens (in thousands, rounded up) from the request's size."""
    if unit == PER_ITEM:
        return _items_in(body)
    request_tokens = math.ceil(len(body) / CHARS_PER_TOKEN_AT_MOST)
    tokens = PROMPT_TOKENS + PROMPT_AND_ANSWER_FACTOR * request_tokens
    return math.ceil(tokens / 1000)


def units_after(unit: str, body: bytes, answer: bytes | None) -> int:
    """The units the call used: the items asked for, or the tokens its answer reports (none
    reported: the bound)."""
    if unit == PER_ITEM:
        return _items_in(body)
    tokens = _tokens_in(answer)
    if tokens is None:
        return units_before(unit, body)
    return math.ceil(tokens / 1000)


def cost_of(units: int, unit_price_usd: Decimal, atomic: Any) -> int:
    """Atomic units of the asset for `units`, at least one unit's worth of a call that ran."""
    return int(atomic(unit_price_usd * max(units, 1)))


def _items_in(body: bytes) -> int:
    try:
        data = json.loads(body)
    except ValueError:
        return 1  # the handler refuses it before any work; nothing is settled then
    items = data.get("memories") if isinstance(data, dict) else None
    return len(items) if isinstance(items, list) else 1


def _tokens_in(answer: bytes | None) -> int | None:
    if not answer:
        return None
    try:
        data = json.loads(answer)
    except ValueError:
        return None
    tokens = data.get("tokens_used") if isinstance(data, dict) else None
    return tokens if isinstance(tokens, int) and tokens >= 0 else None


__all__ = [
    "check_cost_within",
    "check_upto_offer",
    "cost_of",
    "read_upto_proof",
    "units_after",
    "units_before",
]
