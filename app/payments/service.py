"""x402 payment rules: accept a proof for a paid call, settle it before commit, never twice.

The order for a request carrying a proof (each step can only narrow what happens next):
1. read the proof and check it against Engram's own offer (proofs.py, named checks);
2. hold (payer, nonce) so no other request, here or on another instance, can use it meanwhile;
3. look it up in the ledger: settled for this same request → replay the stored response
   (a retry after a lost response pays nothing and is served the same answer); settled for
   another request → rejected;
4. verify with the facilitator (signature, nonce unused on chain, balance, simulation);
5. the handler runs in the request transaction; before commit, settle on chain and write the
   ledger row in that same transaction; a failed settle rolls everything back.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import NoReturn, Protocol
from uuid import UUID

import anyio
import asyncpg
from x402.http.utils import encode_payment_response_header
from x402.schemas import PaymentRequirements, SettleResponse

from app.config import AUTO_SCHEMES, X402Settings, network_prefix
from app.core.errors import Conflict, PaymentRequired, ReplayedResponse, ServiceUnavailable
from app.core.request_values import CapturedResponse, Settled
from app.infra import metrics
from app.infra.instance_state import SharedStore, StoreUnavailable
from app.payments import repository
from app.payments.channels import ChannelCharge, Channels, build_channels
from app.payments.discovery import Discovery
from app.payments.facilitators import Facilitator, LocalFacilitator, build_facilitator
from app.payments.network import Network, network_settings
from app.payments.offers import SCHEME, UPTO_SCHEME, Offer, challenge
from app.payments.proofs import (
    ChannelProof,
    PaymentRejected,
    Proof,
    check_against_offer,
    check_channel_for_network,
    read_channel_proof,
    read_proof,
)
from app.payments.upto import (
    check_cost_within,
    check_upto_offer,
    cost_of,
    read_upto_proof,
    units_after,
    units_before,
)

log = logging.getLogger("engram.payments")


def settlement_outcome(receipt: SettleResponse) -> str:
    """A settlement's outcome as a metric label: settled, or the facilitator's reason class."""
    if receipt.success:
        return "settled"
    return "error" if receipt.error_reason == "unexpected_settle_error" else "refused"


PAYMENT_RESPONSE_HEADER = {2: "PAYMENT-RESPONSE", 1: "X-PAYMENT-RESPONSE"}


@dataclass(frozen=True)
class PaidCall:
    """A paid request as the payment rules see it: plain values the gate read off the request
    (REST and MCP calls alike), so no rule here knows an HTTP framework."""

    method: str
    url: str  # the resource an offer names
    path: str
    query: str
    request_id: str
    headers: Mapping[str, str] = field(repr=False)  # credentials among them: never logged
    discovery: Discovery | None = field(default=None, repr=False)  # the route's, for x402's bazaar
    metered: str | None = None  # the unit a variable-cost route is metered by (prices.py)

    @property
    def endpoint(self) -> str:
        return f"{self.method} {self.path}"


class InFlightGuard(Protocol):
    """Lets one request at a time hold a (payer, nonce), across instances."""

    async def acquire(self, conn: asyncpg.Connection, key: str) -> bool: ...

    async def release(self, key: str) -> None: ...


class PostgresGuard:
    """An advisory lock in the request's own transaction: released by its commit or rollback."""

    async def acquire(self, conn: asyncpg.Connection, key: str) -> bool:
        return await repository.try_lock(conn, key)

    async def release(self, key: str) -> None:
        return None


