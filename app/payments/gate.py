"""The one seam every paid call goes through: decide how it is paid, then settle before commit.

- A request carrying an x402 proof pays with it (the client chose to pay), whatever its free tier.
- Otherwise a wallet with free calls left uses one: checked before the handler runs and consumed
  just before the commit, so a failed handler never costs a free call and the wallet row lock is
  held only for the commit.
- Otherwise, or with no identity at all, the answer is 402 with Engram's x402 offer.

Who owns the data when a payment is made: the signed `x-wallet-auth` wallet if there is one, else
the payer. A payer may pay for another wallet's call (an agent's treasury paying for its
workers); the payment is listed under both in GET /v1/payments.

This is request glue, like a middleware: it reads the request (headers, body, route price, the
route's bazaar declaration) and hands the payment rules (service.py) plain values.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Literal, NoReturn

import anyio
import asyncpg
from litestar import Litestar

from app.free_tier.service import FreeTier
from app.http.headers import request_id_of
from app.http.markers import metered_by, price_of
from app.http.params import AnyRequest
from app.http.state import state_of
from app.http.transaction import NO_CHARGE, NoCharge
from app.payments.channels import ChannelCharge
from app.payments.discovery import Discovery, declarations
from app.payments.offers import Offer
from app.payments.proofs import ChannelProof, carries_proof
from app.payments.service import PaidCall, X402Charge, X402Service
from app.usage.service import UsageService, endpoint_label

log = logging.getLogger("engram.payments")


@dataclass(frozen=True)
class FreeCall:
    """A paid route, paid with one of the wallet's free calls."""

    wallet: str
    price: Decimal
    kind: Literal["free_call"] = "free_call"


@dataclass(frozen=True)
class X402Payment:
    """A paid route, paid with an x402 payment held for this request."""

    wallet: str
    price: Decimal
    payment: X402Charge
    call: PaidCall = field(repr=False)  # the request it pays for, as the payment rules read it
    kind: Literal["x402"] = "x402"


@dataclass(frozen=True)
class ChannelPayment:
    """A paid route, paid on an x402 payment channel (a deposit or a voucher)."""

    wallet: str
    price: Decimal
    payment: ChannelCharge
    call: PaidCall = field(repr=False)
    kind: Literal["channel"] = "channel"


# How one request is paid; `kind` lets a checker narrow it.
Charge = NoCharge | FreeCall | X402Payment | ChannelPayment


def _ledger(request: AnyRequest) -> asyncpg.Pool:
    """The pool of the ledger's own transactions (app/asgi.py): a few connections apart from the
    requests', so a paid request never waits for a second one from its own pool."""
    pool: asyncpg.Pool = request.app.state.ledger_pool
    return pool


def _endpoint(request: AnyRequest) -> str:
    """The metered route, as usage counts it."""
    return endpoint_label(request.method, request.scope.get("path_template") or request.url.path)


def paid_call(request: AnyRequest, discovery: Discovery | None = None) -> PaidCall:
    """The plain values the payment rules need from a request."""
    return PaidCall(
        method=request.method,
        url=str(request.url),
        path=request.url.path,
        query=request.url.query or "",
        headers=dict(request.headers),
        request_id=request_id_of(request.scope),
        discovery=discovery,
        metered=metered_by(request.scope.get("route_handler")),
    )


def declared_routes(app: Litestar) -> dict[str, Discovery]:
    """Every paid route's bazaar declaration, by route ("POST /v1/store"), made from the OpenAPI
    document the app serves (its handlers' own types). A route that cannot be declared is a bug
    (tests/payments/test_discovery.py declares them all): its 402s still offer payment."""
    try:
        return declarations(app.openapi_schema.to_schema())
    except Exception:
        log.exception("the x402 bazaar declarations could not be made; 402s go without them")
        return {}


