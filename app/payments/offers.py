"""Engram's own payment offers and the 402 challenge that carries them.

One offer per paid call: scheme `exact`, USDC on the configured network, the handler's price,
Engram's payTo. The challenge is readable by every kind of client at once (docs/api-contract.md,
"Payments (x402)"): the v2 `PAYMENT-REQUIRED` header, the v1 JSON body (`x402Version`,
`accepts`), and the contract's `{"error": {...}}` object (never the v1 string, which crashes
MemoClaw's SDK).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from x402.extensions.payment_identifier import (
    PAYMENT_IDENTIFIER,
    declare_payment_identifier_extension,
)
from x402.http.utils import encode_payment_required_header
from x402.schemas import PaymentRequired, PaymentRequirements, ResourceInfo
from x402.schemas.v1 import PaymentRequirementsV1

from app.kit.errors import error_body
from app.payments.network import Network

SCHEME = "exact"
PAYMENT_REQUIRED_HEADER = "PAYMENT-REQUIRED"


@dataclass(frozen=True)
class Offer:
    network: Network
    pay_to: str
    price_usd: Decimal
    max_timeout_seconds: int
    resource_url: str
    description: str

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
            extra=self._extra(),
        )


@dataclass(frozen=True)
class Challenge:
    headers: dict[str, str]
    body: dict[str, Any]


def challenge(
    offer: Offer, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> Challenge:
    payment_required = PaymentRequired(
        error=reason or message,
        resource=ResourceInfo(
            url=offer.resource_url, description=offer.description, mime_type="application/json"
        ),
        accepts=[offer.requirements()],
        # idempotency keys are honoured (app/payments/service.py `_check_ledger`), not required
        extensions={PAYMENT_IDENTIFIER: declare_payment_identifier_extension()},
    )
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
    body["accepts"] = [offer.requirements_v1().model_dump(by_alias=True, exclude_none=True)]
    return Challenge(
        headers={PAYMENT_REQUIRED_HEADER: encode_payment_required_header(payment_required)},
        body=body,
    )