class SharedStoreGuard:
    """Redis (when configured): a claim that outlives no request by more than its TTL.

    While Redis is unavailable, claims are taken as PostgreSQL advisory locks instead (the
    no-Redis mode's guard). In the moments an outage begins or ends one instance may hold a
    nonce in Redis while another holds it in PostgreSQL; both may then run the handler, but only
    one payment can settle (the token's nonce is single-use on chain, and the ledger's unique
    key refuses a second row for the wallet), so the other is rolled back with a 402 and its
    retry replays.
    A release that fails is retried before this instance's next claim (else the claim would
    stall retries of that payment until its TTL)."""

    def __init__(self, store: SharedStore, ttl_seconds: float) -> None:
        self.store = store
        self.ttl_seconds = ttl_seconds
        self.fallback = PostgresGuard()
        self._in_postgres: set[str] = set()
        self._unreleased: set[str] = set()

    async def acquire(self, conn: asyncpg.Connection, key: str) -> bool:
        try:
            await self._release_leftovers()
            return await self.store.claim(f"x402:{key}", self.ttl_seconds)
        except StoreUnavailable as exc:
            if not exc.circuit_open:
                log.warning("payment claims in PostgreSQL while Redis is unavailable: %s", exc)
        held = await self.fallback.acquire(conn, key)
        if held:
            self._in_postgres.add(key)
        return held

    async def release(self, key: str) -> None:
        if key in self._in_postgres:
            self._in_postgres.discard(key)  # the transaction's end released it
            return
        try:
            await self.store.release(f"x402:{key}")
        except StoreUnavailable:
            self._unreleased.add(key)

    async def _release_leftovers(self) -> None:
        for key in list(self._unreleased):
            await self.store.release(f"x402:{key}")
            self._unreleased.discard(key)


@dataclass(frozen=True)
class X402Charge:
    proof: Proof
    offer: Offer
    guard_key: str
    fingerprint: bytes
    # this proof's redeemable ledger row (settled, its work never committed): completed, not
    # settled again
    redeemable: asyncpg.Record | None = None
    cost: int | None = None  # an `upto` payment's cost to settle (atomic units), once known

    @property
    def upto(self) -> bool:
        return self.proof.claimed_scheme == UPTO_SCHEME

    @property
    def amount(self) -> int:
        """What settles: the route's price, or an `upto` payment's cost."""
        return self.offer.amount if self.cost is None else self.cost

    def requirements(self) -> PaymentRequirements:
        """What the payment is verified against: for `upto`, the maximum signed for."""
        upto = self.offer.upto_requirements() if self.upto else None
        return upto or self.offer.requirements()

    def settle_requirements(self) -> PaymentRequirements:
        """What the payment settles: for `upto`, the call's cost."""
        upto = self.offer.upto_requirements(self.amount) if self.upto else None
        return upto or self.offer.requirements()


# How long a client waits before retrying a payment whose settlement outcome is not known yet.
SETTLEMENT_PENDING_RETRY_SECONDS = 5


def valid_until(valid_before: int) -> datetime:
    """An authorization's validBefore (unix seconds, a uint256) as the ledger's time. One past
    Python's year 9999 (the largest uint256 is a common "never expires") is the calendar's last
    instant: it was an OverflowError, a 500 for a payment signed as it may be."""
    try:
        return datetime.fromtimestamp(valid_before, UTC)
    except (OverflowError, ValueError, OSError):
        return datetime.max.replace(tzinfo=UTC)


def payment_in_flight() -> Conflict:
    return Conflict(
        "This payment is being processed by another request; retry shortly to get its result",
        {"reason": "payment_in_flight"},
        headers={"Retry-After": "1"},
    )


def settlement_pending(message: str) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"{message}; retry with the same payment: it is either redeemed or refused, never"
        " charged twice",
        {"reason": "settlement_pending"},
        {"Retry-After": str(SETTLEMENT_PENDING_RETRY_SECONDS)},
    )


def _receipt_of(charge: X402Charge, row: asyncpg.Record) -> SettleResponse:
    """A redeemable row's receipt: the facilitator's, or (found by the reconciler on chain) one
    made of what the chain said."""
    if row["settle_response"]:
        return SettleResponse.model_validate(row["settle_response"])
    return SettleResponse(
        success=True, transaction=row["tx_hash"] or "", network=charge.offer.network.caip2,
        payer=charge.proof.authorization.payer,
    )  # fmt: skip


def receipt_header(charge: X402Charge, receipt: SettleResponse) -> dict[str, str]:
    """The settlement receipt in the payer's own x402 version: `PAYMENT-RESPONSE` naming the
    network as v2 does (`eip155:8453`), `X-PAYMENT-RESPONSE` as v1 does (`base`)."""
    version = charge.proof.version
    if version == 1:
        receipt = receipt.model_copy(update={"network": charge.offer.network.name})
    return {PAYMENT_RESPONSE_HEADER[version]: encode_payment_response_header(receipt)}


