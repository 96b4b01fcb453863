"""The one seam every paid call goes through: decide how it is paid, then settle before commit.

- A request carrying an x402 proof pays with it (the client chose to pay), whatever its free tier.
- Otherwise a wallet with free calls left uses one: checked before the handler runs and consumed
  just before the commit, so a failed handler never costs a free call and the wallet row lock is
  held only for the commit.
- Otherwise, or with no identity at all, the answer is 402 with Engram's x402 offer.

Who owns the data when a payment is made: the signed `x-wallet-auth` wallet if there is one, else
the payer. A payer may pay for another wallet's call (an agent's treasury paying for its
workers); the payment is listed under both in GET /v1/payments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn, Protocol

import asyncpg
from litestar import Request

from app.auth.free_tier import FreeTier
from app.payments.prices import price_of
from app.payments.service import X402Charge, X402Service

FREE_TIER_REMAINING_STATE = "free_tier_remaining"


@dataclass(frozen=True)
class Charge:
    """How one request is paid: nothing (free route), a free-tier call, or an x402 payment."""

    kind: str  # "none" | "free_call" | "x402"
    wallet: str | None
    price: Decimal | None = None
    payment: X402Charge | None = None


NO_CHARGE = Charge(kind="none", wallet=None)
AnyRequest = Request[Any, Any, Any]


class PaymentGate(Protocol):
    async def authorize(self, request: AnyRequest, conn: asyncpg.Connection) -> Charge: ...

    async def settle(
        self, request: AnyRequest, conn: asyncpg.Connection, charge: Charge
    ) -> None: ...

    async def release(self, charge: Charge) -> None: ...


class Gate:
    def __init__(
        self, free_tier: FreeTier, x402: X402Service, prices_usd: Mapping[str, Decimal]
    ) -> None:
        self.free_tier = free_tier
        self.x402 = x402
        self.prices_usd = prices_usd

    async def authorize(self, request: AnyRequest, conn: asyncpg.Connection) -> Charge:
        wallet: str | None = request.scope.get("user")
        kind = price_of(request.scope.get("route_handler"))
        if kind is None:
            if wallet is not None:
                await self._note_remaining(request, conn, wallet)
            return NO_CHARGE
        price = self.prices_usd[kind]
        payment = await self.x402.accept(request, conn, price)
        if payment is not None:
            owner = wallet or payment.proof.authorization.payer
            request.scope["user"] = owner
            try:
                await self._note_remaining(request, conn, owner)
            except BaseException:
                await self.x402.release(payment)  # the caller never learns of this charge
                raise
            return Charge(kind="x402", wallet=owner, price=price, payment=payment)
        if wallet is None:
            self._require_payment(request, price, "Payment required")
        if await self._note_remaining(request, conn, wallet) > 0:
            return Charge(kind="free_call", wallet=wallet, price=price)
        self._require_payment(request, price, "Free tier used up")

    async def settle(self, request: AnyRequest, conn: asyncpg.Connection, charge: Charge) -> None:
        if charge.kind == "x402" and charge.payment is not None and charge.wallet is not None:
            await self.x402.settle(request, conn, charge.payment, charge.wallet)
        elif charge.kind == "free_call" and charge.wallet is not None:
            left = await self.free_tier.consume(conn, charge.wallet)
            if left is None:  # another request took the last free call meanwhile
                request.state[FREE_TIER_REMAINING_STATE] = 0
                self._require_payment(request, charge.price or Decimal(0), "Free tier used up")
            request.state[FREE_TIER_REMAINING_STATE] = left

    async def release(self, charge: Charge) -> None:
        if charge.payment is not None:
            await self.x402.release(charge.payment)

    async def _note_remaining(
        self, request: AnyRequest, conn: asyncpg.Connection, wallet: str
    ) -> int:
        remaining = await self.free_tier.remaining(conn, wallet)
        request.state[FREE_TIER_REMAINING_STATE] = remaining
        return remaining

    def _require_payment(self, request: AnyRequest, price: Decimal, reason: str) -> NoReturn:
        self.x402.require_payment(request, price, reason)
