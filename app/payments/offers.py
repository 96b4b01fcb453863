"""Engram's own payment offers and the 402 challenge that carries them.

One offer per paid call and network: scheme `exact`, USDC on that network, the handler's price,
Engram's payTo; with payment channels on (ENGRAM_X402_SCHEMES), the v2 challenge also lists a
`batch-settlement` entry, made by x402's own server scheme (channels.py). With several networks
(ENGRAM_X402_NETWORKS) the challenge lists each network's entries, the default network's first;
a proof is then checked against the offer of the network it names (proofs.py). The challenge is
readable by every kind of client at once (docs/api-contract.md, "Payments (x402)"): the v2
`PAYMENT-REQUIRED` header, the v1 JSON body (`x402Version`, `accepts`), and the contract's
`{"error": {...}}` object (never the v1 string, which crashes MemoClaw's SDK). Each declares the
route for x402's bazaar (discovery.py): the v2 challenge in its `extensions` and `resource`, the
v1 one in its requirement's `outputSchema`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from x402.extensions.payment_identifier import (
    PAYMENT_IDENTIFIER,
    declare_payment_identifier_extension,
)
from x402.http.utils import encode_payment_required_header
from x402.mechanisms.evm.batch_settlement.constants import SCHEME_BATCH_SETTLEMENT
from x402.mechanisms.evm.batch_settlement.server import BatchSettlementEvmScheme
from x402.mechanisms.evm.constants import SCHEME_UPTO
from x402.schemas import PaymentRequired, PaymentRequirements, ResourceInfo, SupportedKind
from x402.schemas.v1 import PaymentRequirementsV1

from app.core.errors import error_body
from app.payments.discovery import Discovery
from app.payments.network import Network

SCHEME = "exact"
CHANNEL_SCHEME = SCHEME_BATCH_SETTLEMENT  # x402 payment channels (app/payments/channels.py)
UPTO_SCHEME = SCHEME_UPTO  # variable-cost calls: a signed maximum, the real cost settled (upto.py)
# A channel's smallest deposit, in calls of the route's price (x402's `extra.minDeposit`, which
# stock clients deposit): x402's default is 10, one on-chain deposit per 10 calls; issue 36's
# target is at most one transaction per 100 paid calls, deposits and claims included: deposits
# of 200 calls and a claim per two of them (ENGRAM_X402_CLAIM_MIN_USD) is 0.75. At $0.005 a
# call, $1.00.
CHANNEL_MIN_DEPOSIT_CALLS = 200
PAYMENT_REQUIRED_HEADER = "PAYMENT-REQUIRED"


@dataclass(frozen=True)
class Offer:
    network: Network
    pay_to: str
    price_usd: Decimal
    max_timeout_seconds: int
    resource_url: str
    description: str
    discovery: Discovery | None = None  # the route's bazaar declaration, made once
    # x402's server scheme for payment channels, when they are offered (ENGRAM_X402_SCHEMES)
    channels: BatchSettlementEvmScheme | None = None
    # the relayer that settles `upto` payments, when the route is metered and `upto` is offered
    upto_facilitator: str | None = None
    # a channel refusal's snapshot (JSON of x402's channelState/voucherState extras): the
    # batch-settlement entry carries it, a corrective 402 the client resyncs from
    corrective: str | None = None

    @property
    def amount(self) -> int:
        return self.network.atomic(self.price_usd)

    def _extra(self) -> dict[str, Any]:
        return {"name": self.network.asset_name, "version": self.network.asset_version}

    def requirements(self) -> PaymentRequirements:
        """The v2 form, also what verify and settle are checked against."""
        return PaymentRequirements(
            scheme=SCHEME,
            network=self.network.caip2,
            asset=self.network.asset,
            amount=str(self.amount),
            pay_to=self.pay_to,
            max_timeout_seconds=self.max_timeout_seconds,
            extra=self._extra(),
        )

    def channel_requirements(self) -> PaymentRequirements | None:
        """The batch-settlement offer beside `exact` (None when channels are off): x402's own
        server scheme adds receiverAuthorizer, withdrawDelay and minDeposit. Made once per
        offer (a paying agent meets the same one at every call), each caller its own copy."""
        if self.channels is None:
            return None
        return _channel_requirements(self).model_copy(deep=True)

    def _made_channel_requirements(self) -> PaymentRequirements:
        assert self.channels is not None
        requirements = self.requirements().model_copy(
            update={
                "scheme": CHANNEL_SCHEME,
                "extra": {
                    **self._extra(),
                    "minDeposit": str(self.amount * CHANNEL_MIN_DEPOSIT_CALLS),
                },
            }
        )
        kind = SupportedKind(x402_version=2, scheme=CHANNEL_SCHEME, network=self.network.caip2)
        enhanced = self.channels.enhance_payment_requirements(requirements, kind, [])
        if self.corrective is None:
            return enhanced
        return enhanced.model_copy(
            update={"extra": {**(enhanced.extra or {}), **json.loads(self.corrective)}}
        )

    def upto_requirements(self, amount: int | None = None) -> PaymentRequirements | None:
        """The `upto` offer beside `exact` (None when not offered): the route's price as the
        maximum the payer signs for, and the facilitator its permit must name; with `amount`,
        what settles (the call's real cost)."""
        if self.upto_facilitator is None:
            return None
        return self.requirements().model_copy(
            update={
                "scheme": UPTO_SCHEME,
                "amount": str(self.amount if amount is None else amount),
                "extra": {**self._extra(), "facilitatorAddress": self.upto_facilitator},
            }
        )

    def requirements_v1(self) -> PaymentRequirementsV1:
        return PaymentRequirementsV1(
            scheme=SCHEME,
            network=self.network.name,
            max_amount_required=str(self.amount),
            resource=self.resource_url,
            description=self.description,
            mime_type="application/json",
            pay_to=self.pay_to,
            max_timeout_seconds=self.max_timeout_seconds,
            asset=self.network.asset,
            output_schema=dict(self.discovery.output_schema_v1) if self.discovery else None,
            extra=self._extra(),
        )

    def resource(self) -> ResourceInfo:
        """The paid resource, with the bazaar's service metadata when the route declares it."""
        d = self.discovery
        return ResourceInfo(
            url=self.resource_url,
            description=self.description,
            mime_type="application/json",
            service_name=d.service_name if d else None,
            tags=list(d.tags) if d else None,
        )

    def discovery_extensions(self) -> dict[str, Any]:
        """The route's `bazaar` extension (empty without one): in the challenge, and in the
        payment Engram hands its facilitator, which is where a catalogue picks it up."""
        return dict(self.discovery.extensions) if self.discovery else {}


@dataclass(frozen=True)
class Challenge:
    headers: dict[str, str]
    body: dict[str, Any]


# The two encodings of an offer that carry its route's declaration (a few KiB, tens of µs to
# serialize), kept for the offers asked for again: a paying agent meets the same route's 402 for
# each call. Bounded: a request's URL is part of its offer.
OFFERS_KEPT = 256


@functools.lru_cache(maxsize=OFFERS_KEPT)
def _channel_requirements(offer: Offer) -> PaymentRequirements:
    return offer._made_channel_requirements()


@functools.lru_cache(maxsize=OFFERS_KEPT)
def payment_required_header(offers: tuple[Offer, ...], error: str) -> str:
    """The v2 challenge, base64 JSON as x402 encodes it: per network (the default first), its
    `exact` entry, its `batch-settlement` one when channels are on, and its `upto` one on a
    metered route when `upto` is offered."""
    payment_required = PaymentRequired(
        error=error,
        resource=offers[0].resource(),
        accepts=[
            requirements
            for offer in offers
            for requirements in (
                offer.requirements(),
                offer.channel_requirements(),
                offer.upto_requirements(),
            )
            if requirements is not None
        ],
        extensions={
            # idempotency keys are honoured (app/payments/service.py `_check_ledger`), not required
            PAYMENT_IDENTIFIER: declare_payment_identifier_extension(),
            **offers[0].discovery_extensions(),
        },
    )
    return encode_payment_required_header(payment_required)


@functools.lru_cache(maxsize=OFFERS_KEPT)
def _accepts_v1(offer: Offer) -> dict[str, Any]:
    return offer.requirements_v1().model_dump(by_alias=True, exclude_none=True)


def challenge(
    offer: Offer,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
    *,
    others: tuple[Offer, ...] = (),
) -> Challenge:
    """The 402 for `offer` (the default network's, which the contract's details describe) and
    the same call's `others` (one per further network). The v1 body lists the networks x402 v1
    has names for: a v1 client knows a network by name only."""
    body = error_body(
        "PAYMENT_REQUIRED",
        message,
        {
            "price_usd": str(offer.price_usd),
            "amount": str(offer.amount),
            "asset": offer.network.asset,
            "network": offer.network.caip2,
            "pay_to": offer.pay_to,
            **({"reason": reason} if reason else {}),
            **(details or {}),
        },
    )
    body["x402Version"] = 1
    # each its own copy; the schemas inside are shared
    body["accepts"] = [dict(_accepts_v1(o)) for o in (offer, *others) if o is offer or o.network.v1]
    offers = (offer, *others)
    return Challenge(
        headers={PAYMENT_REQUIRED_HEADER: payment_required_header(offers, reason or message)},
        body=body,
    )
