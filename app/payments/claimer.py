"""The channel claimer: turns accepted vouchers into money (x402 batch-settlement).

A voucher is accepted with no on-chain step (channels.py); the receiver collects later, and must
do so before the payer can take the escrow back (the channel's withdraw delay, 15 minutes at the
least). Each instance runs this on start and then every `ENGRAM_X402_CLAIM_EVERY_SECONDS`
(app/asgi.py), as the reconciler. One run:

1. Reconciles claims left `pending` (a send with no answer, a process killed mid-flight, another
   instance's): claims are cumulative, so one whose total is at or below the channel's on-chain
   totalClaimed is confirmed, never sent again; one not on chain and untouched past
   `ENGRAM_X402_RECONCILE_AFTER_SECONDS` is failed, and its channel is claimed anew.
2. Reads each active channel's state on chain (balance, totalClaimed, a pending withdrawal,
   refund nonce) into its row: a withdrawal started after the deposit is noticed here.
3. Claims a channel's charged total when its unclaimed amount or the age of its oldest unclaimed
   voucher passes the operator's settings, or at once when a withdrawal is pending; up to
   CLAIMS_PER_TRANSACTION channels per transaction.
4. Refunds channels idle past `ENGRAM_X402_REFUND_IDLE_SECONDS` (x402's cooperative refund,
   claiming what is unclaimed in the same transaction).
5. Settles: moves what was claimed on to the receiver, one transaction per receiver and token.

Every claim is written `pending` (channel_claims, migration 0017) and committed before its
transaction is sent, then `confirmed` or `failed`. The protocol is x402's: its payload builders
and its facilitator scheme, in process with the relayer key as the receiver's authorizer, sign
and send each transaction (Channels' facilitator). What is Engram's is the bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
from x402.mechanisms.evm.batch_settlement.errors import (
    ERR_CLAIM_SIMULATION_FAILED,
    ERR_NOTHING_TO_SETTLE,
)
from x402.mechanisms.evm.batch_settlement.facilitator.utils import read_channel_state
from x402.mechanisms.evm.batch_settlement.server.channel_manager_common import (
    build_claim_payment_payload,
    build_payment_requirements,
    build_refund_payment_payload,
    build_settle_payment_payload,
)
from x402.mechanisms.evm.batch_settlement.server.storage import Channel
from x402.mechanisms.evm.batch_settlement.types import ChannelConfig, VoucherClaim
from x402.mechanisms.evm.constants import ERR_SETTLEMENT_PENDING
from x402.schemas import PaymentPayload, PaymentRequirements, SettleResponse

from app.infra import metrics
from app.payments import repository
from app.payments.channels import Channels

log = logging.getLogger("engram.payments.claimer")

# x402's facilitator sends with a fixed 500k gas limit. On the dev escrow a claimWithSignature of
# one row costs ~99k gas and each further row ~41k on a channel's first claim (measured by
# tests/payments/test_claimer.py: 8 rows, 384k); 8 leaves room for payers that sign through
# EIP-1271 (a call to their wallet per row).
CLAIMS_PER_TRANSACTION = 8
CHANNELS_PER_PAGE = 200  # channels read per query; a run goes through every page
ROWS_PER_RUN = 200  # pending and unsettled claims looked at per run (the rest: next run)


@dataclass(frozen=True)
class ClaimPolicy:
    """When a channel is claimed and refunded (app/config.py X402Settings says why these)."""

    min_unclaimed: int  # token atomic units
    after_seconds: float  # age of the oldest unclaimed voucher
    refund_idle_seconds: float  # time since the channel's last payment
    reconcile_after_seconds: float  # a pending claim untouched this long is not coming
    # a receiver's claimed funds are settled once its oldest unsettled claim is this old (or a
    # claim batch's worth waits); 0: every run
    settle_after_seconds: float = 0


@dataclass
class ClaimRun:
    """What one run did (logged, and read by the tests)."""

    refreshed: int = 0
    claimed: int = 0  # channels, confirmed
    claim_transactions: list[str] = field(default_factory=list)
    refunded: int = 0
    settled: list[str] = field(default_factory=list)
    reconciled: int = 0  # pending rows confirmed from the chain
    failed: int = 0
    in_flight: int = 0  # pending rows left pending (no answer yet)


@dataclass(frozen=True)
class Due:
    """A channel to claim (or refund) and the total its claim sets."""

    row: asyncpg.Record
    cumulative: int
    state: repository.ChainState
    reason: str  # withdrawal | amount | age | idle


def channel_config(row: asyncpg.Record) -> ChannelConfig:
    return ChannelConfig(
        payer=row["wallet"],
        payer_authorizer=row["payer_authorizer"],
        receiver=row["receiver"],
        receiver_authorizer=row["receiver_authorizer"],
        token=row["asset"],
        withdraw_delay=int(row["withdraw_delay"]),
        salt=row["salt"],
    )


def voucher_claim(row: asyncpg.Record, cumulative: int) -> VoucherClaim:
    """The channel's highest voucher, claimed up to `cumulative` (its charged total)."""
    return VoucherClaim(
        channel=channel_config(row),
        max_claimable_amount=str(int(row["signed_max_claimable"])),
        signature=row["signature"],
        total_claimed=str(cumulative),
    )