def _named(offers: tuple[Offer, ...], network: str) -> tuple[Offer, tuple[Offer, ...]]:
    """The offer a read proof was checked against (its `accepted.network`), and the others."""
    offer = next(o for o in offers if o.network.caip2 == network)
    return offer, tuple(o for o in offers if o is not offer)


def request_fingerprint(method: str, path: str, query: str, body: bytes) -> bytes:
    """What makes two requests "the same request" for an idempotent replay."""
    return hashlib.sha256(
        b"\x1f".join([method.encode(), path.encode(), query.encode(), body])
    ).digest()


@dataclass(frozen=True)
class Rail:
    """A network payments are also taken on (ENGRAM_X402_NETWORKS), beside the default one: its
    token, payTo, and who settles there (its own facilitator or relayer, its own channels)."""

    network: Network
    pay_to: str
    facilitator: Facilitator
    channels: Channels | None = None


def other_rails(
    x402: X402Settings, networks: tuple[Network, ...], default_settles: bool
) -> tuple[Rail, ...]:
    """ENGRAM_X402_NETWORKS's networks (`networks[1:]`, as configured_networks made them), each
    settled by its own facilitator or relayer, with its own channels when they are on. A network
    listed that could not be paid or settled stops the start, named."""
    rails = []
    for network, view in zip(networks[1:], network_settings(x402)[1:], strict=True):
        prefix = network_prefix(network.name)
        if not (default_settles and x402.pay_to):
            raise SystemExit(
                "ENGRAM_X402_NETWORKS adds networks to the default one: set that one up first"
                " (ENGRAM_X402_PAY_TO and a facilitator, or ENGRAM_X402_RPC_URL and"
                " ENGRAM_X402_RELAYER_KEY)"
            )
        facilitator = build_facilitator(view, network.caip2)
        if facilitator is None:
            raise SystemExit(
                f"ENGRAM_X402_NETWORKS lists {network.name}, which nothing settles: set"
                f" {prefix}FACILITATOR_URL, or {prefix}RPC_URL with a relayer key"
                f" ({prefix}RELAYER_KEY, or ENGRAM_X402_RELAYER_KEY)"
            )
        if view.channels and not (view.rpc_url and view.relayer_key):
            # asked for (ENGRAM_X402_SCHEMES=exact,batch-settlement); by default (auto) a
            # network offers channels only where its relayer can settle them
            raise SystemExit(
                "ENGRAM_X402_SCHEMES offers payment channels, which settle with the relayer key"
                f" over each network's RPC: set {prefix}RPC_URL (and a relayer key)"
            )
        assert view.pay_to is not None  # the default's, at least
        rails.append(Rail(network, view.pay_to, facilitator, build_channels(view, network.caip2)))
    return tuple(rails)


def upto_offered(x402: X402Settings, facilitator: Facilitator | None) -> bool:
    """Whether `upto` is offered: the payer's permit names the one facilitator that may settle
    it, so only where Engram settles itself (a relayer key over an RPC URL). Listed in
    ENGRAM_X402_SCHEMES without one, the start stops, named; by default (auto) it is left out."""
    if not x402.upto:
        return False
    if not isinstance(facilitator, LocalFacilitator):
        if x402.schemes == AUTO_SCHEMES:
            return False  # a facilitator URL or CDP key settles here: not this relayer
        raise SystemExit(
            "ENGRAM_X402_SCHEMES lists upto, which Engram settles with its own relayer: set"
            " ENGRAM_X402_RPC_URL and ENGRAM_X402_RELAYER_KEY (and no facilitator URL or CDP key)"
        )
    return True


