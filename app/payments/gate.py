"""The one seam every paid call goes through: decide how it is paid, then settle before commit.

A paid call is covered by a free-tier call while the wallet has some; after that the payment
layer (x402, next) takes over. Until it exists, `require_payment` answers 402 PAYMENT_REQUIRED.
Free calls are checked before the handler runs and consumed just before the commit, so a failed
handler never costs a free call and the wallet row lock is held only for the commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import NoReturn, Protocol

import asyncpg

from app.api.errors import PaymentRequired
from app.api.params import MaybeWalletRequest
from app.auth.free_tier import FreeTier
from app.payments.prices import price_of

FREE_TIER_REMAINING_STATE = "free_tier_remaining"


@dataclass(frozen=True)
class Charge:
    """How one request is paid: nothing (free route), a free-tier call, or (later) x402."""

    kind: str  # "none" | "free_call"
    wallet: str | None
    price: Decimal | None = None


NO_CHARGE = Charge(kind="none", wallet=None)


class PaymentGate(Protocol):
    async def authorize(self, request: MaybeWalletRequest, conn: asyncpg.Connection) -> Charge: ...

    async def settle(
        self, request: MaybeWalletRequest, conn: asyncpg.Connection, charge: Charge
    ) -> None: ...


class FreeTierGate:
    """Free tier first; past it, `require_payment` (the x402 layer's place)."""

    def __init__(self, free_tier: FreeTier) -> None:
        self.free_tier = free_tier

    async def authorize(self, request: MaybeWalletRequest, conn: asyncpg.Connection) -> Charge:
        wallet: str | None = request.scope.get("user")
        price = price_of(request.scope.get("route_handler"))
        if wallet is None:
            if price is None:
                return NO_CHARGE
            return self.require_payment(request, price, "No wallet identity")
        remaining = await self.free_tier.remaining(conn, wallet)
        request.state[FREE_TIER_REMAINING_STATE] = remaining
        if price is None:
            return NO_CHARGE
        if remaining > 0:
            return Charge(kind="free_call", wallet=wallet, price=price)
        return self.require_payment(request, price, "Free tier used up")

    async def settle(
        self, request: MaybeWalletRequest, conn: asyncpg.Connection, charge: Charge
    ) -> None:
        if charge.kind != "free_call" or charge.wallet is None:
            return
        left = await self.free_tier.consume(conn, charge.wallet)
        if left is None:  # another request took the last free call meanwhile
            request.state[FREE_TIER_REMAINING_STATE] = 0
            self.require_payment(request, charge.price or Decimal(0), "Free tier used up")
        request.state[FREE_TIER_REMAINING_STATE] = left

    def require_payment(self, request: MaybeWalletRequest, price: Decimal, reason: str) -> NoReturn:
        raise PaymentRequired(
            f"{reason}: this call costs ${price} in USDC over x402, and this server does not"
            " accept x402 payments yet",
            details={"price_usd": str(price), "endpoint": request.url.path},
        )