def claimable(row: asyncpg.Record, state: repository.ChainState) -> int:
    """The total a claim can set now: what was charged, within the escrow; 0 when the chain
    already has it."""
    cumulative = min(int(row["charged"]), state.balance)
    return cumulative if cumulative > state.total_claimed else 0


def seconds_since(moment: datetime | None, now: datetime) -> float:
    return (now - moment).total_seconds() if moment is not None else 0.0


def claim_reason(
    row: asyncpg.Record, state: repository.ChainState, policy: ClaimPolicy, now: datetime
) -> str | None:
    """Why the channel is claimed now, or None: a pending withdrawal first (its delay is the
    receiver's window), then the unclaimed amount, then the oldest unclaimed voucher's age."""
    unclaimed = claimable(row, state) - state.total_claimed
    if unclaimed <= 0:
        return None
    if state.withdraw_requested_at:
        return "withdrawal"
    if unclaimed >= policy.min_unclaimed:
        return "amount"
    if seconds_since(row["unclaimed_since"], now) >= policy.after_seconds:
        return "age"
    return None


def refund_due(
    row: asyncpg.Record, state: repository.ChainState, policy: ClaimPolicy, now: datetime
) -> bool:
    """Idle past the setting with escrow beyond what was charged: it goes back to the payer."""
    return (
        state.balance > int(row["charged"])
        and seconds_since(row["updated_at"], now) >= policy.refund_idle_seconds
    )


