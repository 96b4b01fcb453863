"""Wire structs for payments: the receipts GET /v1/payments lists, and the 402 answer's body."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, Struct, UnsetType

from app.core.errors import ErrorBody


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


class PaymentChannel(Struct):
    """An x402 payment channel the wallet paid through (batch-settlement): `balance` is its
    escrow, `charged` what Engram charged on it, `total_claimed` what was claimed on chain.
    Amounts in the asset's smallest unit, as decimal strings."""

    channel_id: str
    network: str
    asset: str
    receiver: str
    balance: str
    charged: str
    total_claimed: str
    withdraw_requested_at: int  # unix seconds, 0: no withdrawal pending
    deposit_tx: str | None
    created_at: str
    updated_at: str  # its last payment


class ChannelVoucher(Struct):
    """A call paid with a voucher: `amount` charged, the channel's total then `charged_after`."""

    channel_id: str
    cumulative: str  # what the voucher signed for
    charged_after: str
    amount: str
    endpoint: str
    request_id: str
    created_at: str


class ChannelClaim(Struct):
    """A claim (or a refund, which claims what is owed and returns the rest) of a channel:
    `pending` (sent, or about to be), `confirmed` (on chain: `tx_hash`) or `failed`; `settle_tx`
    once the claimed funds were moved on to the receiver."""

    id: str
    channel_id: str
    kind: str  # claim | refund
    cumulative: str  # the channel's claimed total it sets
    refund_amount: str
    status: str
    tx_hash: str | None
    settle_tx: str | None
    created_at: str
    updated_at: str


class PaymentPage(Struct):
    payments: list[Payment]  # newest first
    total: int
    limit: int
    offset: int
    # x402 payment channels (the wallet's, newest first; the most recent vouchers and claims)
    channels: list[PaymentChannel] = []
    vouchers: list[ChannelVoucher] = []
    claims: list[ChannelClaim] = []


class PaymentRequiredBody(ErrorBody, kw_only=True):
    """A 402: the error, with x402's payment requirements beside it when this server accepts
    payments (app/payments/offers.py `challenge`; the PAYMENT-REQUIRED header carries them too)."""

    x402Version: int | UnsetType = UNSET
    accepts: list[dict[str, Any]] | UnsetType = UNSET