class Gate:
    def __init__(
        self,
        free_tier: FreeTier,
        x402: X402Service,
        prices_usd: Mapping[str, Decimal],
        usage: UsageService,
    ) -> None:
        self.free_tier = free_tier
        self.x402 = x402
        self.prices_usd = prices_usd
        self.usage = usage
        self._declared: dict[str, Discovery] | None = None  # made at the first 402, then kept
        self._declaring = threading.Lock()

    async def discovery(self, request: AnyRequest) -> Discovery | None:
        """The bazaar declaration of the request's route, for a 402 or an x402 payment (a free
        call needs none): a lookup, once they are made."""
        if not self.x402.enabled:
            return None  # its 402 offers no payment to declare
        declared = self._declared
        if declared is None:
            declared = await anyio.to_thread.run_sync(self._declare, request.app)
        return declared.get(_endpoint(request))

    def _declare(self, app: Litestar) -> dict[str, Discovery]:
        """Makes the declarations, once per process (a few hundred ms, the OpenAPI document's
        included), in a worker thread: the event loop keeps serving meanwhile, and the 402s and
        payments arriving meanwhile wait here for the one making them."""
        with self._declaring:
            if self._declared is None:
                self._declared = declared_routes(app)
            return self._declared

    async def authorize(self, request: AnyRequest, conn: asyncpg.Connection) -> Charge:
        charge = await self._charge_for(request, conn)
        if isinstance(charge, X402Payment | ChannelPayment):
            # settling it needs the call's answer (app/payments/capture.py); a free call's isn't
            state_of(request.scope)["keeps_answer"] = True
        return charge

    async def _charge_for(self, request: AnyRequest, conn: asyncpg.Connection) -> Charge:
        wallet: str | None = request.scope.get("user")
        kind = price_of(request.scope.get("route_handler"))
        if kind is None:
            if wallet is not None:
                await self._note_remaining(request, conn, wallet)
            return NO_CHARGE
        price = self.prices_usd[kind]
        call = paid_call(request)
        if carries_proof(call.headers):  # the offer it is checked against declares the route
            call = replace(call, discovery=await self.discovery(request))
            on_channel = self.x402.channel_proof_of(call, price)
            if on_channel is not None:
                return await self._pay_on_channel(request, conn, wallet, price, call, on_channel)
        proof = self.x402.proof_of(call, price)
        if proof is not None:
            offer, checked = proof
            owner = wallet or checked.authorization.payer
            body = await request.body()
            payment = await self.x402.accept(conn, call, owner, offer, checked, body)
            request.scope["user"] = owner
            try:
                payment = self.x402.price_upto(call, payment, body)  # before any work
                await self._note_remaining(request, conn, owner)
            except BaseException:
                await self.x402.release(payment)  # the caller never learns of this charge
                raise
            return X402Payment(wallet=owner, price=price, payment=payment, call=call)
        if wallet is None:
            await self._require_payment(request, price, "Payment required")
        if await self._note_remaining(request, conn, wallet) > 0:
            return FreeCall(wallet=wallet, price=price)
        await self._require_payment(request, price, "Free tier used up")

    async def _pay_on_channel(
        self, request: AnyRequest, conn: asyncpg.Connection, wallet: str | None, price: Decimal,
        call: PaidCall, on_channel: tuple[Offer, ChannelProof],
    ) -> ChannelPayment:  # fmt: skip
        offer, proof = on_channel
        owner = wallet or proof.payer
        payment = await self.x402.accept_channel(conn, call, offer, proof, await request.body())
        request.scope["user"] = owner
        await self._note_remaining(request, conn, owner)
        return ChannelPayment(wallet=owner, price=price, payment=payment, call=call)

    async def settle(self, request: AnyRequest, conn: asyncpg.Connection, charge: Charge) -> None:
        state = state_of(request.scope)
        if isinstance(charge, ChannelPayment):
            state["paid_response_headers"] = await self.x402.settle_channel(
                conn, charge.call, charge.payment, state.get("captured_response")
            )
            await self.usage.count_call(conn, charge.wallet, _endpoint(request), paid=True)
        elif isinstance(charge, X402Payment):
            payment = charge.payment
            if payment.upto:  # its cost, from the work done
                captured = state.get("captured_response")
                payment = self.x402.final_upto(
                    charge.call, payment, await request.body(),
                    captured.body if captured else None,
                )  # fmt: skip
            settled = await self.x402.settle(_ledger(request), charge.call, payment, charge.wallet)
            state["settled_payment"] = settled
            state["paid_response_headers"] = await self.x402.complete(
                conn, charge.payment, charge.wallet, settled, state.get("captured_response")
            )
            await self.usage.count_call(conn, charge.wallet, _endpoint(request), paid=True)
        elif isinstance(charge, FreeCall):
            left = await self.free_tier.consume(conn, charge.wallet)
            if left is None:  # another request took the last free call meanwhile
                state["free_tier_remaining"] = 0
                await self._require_payment(request, charge.price, "Free tier used up")
            state["free_tier_remaining"] = left
            await self.usage.count_call(conn, charge.wallet, _endpoint(request), paid=False)

    async def unfinished(self, request: AnyRequest, charge: Charge) -> None:
        """The request's transaction failed after its payment settled: keep it redeemable."""
        settled = state_of(request.scope).get("settled_payment")
        if isinstance(charge, X402Payment) and settled is not None:
            await self.x402.unfinished(_ledger(request), charge.wallet, settled)

    async def release(self, charge: Charge) -> None:
        if isinstance(charge, X402Payment):
            await self.x402.release(charge.payment)

    async def _note_remaining(
        self, request: AnyRequest, conn: asyncpg.Connection, wallet: str
    ) -> int:
        remaining = await self.free_tier.remaining(conn, wallet)
        state_of(request.scope)["free_tier_remaining"] = remaining
        return remaining

    async def _require_payment(self, request: AnyRequest, price: Decimal, reason: str) -> NoReturn:
        self.x402.require_payment(paid_call(request, await self.discovery(request)), price, reason)