class X402Service:
    def __init__(
        self,
        network: Network,
        pay_to: str | None,
        facilitator: Facilitator | None,
        guard: InFlightGuard,
        max_timeout_seconds: int,
        channels: Channels | None = None,
        others: tuple[Rail, ...] = (),
        upto: bool = False,
        unit_prices_usd: Mapping[str, Decimal] | None = None,
    ) -> None:
        self.network = network  # the default network (ENGRAM_X402_NETWORK) and how it settles
        self.pay_to = pay_to
        self.facilitator = facilitator
        self.guard = guard
        self.max_timeout_seconds = max_timeout_seconds
        self.channels = channels  # x402 payment channels, offered beside `exact` when set
        self.others = others  # further networks, offered after the default one
        self.upto = upto  # x402's `upto` offered on metered routes, where a local relayer settles
        self.unit_prices_usd = dict(unit_prices_usd or {})

    @property
    def enabled(self) -> bool:
        return bool(self.pay_to and self.facilitator)

    def _other(self, network: Network) -> Rail | None:
        return next((rail for rail in self.others if rail.network == network), None)

    def facilitator_on(self, network: Network) -> Facilitator | None:
        """Who verifies and settles `exact` payments on `network`."""
        rail = self._other(network)
        return self.facilitator if rail is None else rail.facilitator

    def channels_on(self, network: Network) -> Channels | None:
        """`network`'s payment channels (each network's deposits settle on its own chain)."""
        rail = self._other(network)
        return self.channels if rail is None else rail.channels

    def all_channels(self) -> tuple[tuple[Network, Channels], ...]:
        """Each network's payment channels (none when they are off), the default's first: each
        network's claims are sent on its own chain."""
        pairs = [(self.network, self.channels), *((r.network, r.channels) for r in self.others)]
        return tuple((network, channels) for network, channels in pairs if channels is not None)

    def upto_facilitator(self, network: Network, call: PaidCall) -> str | None:
        """Who settles `upto` payments for `call` on `network`: the local relayer (the payer's
        permit names it), on a metered route when `upto` is offered; else None."""
        facilitator = self.facilitator_on(network)
        if not (self.upto and call.metered and isinstance(facilitator, LocalFacilitator)):
            return None
        return facilitator.relayer_address

    def offers(self, call: PaidCall, price: Decimal) -> tuple[Offer, ...]:
        """The call's offer on each network, the default network's first."""
        first = self.offer(call, price)
        return (first, *(
            replace(first, network=rail.network, pay_to=rail.pay_to,
                    channels=rail.channels.scheme if rail.channels else None,
                    upto_facilitator=self.upto_facilitator(rail.network, call))
            for rail in self.others
        ))  # fmt: skip

    def offer(self, call: PaidCall, price: Decimal) -> Offer:
        """The call's offer on the default network."""
        return Offer(
            network=self.network,
            pay_to=self.pay_to or "",
            price_usd=price,
            max_timeout_seconds=self.max_timeout_seconds,
            resource_url=call.url,
            description=call.discovery.description if call.discovery else f"Engram {call.endpoint}",
            discovery=call.discovery,
            channels=self.channels.scheme if self.channels else None,
            upto_facilitator=self.upto_facilitator(self.network, call),
        )

    def require_payment(
        self,
        call: PaidCall,
        price: Decimal,
        message: str,
        reason: str | None = None,
        headers: dict[str, str] | None = None,
        corrective: tuple[Network, str] | None = None,
    ) -> NoReturn:
        """A 402 with the call's offers; `corrective`: a channel's snapshot, carried by its
        network's batch-settlement entry (x402's corrective 402)."""
        if not self.enabled:
            raise PaymentRequired(
                f"{message}: this call costs ${price} in USDC, and this server is not configured"
                " to accept x402 payments (ENGRAM_X402_PAY_TO and a facilitator)",
                {"price_usd": str(price)},
                headers,
            )
        offers = self.offers(call, price)
        if corrective is not None:
            network, snapshot = corrective
            offers = tuple(
                replace(o, corrective=snapshot) if o.network == network else o for o in offers
            )
        first, *others = offers
        c = challenge(first, message, reason, others=tuple(others))
        raise PaymentRequired(message, headers={**c.headers, **(headers or {})}, body=c.body)

    def proof_of(self, call: PaidCall, price: Decimal) -> tuple[Offer, Proof] | None:
        """The call's proof, checked against Engram's offer on the network it names; None when
        it carries none."""
        if not self.enabled:
            return None
        offers = self.offers(call, price)
        try:
            upto = read_upto_proof(call.headers, *offers) if call.metered else None
            if upto is not None:
                upto_offer, upto_proof = upto
                assert upto_offer.upto_facilitator is not None  # read only where offered
                check_upto_offer(
                    upto_proof, upto_offer, upto_offer.upto_facilitator, int(time.time())
                )
                return upto
            proof = read_proof(dict(call.headers), *offers)
            if proof is None:
                return None
            offer, others = _named(offers, proof.payload.accepted.network)
            check_against_offer(proof, offer, int(time.time()), others)
        except PaymentRejected as rejected:
            self.require_payment(call, price, rejected.message, rejected.reason)
        return offer, proof

    # ---- upto (upto.py): a signed maximum, the call's cost settled ---------------------------

    def _upto_cost(self, call: PaidCall, units: int, offer: Offer) -> int:
        assert call.metered is not None
        return cost_of(units, self.unit_prices_usd[call.metered], offer.network.atomic)

    def price_upto(self, call: PaidCall, charge: X402Charge, body: bytes) -> X402Charge:
        """An `upto` charge with its cost as known before the work (a batch's items, a bound on
        an LLM call's tokens); a cost above the signed maximum is refused before any work."""
        if not charge.upto:
            return charge
        assert call.metered is not None
        cost = self._upto_cost(call, units_before(call.metered, body), charge.offer)
        try:
            check_cost_within(charge.proof, cost)
        except PaymentRejected as rejected:
            self.require_payment(call, charge.offer.price_usd, rejected.message, rejected.reason)
        return replace(charge, cost=cost)

    def final_upto(
        self, call: PaidCall, charge: X402Charge, body: bytes, answer: bytes | None
    ) -> X402Charge:
        """An `upto` charge with the cost its work reports (the tokens an LLM used), never above
        what was signed for: the bound checked before the work holds it there, and a tokenizer
        that counted past it is charged the maximum, not refused after the work is done."""
        if not charge.upto:
            return charge
        assert call.metered is not None
        cost = self._upto_cost(call, units_after(call.metered, body, answer), charge.offer)
        if cost > charge.proof.authorization.value:
            log.warning("an upto call used more than its bound; settling the signed maximum")
        return replace(charge, cost=min(cost, charge.proof.authorization.value))

    # ---- payment channels (channels.py): a deposit settles on chain, a voucher does not ----

    def channel_proof_of(self, call: PaidCall, price: Decimal) -> tuple[Offer, ChannelProof] | None:
        """The call's proof when it pays on a channel, read against the channel offer of the
        network it names; None when channels are off everywhere or the proof is for `exact`
        (proof_of reads it)."""
        offers = tuple(o for o in self.offers(call, price) if o.channels is not None)
        if not (self.enabled and offers):
            return None
        try:
            proof = read_channel_proof(call.headers, *offers)
            if proof is None:
                return None
            offer, others = _named(offers, proof.payload.accepted.network)
            check_channel_for_network(proof, offer, others)
        except PaymentRejected as rejected:
            self.require_payment(call, price, rejected.message, rejected.reason)
        return offer, proof

    async def accept_channel(
        self, conn: asyncpg.Connection, call: PaidCall, offer: Offer, proof: ChannelProof,
        body: bytes,
    ) -> ChannelCharge:  # fmt: skip
        """A channel payment checked, its channel row locked for the request's transaction."""
        channels = self.channels_on(offer.network)
        assert channels is not None
        fingerprint = request_fingerprint(call.method, call.path, call.query, body)
        try:
            return await channels.accept(conn, offer, proof, fingerprint)
        except PaymentRejected as rejected:
            corrective = (offer.network, rejected.corrective) if rejected.corrective else None
            self.require_payment(
                call, offer.price_usd, rejected.message, rejected.reason, corrective=corrective
            )

    async def settle_channel(
        self, conn: asyncpg.Connection, call: PaidCall, charge: ChannelCharge,
        response: CapturedResponse | None,
    ) -> dict[str, str]:  # fmt: skip
        """Settle a deposit on chain, then write the voucher in the request's transaction; the
        receipt header the answer carries."""
        channels = self.channels_on(charge.offer.network)
        assert channels is not None
        try:
            receipt = await channels.settle(
                conn, charge, call.endpoint, call.request_id,
                (response.status, response.body) if response else None,
            )  # fmt: skip
        except PaymentRejected as rejected:
            self.require_payment(call, charge.offer.price_usd, rejected.message, rejected.reason)
        return {PAYMENT_RESPONSE_HEADER[2]: encode_payment_response_header(receipt)}

    async def accept(
        self,
        conn: asyncpg.Connection,
        call: PaidCall,
        wallet: str,
        offer: Offer,
        proof: Proof,
        body: bytes,
    ) -> X402Charge:
        """A checked proof held (no other request may use it meanwhile), found unused in
        `wallet`'s ledger and verified by the facilitator. `body` makes the request's
        fingerprint. A proof spent for another wallet is refused by the chain at settlement."""
        charge = X402Charge(
            proof=proof,
            offer=offer,
            # the payer is the hash tag: a Redis Cluster keeps a payer's claims in one slot
            guard_key=f"{{{proof.authorization.payer}}}:{offer.network.caip2}"
            f":{proof.authorization.nonce}",
            fingerprint=request_fingerprint(call.method, call.path, call.query, body),
        )
        with anyio.CancelScope(shield=True):  # a claim taken is a claim known, so released
            held = await self.guard.acquire(conn, charge.guard_key)
        if not held:
            raise payment_in_flight()
        try:
            charge = await self._check_ledger(call, conn, wallet, charge)
            if charge.redeemable is None:
                await self._verify(call, charge)
        except BaseException:
            await self.release(charge)
            raise
        return charge

    async def _check_ledger(
        self, call: PaidCall, conn: asyncpg.Connection, wallet: str, charge: X402Charge
    ) -> X402Charge:
        """The charge as the ledger allows it: unused, replayed, redeemable, or refused."""
        auth = charge.proof.authorization
        network = charge.offer.network
        await self._check_identifier(conn, wallet, charge)
        row = await repository.find(
            conn, wallet, network.caip2, network.asset, auth.payer, auth.nonce
        )
        if row is None:
            return charge
        same_request = row["request_fingerprint"] == charge.fingerprint
        if row["status"] == "settled" and same_request and row["response_body"]:
            receipt = _receipt_of(charge, row)
            raise ReplayedResponse(
                row["response_status"],
                bytes(row["response_body"]),
                {
                    **receipt_header(charge, receipt),
                    "Cache-Control": "private, no-store",
                    "X-Idempotent-Replay": "true",
                },
            )
        if row["status"] == "redeemable" and same_request:
            return replace(charge, redeemable=row)
        if row["status"] == "pending":
            raise settlement_pending("This payment's settlement is not resolved yet")
        self.require_payment(
            call,
            charge.offer.price_usd,
            "This payment was already used for another request; sign a new authorization",
            "invalid_exact_evm_nonce_already_used",
        )

    async def _check_identifier(
        self, conn: asyncpg.Connection, wallet: str, charge: X402Charge
    ) -> None:
        """x402's payment-identifier: an id already used with another payment or request is a
        409; with the same payment and request, the ledger's own rules answer (a replay)."""
        payment_id = charge.proof.payment_id
        if payment_id is None:
            return
        row = await repository.find_by_identifier(conn, wallet, payment_id)
        if row is None:
            return
        auth = charge.proof.authorization
        same_payment = (row["payer"], row["nonce"]) == (auth.payer, auth.nonce)
        if not same_payment or row["request_fingerprint"] != charge.fingerprint:
            raise Conflict(
                "This payment identifier was already used with another payment or request",
                {"reason": "payment_identifier_conflict"},
            )

    async def _verify(self, call: PaidCall, charge: X402Charge) -> None:
        facilitator = self.facilitator_on(charge.offer.network)
        assert facilitator is not None
        try:
            verdict = await facilitator.verify(charge.proof.payload, charge.requirements())
        except Exception as exc:
            log.exception("facilitator verify failed")
            metrics.X402_VERIFICATIONS.labels("error").inc()
            self.require_payment(
                call, charge.offer.price_usd, f"Payment could not be verified: {exc}",
                "unexpected_verify_error",
            )  # fmt: skip
        metrics.X402_VERIFICATIONS.labels("valid" if verdict.is_valid else "invalid").inc()
        if not verdict.is_valid:
            reason = verdict.invalid_reason or "invalid_payload"
            self.require_payment(
                call,
                charge.offer.price_usd,
                f"Payment rejected: {verdict.invalid_message or reason}",
                reason,
            )

    async def settle(
        self, ledger: asyncpg.Pool, call: PaidCall, charge: X402Charge, wallet: str
    ) -> Settled:
        """Settle the charge, its ledger row written before and after in transactions of its own
        on `ledger` (they outlive a rollback of the work); or take its redeemable row."""
        if charge.redeemable is not None:
            metrics.X402_SETTLEMENTS.labels("redeemed").inc()
            return Settled(charge.redeemable["id"], _receipt_of(charge, charge.redeemable))
        payment_id = await self._hold(ledger, call, charge, wallet)
        receipt = await self._settle_held(ledger, call, charge, wallet, payment_id)
        return Settled(payment_id, receipt)

    async def _hold(
        self, ledger: asyncpg.Pool, call: PaidCall, charge: X402Charge, wallet: str
    ) -> UUID:
        auth = charge.proof.authorization
        pending = repository.PendingPayment(
            payer=auth.payer,
            wallet=wallet,
            nonce=auth.nonce,
            network=charge.offer.network.caip2,
            asset=charge.offer.network.asset,
            amount=charge.amount,
            scheme=charge.proof.claimed_scheme if charge.upto else SCHEME,
            pay_to=charge.offer.pay_to,
            endpoint=call.endpoint,
            request_id=call.request_id,
            request_fingerprint=charge.fingerprint,
            payment_identifier=charge.proof.payment_id,
            valid_before=valid_until(auth.valid_before),
        )
        async with ledger.acquire() as conn:
            payment_id = await repository.hold_pending(conn, pending)
        if payment_id is None:  # a concurrent request with this proof or payment identifier
            raise payment_in_flight()
        return payment_id

    async def _settle_held(
        self,
        ledger: asyncpg.Pool,
        call: PaidCall,
        charge: X402Charge,
        wallet: str,
        payment_id: UUID,
    ) -> SettleResponse:
        """A failed settlement is a 402 carrying its receipt (its row dropped: nothing moved);
        one whose outcome is unknown keeps its pending row for the reconciler."""
        facilitator = self.facilitator_on(charge.offer.network)
        assert facilitator is not None
        started = time.perf_counter()
        try:
            receipt = await facilitator.settle(charge.proof.payload, charge.settle_requirements())
        except Exception as exc:
            log.exception("facilitator settle failed; the payment stays pending to reconcile")
            metrics.SETTLE_SECONDS.observe(time.perf_counter() - started)
            metrics.X402_SETTLEMENTS.labels("unknown").inc()
            raise settlement_pending(f"The payment's settlement did not answer: {exc}") from exc
        metrics.SETTLE_SECONDS.observe(time.perf_counter() - started)
        metrics.X402_SETTLEMENTS.labels(settlement_outcome(receipt)).inc()
        async with ledger.acquire() as conn:
            if not receipt.success:
                await repository.drop_unsettled(conn, wallet, payment_id)
            else:
                await repository.note_settled_on_chain(
                    conn, wallet, payment_id, receipt.transaction or None,
                    receipt.model_dump(by_alias=True, exclude_none=True),
                )  # fmt: skip
        if not receipt.success:
            self.require_payment(
                call,
                charge.offer.price_usd,
                f"Payment could not be settled: {receipt.error_message or receipt.error_reason}",
                receipt.error_reason or "unexpected_settle_error",
                receipt_header(charge, receipt),
            )
        return receipt

    async def complete(
        self,
        conn: asyncpg.Connection,
        charge: X402Charge,
        wallet: str,
        settled: Settled,
        response: CapturedResponse | None,
    ) -> dict[str, str]:
        """Mark the ledger row settled in the request's transaction (it commits with the call's
        work); returns the receipt header the answer carries."""
        await repository.complete(
            conn, wallet, settled.payment_id,
            response.status if response else None, response.body if response else None,
        )  # fmt: skip
        return receipt_header(charge, settled.receipt)

    async def unfinished(self, ledger: asyncpg.Pool, wallet: str, settled: Settled) -> None:
        """The work of a settled payment did not commit: its row becomes redeemable now (the
        reconciler would find it anyway)."""
        async with ledger.acquire() as conn:
            await repository.mark_redeemable(
                conn, wallet, settled.payment_id, settled.receipt.transaction or None
            )

    async def release(self, charge: X402Charge) -> None:
        """Let go of the charge's (payer, nonce); runs to its end even in a cancelled request
        (Litestar cancels a request's dependencies when one of them fails)."""
        with anyio.CancelScope(shield=True):
            await self.guard.release(charge.guard_key)