def batches(items: list[Due], size: int) -> Iterator[list[Due]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Claimer:
    def __init__(
        self, channels: Channels, network: str, policy: ClaimPolicy,
        page_size: int = CHANNELS_PER_PAGE,
    ) -> None:  # fmt: skip
        self.channels = channels
        self.network = network
        self.policy = policy
        self.page_size = page_size
        authorizer = channels.scheme.get_receiver_authorizer_signer()
        assert authorizer is not None  # Channels makes the relayer key the authorizer
        self.authorizer = authorizer.address.lower()

    async def run_once(self, pool: asyncpg.Pool) -> ClaimRun:
        done = ClaimRun()
        await self._reconcile(pool, done)
        after = ("", "")
        while True:  # every active channel, a page at a time
            rows = await self._page(pool, after)
            claims, refunds = await self._due(pool, rows, done)
            for batch in batches(claims, CLAIMS_PER_TRANSACTION):
                await self._claim(pool, batch, done)
            for due in refunds:
                await self._refund(pool, due, done)
            if len(rows) < self.page_size:
                break
            after = (rows[-1]["wallet"], rows[-1]["channel_id"])
        await self._settle(pool, done)
        if done.claimed or done.refunded or done.reconciled or done.failed or done.settled:
            log.info("payment channels claimed: %s", done)
        return done

    # ---- the chain ---------------------------------------------------------------------------

    async def _chain_state(self, channel_id: str) -> repository.ChainState:
        """The channel on chain, with the block the read began at (read first: the state is at
        least that new), so a read that began before a top-up was mined never undoes it."""
        signer = self.channels.signer
        block = await asyncio.to_thread(signer.block_number)
        state = await asyncio.to_thread(read_channel_state, signer, channel_id)
        return repository.ChainState(
            state.balance, state.total_claimed, state.withdraw_requested_at, state.refund_nonce,
            block,
        )  # fmt: skip

    async def _send(self, payload: PaymentPayload) -> SettleResponse:
        """Through x402's facilitator scheme, in process (it signs as the receiver authorizer
        what the payload leaves unsigned, simulates, sends and waits for the receipt)."""
        requirements: PaymentRequirements = payload.accepted
        return await asyncio.to_thread(self.channels._facilitator.settle, payload, requirements)

    def _requirements(self, row: asyncpg.Record) -> PaymentRequirements:
        return build_payment_requirements(row["receiver"], row["asset"], self.network)

    # ---- 1. pending claims -------------------------------------------------------------------

    async def _reconcile(self, pool: asyncpg.Pool, done: ClaimRun) -> None:
        async with pool.acquire() as conn:
            rows = await repository.pending_claims(
                conn, self.network, self.authorizer, ROWS_PER_RUN
            )
        for row in rows:
            try:
                state = await self._chain_state(row["channel_id"])
            except Exception:
                log.exception("could not read channel %s on chain; retried", row["channel_id"])
                continue
            if on_chain(row, state):
                await self._confirm(pool, row, row["tx_hash"], done, reconciled=True)
            elif row["idle_seconds"] >= self.policy.reconcile_after_seconds:
                await self._fail(pool, row, row["id"], "not on chain after no answer", done)
            else:
                done.in_flight += 1

    # ---- 2. which channels -------------------------------------------------------------------

    async def _page(self, pool: asyncpg.Pool, after: tuple[str, str]) -> list[asyncpg.Record]:
        async with pool.acquire() as conn:
            return await repository.channels_to_claim(
                conn, self.network, self.authorizer, after, self.page_size
            )

    async def _due(
        self, pool: asyncpg.Pool, rows: list[asyncpg.Record], done: ClaimRun
    ) -> tuple[list[Due], list[Due]]:
        """Each channel's state read on chain into its row, and what it is due."""
        claims: list[Due] = []
        refunds: list[Due] = []
        now = datetime.now(UTC)
        for listed in rows:
            try:
                state = await self._chain_state(listed["channel_id"])
            except Exception:
                log.exception("could not read channel %s on chain", listed["channel_id"])
                continue
            async with pool.acquire() as conn:
                await repository.refresh_channel(
                    conn, listed["wallet"], listed["channel_id"], state
                )
            done.refreshed += 1
            if refund_due(listed, state, self.policy, now):
                refunds.append(Due(listed, min(int(listed["charged"]), state.balance), state,
                                   "idle"))  # fmt: skip
            elif reason := claim_reason(listed, state, self.policy, now):
                claims.append(Due(listed, claimable(listed, state), state, reason))
        return claims, refunds

    # ---- 3. claims ---------------------------------------------------------------------------

    async def _claim(self, pool: asyncpg.Pool, batch: list[Due], done: ClaimRun) -> None:
        held = await self._hold(pool, batch)
        if not held:
            return
        payload = build_claim_payment_payload(
            [voucher_claim(due.row, due.cumulative) for due, _ in held],
            self._requirements(held[0][0].row),
            None,  # x402's facilitator signs the batch with the receiver authorizer's key
        )
        response = await self._send(payload)
        if response.success:
            for due, claim_id in held:
                await self._confirm(pool, _claim_row(due, claim_id), response.transaction, done)
            done.claim_transactions.append(response.transaction)
            return
        if len(held) > 1 and response.error_reason == ERR_CLAIM_SIMULATION_FAILED:
            # one bad row sinks the batch: each is tried alone, the bad one fails by itself
            for due, claim_id in held:
                await self._fail(pool, _claim_row(due, claim_id), claim_id,
                                 "batch refused; claimed alone", done, count=False)  # fmt: skip
            for due, _ in held:
                await self._claim(pool, [due], done)
            return
        for due, claim_id in held:
            await self._unanswered(pool, _claim_row(due, claim_id), response, done)

    async def _hold(self, pool: asyncpg.Pool, batch: list[Due]) -> list[tuple[Due, UUID]]:
        """Each claim written `pending` and committed before anything is sent."""
        held = []
        for due in batch:
            async with pool.acquire() as conn:
                claim_id = await repository.hold_claim(
                    conn,
                    repository.HeldClaim(
                        due.row["wallet"], due.row["channel_id"], "claim", due.cumulative
                    ),
                )
            if claim_id is not None:
                held.append((due, claim_id))
        return held

    async def _unanswered(
        self, pool: asyncpg.Pool, row: dict[str, Any], response: SettleResponse, done: ClaimRun
    ) -> None:
        """A claim whose send failed or got no answer: the chain says what happened."""
        try:
            state = await self._chain_state(row["channel_id"])
        except Exception:
            state = None
        if state is not None and on_chain(row, state):
            await self._confirm(pool, row, response.transaction or None, done)
        elif response.error_reason == ERR_SETTLEMENT_PENDING or state is None:
            if response.transaction:  # sent, no receipt yet: the next runs reconcile it
                async with pool.acquire() as conn:
                    await repository.note_claim_sent(
                        conn, row["wallet"], row["channel_id"], row["id"], response.transaction
                    )
            metrics.X402_CHANNEL_CLAIMS.labels(row["kind"], "pending").inc()
            done.in_flight += 1
        else:
            reason = f"{response.error_reason}: {response.error_message or ''}"
            await self._fail(pool, row, row["id"], reason, done)

    async def _confirm(
        self, pool: asyncpg.Pool, row: Any, tx_hash: str | None, done: ClaimRun,
        reconciled: bool = False,
    ) -> None:  # fmt: skip
        async with pool.acquire() as conn:
            confirmed = await repository.confirm_claim(
                conn, row["wallet"], row["channel_id"], row["id"], tx_hash
            )
        if not confirmed:
            return
        metrics.X402_CHANNEL_CLAIMS.labels(row["kind"], "confirmed").inc()
        if reconciled:
            done.reconciled += 1
        elif row["kind"] == "refund":
            done.refunded += 1
        else:
            done.claimed += 1

    async def _fail(
        self, pool: asyncpg.Pool, row: Any, claim_id: UUID, error: str, done: ClaimRun,
        count: bool = True,
    ) -> None:  # fmt: skip
        async with pool.acquire() as conn:
            failed = await repository.fail_claim(
                conn, row["wallet"], row["channel_id"], claim_id, error
            )
        if failed and row["kind"] == "refund":
            await self._restore(pool, row)
        if failed and count:
            log.warning("channel %s: %s failed: %s", row["channel_id"], row["kind"], error)
            metrics.X402_CHANNEL_CLAIMS.labels(row["kind"], "failed").inc()
            done.failed += 1

    async def _restore(self, pool: asyncpg.Pool, row: Any) -> None:
        """Before it was sent, a refund lowered the channel's balance to its charged total; when
        it failed, the chain's figure is read back at once (vouchers may spend it again)."""
        try:
            state = await self._chain_state(row["channel_id"])
        except Exception:
            log.exception("could not read channel %s on chain", row["channel_id"])
            return
        async with pool.acquire() as conn:
            await repository.refresh_channel(conn, row["wallet"], row["channel_id"], state)

    # ---- 4. refunds --------------------------------------------------------------------------

    async def _refund(self, pool: asyncpg.Pool, due: Due, done: ClaimRun) -> None:
        claim_id = await self._hold_refund(pool, due)
        if claim_id is None:
            return
        row = _claim_row(due, claim_id, kind="refund", refund_nonce=due.state.refund_nonce)
        target = Channel(
            channel_id=due.row["channel_id"],
            channel_config=channel_config(due.row),
            charged_cumulative_amount=str(due.cumulative),
            signed_max_claimable=str(int(due.row["signed_max_claimable"])),
            signature=due.row["signature"],
            balance=str(due.state.balance),
            total_claimed=str(due.state.total_claimed),
            withdraw_requested_at=due.state.withdraw_requested_at,
            refund_nonce=due.state.refund_nonce,
        )
        claims = (
            [voucher_claim(due.row, due.cumulative)]
            if due.cumulative > due.state.total_claimed
            else []
        )
        payload = build_refund_payment_payload(
            target,
            claims,
            self._requirements(due.row),
            str(due.state.balance - due.cumulative),
            str(due.state.refund_nonce),
            None,  # both signed by x402's facilitator with the receiver authorizer's key
            None,
        )
        response = await self._send(payload)
        if response.success:
            await self._confirm(pool, row, response.transaction, done)
        else:
            await self._unanswered(pool, row, response, done)

    async def _hold_refund(self, pool: asyncpg.Pool, due: Due) -> UUID | None:
        """In one transaction with the channel's row locked: still idle and charged as read, the
        refund is written `pending` and the channel takes no voucher beyond its charged total,
        which is all the refund leaves in escrow."""
        wallet, channel_id = due.row["wallet"], due.row["channel_id"]
        async with pool.acquire() as conn, conn.transaction():
            locked = await repository.lock_channel(conn, wallet, channel_id)
            if locked is None or locked["updated_at"] != due.row["updated_at"]:
                return None  # paid meanwhile: not idle
            claim_id = await repository.hold_claim(
                conn,
                repository.HeldClaim(
                    wallet, channel_id, "refund", due.cumulative,
                    due.state.balance - due.cumulative, due.state.refund_nonce,
                ),
            )  # fmt: skip
            if claim_id is None:
                return None
            if not await repository.lower_balance_for_refund(
                conn, wallet, channel_id, int(locked["charged"])
            ):
                raise RuntimeError("charged total moved under the channel's lock")
            return claim_id

    # ---- 5. settlement -----------------------------------------------------------------------

    async def _settle(self, pool: asyncpg.Pool, done: ClaimRun) -> None:
        """One settle per receiver and token sweeps every claim confirmed before it."""
        async with pool.acquire() as conn:
            rows = await repository.unsettled_claims(
                conn, self.network, self.authorizer, ROWS_PER_RUN
            )
        by_pair: dict[tuple[str, str], list[asyncpg.Record]] = {}
        for row in rows:
            by_pair.setdefault((row["receiver"], row["asset"]), []).append(row)
        for (receiver, asset), claims in by_pair.items():
            if not settle_due(claims, self.policy):
                continue
            requirements = build_payment_requirements(receiver, asset, self.network)
            payload = build_settle_payment_payload(requirements, receiver, asset)
            response = await self._send(payload)
            nothing_left = response.error_reason == ERR_NOTHING_TO_SETTLE  # swept elsewhere
            metrics.X402_CHANNEL_SETTLEMENTS.labels(
                "settled" if response.success else "none" if nothing_left else "failed"
            ).inc()
            if not (response.success or nothing_left):
                log.warning("settle for %s failed: %s", receiver, response.error_message)
                continue
            tx = response.transaction or None
            await self._mark_settled(pool, claims, tx)
            if tx:
                done.settled.append(tx)

    async def _mark_settled(
        self, pool: asyncpg.Pool, claims: list[asyncpg.Record], tx: str | None
    ) -> None:
        by_channel: dict[tuple[str, str], list[UUID]] = {}
        for row in claims:
            by_channel.setdefault((row["wallet"], row["channel_id"]), []).append(row["id"])
        async with pool.acquire() as conn:
            for (wallet, channel_id), ids in by_channel.items():
                await repository.mark_settled(conn, wallet, channel_id, ids, tx)


def on_chain(row: Any, state: repository.ChainState) -> bool:
    """Claims are cumulative: a claim is on chain once the channel's totalClaimed reaches its
    total; a refund, once the channel's refund nonce moved past the one it was signed for."""
    if row["kind"] == "refund":
        return state.refund_nonce > int(row["refund_nonce"])
    return state.total_claimed >= int(row["cumulative"])


def _claim_row(
    due: Due, claim_id: UUID, kind: str = "claim", refund_nonce: int | None = None
) -> dict[str, Any]:
    """A held claim, shaped as a channel_claims row."""
    return {
        "wallet": due.row["wallet"],
        "channel_id": due.row["channel_id"],
        "id": claim_id,
        "kind": kind,
        "cumulative": due.cumulative,
        "refund_nonce": refund_nonce,
        "tx_hash": None,
    }


def settle_due(claims: list[asyncpg.Record], policy: ClaimPolicy) -> bool:
    """A receiver's confirmed claims are swept to its payTo once the oldest has waited
    `settle_after_seconds`, or a claim batch's worth is waiting: a settle per claim would be a
    transaction per claim, and claimed funds are the receiver's in the escrow meanwhile."""
    oldest = max(float(c["idle_seconds"]) for c in claims)
    return oldest >= policy.settle_after_seconds or len(claims) >= CLAIMS_PER_TRANSACTION


def claim_policy(x402: Any, decimals: int) -> ClaimPolicy:
    """The operator's settings (X402Settings), the amount in the token's atomic units."""
    return ClaimPolicy(
        min_unclaimed=int(x402.claim_min_usd * (10**decimals)),
        after_seconds=x402.claim_after_seconds,
        refund_idle_seconds=x402.refund_idle_seconds,
        reconcile_after_seconds=x402.reconcile_after_seconds,
        settle_after_seconds=x402.settle_after_seconds,
    )
