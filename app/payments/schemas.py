"""Wire structs for payments: the receipts GET /v1/payments lists, and the 402 answer's body."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, Struct, UnsetType

from app.kit.errors import ErrorBody


class Payment(Struct):
    """An x402 payment: `payer` paid for a call made as `wallet` (the same, unless a wallet's
    call was paid by another). `status`: `settled` (paid and served), `pending` (its settlement
    not resolved yet) or `redeemable` (paid, its work not done: the same proof and request redeem
    it)."""

    id: str
    payer: str
    wallet: str
    amount: str  # in the asset's smallest unit, as a decimal string
    asset: str
    network: str  # CAIP-2
    endpoint: str
    nonce: str
    request_id: str
    status: str
    tx_hash: str | None
    created_at: str


class PaymentPage(Struct):
    payments: list[Payment]  # newest first
    total: int
    limit: int
    offset: int


class PaymentRequiredBody(ErrorBody, kw_only=True):
    """A 402: the error, with x402's payment requirements beside it when this server accepts
    payments (app/payments/offers.py `challenge`; the PAYMENT-REQUIRED header carries them too)."""

    x402Version: int | UnsetType = UNSET
    accepts: list[dict[str, Any]] | UnsetType = UNSET
