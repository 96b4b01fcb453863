"""SQL for the payments ledger, and for payment channels (x402 batch-settlement): the channel
row, locked per voucher, and the vouchers accepted on it. Every channel statement names the
payer's wallet first (migration 0016): one shard on Citus."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg


@dataclass(frozen=True)
class PendingPayment:
    """What is known of a payment before it settles."""

    payer: str
    wallet: str
    nonce: str
    network: str
    asset: str
    amount: int
    pay_to: str
    endpoint: str
    request_id: str
    request_fingerprint: bytes
    valid_before: datetime
    payment_identifier: str | None
    scheme: str = "exact"  # or "upto": which kind of nonce the reconciler asks the chain about


async def find(
    conn: asyncpg.Connection, wallet: str, network: str, asset: str, payer: str, nonce: str
) -> asyncpg.Record | None:
    """The ledger row of a proof spent for `wallet` (rows are keyed, and on Citus distributed,
    by the wallet they served)."""
    row: asyncpg.Record | None = await conn.fetchrow(
        """SELECT * FROM payments
           WHERE wallet = $1 AND network = $2 AND asset = $3 AND payer = $4 AND nonce = $5""",
        wallet, network, asset.lower(), payer, nonce,
    )  # fmt: skip
    return row


async def find_by_identifier(
    conn: asyncpg.Connection, wallet: str, payment_identifier: str
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT * FROM payments WHERE wallet = $1 AND payment_identifier = $2",
        wallet, payment_identifier,
    )  # fmt: skip
    return row


async def hold_pending(conn: asyncpg.Connection, p: PendingPayment) -> UUID | None:
    """Record a payment about to settle; None when the proof, or its payment identifier,
    already has a row for the wallet (another request holds it, or it is settled or
    redeemable)."""
    payment_id: UUID | None = await conn.fetchval(
        """INSERT INTO payments (payer, wallet, nonce, network, asset, amount, pay_to, endpoint,
               request_id, request_fingerprint, status, valid_before, payment_identifier, scheme)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $13)
           ON CONFLICT DO NOTHING
           RETURNING id""",
        p.payer, p.wallet, p.nonce, p.network, p.asset.lower(), p.amount, p.pay_to.lower(),
        p.endpoint, p.request_id, p.request_fingerprint, p.valid_before, p.payment_identifier,
        p.scheme,
    )  # fmt: skip
    return payment_id


async def note_settled_on_chain(
    conn: asyncpg.Connection, wallet: str, payment_id: UUID, tx_hash: str | None,
    settle_response: dict[str, Any],
) -> None:  # fmt: skip
    """The facilitator settled it: the money moved, whatever happens to the work."""
    await conn.execute(
        """UPDATE payments SET tx_hash = $3, settle_response = $4, updated_at = now()
           WHERE wallet = $1 AND id = $2""",
        wallet, payment_id, tx_hash, settle_response,
    )  # fmt: skip


async def drop_unsettled(conn: asyncpg.Connection, wallet: str, payment_id: UUID) -> None:
    """Forget a pending payment that did not settle (nothing moved: the proof may pay again)."""
    await conn.execute(
        """DELETE FROM payments
           WHERE wallet = $1 AND id = $2 AND status = 'pending' AND tx_hash IS NULL""",
        wallet, payment_id,
    )  # fmt: skip


async def complete(
    conn: asyncpg.Connection, wallet: str, payment_id: UUID, response_status: int | None,
    response_body: bytes | None,
) -> None:  # fmt: skip
    """Settled and served: runs in the request's transaction, so it commits with the work."""
    await conn.execute(
        """UPDATE payments SET status = 'settled', response_status = $3, response_body = $4,
               updated_at = now()
           WHERE wallet = $1 AND id = $2""",
        wallet, payment_id, response_status, response_body,
    )  # fmt: skip


async def mark_redeemable(
    conn: asyncpg.Connection, wallet: str, payment_id: UUID, tx_hash: str | None
) -> None:
    """Settled on chain, its work never committed: the same proof and request may redeem it."""
    await conn.execute(
        """UPDATE payments SET status = 'redeemable', tx_hash = coalesce(tx_hash, $3),
               updated_at = now()
           WHERE wallet = $1 AND id = $2 AND status = 'pending'""",
        wallet, payment_id, tx_hash,
    )  # fmt: skip


async def pending_before(
    conn: asyncpg.Connection, seconds: float, limit: int
) -> list[asyncpg.Record]:
    """Pending payments untouched for `seconds`: the reconciler's work, across all wallets."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT id, wallet, payer, nonce, network, asset, tx_hash, valid_before, scheme
           FROM payments
           WHERE status = 'pending' AND updated_at < now() - make_interval(secs => $1)
           ORDER BY created_at LIMIT $2""",
        seconds, limit,
    )  # fmt: skip
    return rows


async def list_for_wallet(
    conn: asyncpg.Connection, wallet: str, limit: int, offset: int
) -> tuple[list[asyncpg.Record], int]:
    total = await conn.fetchval("SELECT count(*) FROM payments WHERE wallet = $1", wallet)
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT id, payer, wallet, nonce, network, asset, amount, pay_to, endpoint, request_id,
                  status, tx_hash, created_at
           FROM payments WHERE wallet = $1
           ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3""",
        wallet, limit, offset,
    )  # fmt: skip
    return rows, int(total)


async def try_lock(conn: asyncpg.Connection, key: str) -> bool:
    """A transaction-scoped advisory lock: held until the request's commit or rollback."""
    return bool(
        await conn.fetchval("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", key)
    )


# ---- payment channels (batch-settlement) ----------------------------------------------------
@dataclass(frozen=True)
class OpenedChannel:
    """A channel as its deposit settled it on chain."""

    wallet: str  # the payer, lower-cased
    channel_id: str  # 0x + 64 hex, lower-cased
    network: str
    asset: str
    receiver: str
    receiver_authorizer: str
    payer_authorizer: str
    withdraw_delay: int
    salt: str
    balance: int
    total_claimed: int
    charged: int
    signed_max_claimable: int
    signature: str
    withdraw_requested_at: int
    refund_nonce: int
    deposit_tx: str | None
    state_block: int = 0  # the block the deposit was mined in: its state is that new


@dataclass(frozen=True)
class AcceptedVoucher:
    """A voucher accepted for one call, written with the call's work."""

    wallet: str
    channel_id: str
    cumulative: int  # what the voucher signs for
    charged_after: int  # the channel's charged total with this call
    amount: int
    signature: str
    endpoint: str
    request_id: str
    request_fingerprint: bytes
    payment_identifier: str | None
    response_status: int | None  # the answer it paid for, kept for an idempotent replay
    response_body: bytes | None


async def lock_channel_key(conn: asyncpg.Connection, wallet: str, channel_id: str) -> None:
    """Deposits on one channel take turns, even before its row exists (a transaction-scoped
    advisory lock, released by the request's commit or rollback)."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"channel:{wallet}:{channel_id}"
    )


async def lock_channel(
    conn: asyncpg.Connection, wallet: str, channel_id: str
) -> asyncpg.Record | None:
    """The channel row, locked until the request's transaction ends: vouchers on one channel, from
    any instance, take turns here."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT * FROM payment_channels WHERE wallet = $1 AND channel_id = $2 FOR UPDATE",
        wallet, channel_id,
    )  # fmt: skip
    return row


async def open_or_top_up(conn: asyncpg.Connection, c: OpenedChannel) -> None:
    """Record a deposit's channel (a new one, or a top-up of a known one): its on-chain state as
    the facilitator reported it, and the deposit's own voucher as the charged total."""
    await conn.execute(
        """INSERT INTO payment_channels (wallet, channel_id, network, asset, receiver,
               receiver_authorizer, payer_authorizer, withdraw_delay, salt, balance,
               total_claimed, charged, signed_max_claimable, signature, withdraw_requested_at,
               refund_nonce, deposit_tx, state_block)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                   $18)
           ON CONFLICT (wallet, channel_id) DO UPDATE SET
               balance = excluded.balance, total_claimed = excluded.total_claimed,
               charged = excluded.charged, signed_max_claimable = excluded.signed_max_claimable,
               signature = excluded.signature,
               withdraw_requested_at = excluded.withdraw_requested_at,
               refund_nonce = excluded.refund_nonce, deposit_tx = excluded.deposit_tx,
               state_block = greatest(payment_channels.state_block, excluded.state_block),
               updated_at = excluded.updated_at
           WHERE payment_channels.wallet = $1""",
        c.wallet, c.channel_id, c.network, c.asset.lower(), c.receiver.lower(),
        c.receiver_authorizer.lower(), c.payer_authorizer.lower(), c.withdraw_delay, c.salt,
        c.balance, c.total_claimed, c.charged, c.signed_max_claimable, c.signature,
        c.withdraw_requested_at, c.refund_nonce, c.deposit_tx, c.state_block,
    )  # fmt: skip


async def find_voucher(
    conn: asyncpg.Connection, wallet: str, channel_id: str, cumulative: int
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        """SELECT * FROM channel_vouchers
           WHERE wallet = $1 AND channel_id = $2 AND cumulative = $3""",
        wallet, channel_id, cumulative,
    )  # fmt: skip
    return row


async def find_voucher_by_identifier(
    conn: asyncpg.Connection, wallet: str, payment_identifier: str
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT * FROM channel_vouchers WHERE wallet = $1 AND payment_identifier = $2",
        wallet, payment_identifier,
    )  # fmt: skip
    return row


async def charge_voucher(conn: asyncpg.Connection, v: AcceptedVoucher) -> None:
    """The voucher and the channel's new charged total, in the request's transaction (the row
    is locked by `lock_channel`): they commit with the work, and a rollback drops both."""
    await conn.execute(
        """INSERT INTO channel_vouchers (wallet, channel_id, cumulative, charged_after, amount,
               signature, endpoint, request_id, request_fingerprint, payment_identifier,
               response_status, response_body)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)""",
        v.wallet, v.channel_id, v.cumulative, v.charged_after, v.amount, v.signature, v.endpoint,
        v.request_id, v.request_fingerprint, v.payment_identifier, v.response_status,
        v.response_body,
    )  # fmt: skip
    await conn.execute(
        """UPDATE payment_channels
           SET charged = $3, updated_at = now(),
               signature = CASE WHEN $4 > signed_max_claimable THEN $5 ELSE signature END,
               signed_max_claimable = greatest(signed_max_claimable, $4)
           WHERE wallet = $1 AND channel_id = $2""",
        v.wallet, v.channel_id, v.charged_after, v.cumulative, v.signature,
    )  # fmt: skip


# ---- the claimer (app/payments/claimer.py): claims, settlements and refunds ------------------
# Its scans (channels to look at, pending and unsettled claims) read every wallet's rows, on a
# timer off the request path, as the reconciler's `pending_before`; every write names one wallet.


async def channels_to_claim(
    conn: asyncpg.Connection, network: str, receiver_authorizer: str, after: tuple[str, str],
    limit: int,
) -> list[asyncpg.Record]:  # fmt: skip
    """Channels this server's authorizer can claim on, with escrow left or charges unclaimed and
    no claim in flight, with the time of their oldest unclaimed voucher (`unclaimed_since`) and
    of their last payment (`updated_at`): a page of them, in key order from past `after`
    (wallet, channel id), so that a run goes through all."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT c.*,
                  (SELECT v.created_at FROM channel_vouchers v
                   WHERE v.wallet = c.wallet AND v.channel_id = c.channel_id
                     AND v.cumulative > c.total_claimed AND v.charged_after > c.total_claimed
                   ORDER BY v.cumulative LIMIT 1) AS unclaimed_since
           FROM payment_channels c
           WHERE c.network = $1 AND c.receiver_authorizer = $2
             AND (c.balance > c.total_claimed OR c.charged > c.total_claimed)
             AND NOT EXISTS (SELECT 1 FROM channel_claims k
                             WHERE k.wallet = c.wallet AND k.channel_id = c.channel_id
                               AND k.status = 'pending')
             AND (c.wallet, c.channel_id) > ($3, $4)
           ORDER BY c.wallet, c.channel_id LIMIT $5""",
        network, receiver_authorizer.lower(), after[0], after[1], limit,
    )  # fmt: skip
    return rows


async def pending_claims(
    conn: asyncpg.Connection, network: str, receiver_authorizer: str, limit: int
) -> list[asyncpg.Record]:
    """Claims and refunds still `pending` (in flight here or elsewhere, or left by a process that
    died), with their channel, and how long since they were last touched (`idle_seconds`)."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT k.*, c.network, c.asset, c.receiver, c.receiver_authorizer,
                  extract(epoch FROM now() - k.updated_at)::float8 AS idle_seconds
           FROM channel_claims k
           JOIN payment_channels c ON c.wallet = k.wallet AND c.channel_id = k.channel_id
           WHERE k.status = 'pending' AND c.network = $1 AND c.receiver_authorizer = $2
           ORDER BY k.created_at LIMIT $3""",
        network, receiver_authorizer.lower(), limit,
    )  # fmt: skip
    return rows


async def unsettled_claims(
    conn: asyncpg.Connection, network: str, receiver_authorizer: str, limit: int
) -> list[asyncpg.Record]:
    """Confirmed claims whose funds were not yet moved on to the receiver, with the receiver and
    token a settlement sweeps them by."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT k.wallet, k.channel_id, k.id, c.receiver, c.asset,
                  extract(epoch FROM now() - k.updated_at) AS idle_seconds
           FROM channel_claims k
           JOIN payment_channels c ON c.wallet = k.wallet AND c.channel_id = k.channel_id
           WHERE k.status = 'confirmed' AND k.settled_at IS NULL AND k.cumulative > 0
             AND c.network = $1 AND c.receiver_authorizer = $2
           ORDER BY k.updated_at LIMIT $3""",
        network, receiver_authorizer.lower(), limit,
    )  # fmt: skip
    return rows


@dataclass(frozen=True)
class ChainState:
    """A channel as the escrow contract holds it."""

    balance: int
    total_claimed: int
    withdraw_requested_at: int
    refund_nonce: int
    block: int = 0  # the chain's block when the read began: the state is at least this new


async def refresh_channel(
    conn: asyncpg.Connection, wallet: str, channel_id: str, state: ChainState
) -> asyncpg.Record | None:
    """The channel's on-chain state, as read now (a withdrawal started, a refund, a claim from
    elsewhere). The balance never reads below what was charged (a channel whose escrow fell
    below takes no voucher above it, which is what the lower figure would do); `updated_at`,
    the time of the channel's last payment, is left alone. A read older than the row's state
    (begun before a top-up the row already records was mined) changes nothing: None."""
    row: asyncpg.Record | None = await conn.fetchrow(
        """UPDATE payment_channels
           SET balance = greatest($3, charged), total_claimed = greatest(total_claimed, $4),
               withdraw_requested_at = $5, refund_nonce = greatest(refund_nonce, $6),
               state_block = $7
           WHERE wallet = $1 AND channel_id = $2 AND state_block <= $7
           RETURNING *""",
        wallet, channel_id, state.balance, state.total_claimed, state.withdraw_requested_at,
        state.refund_nonce, state.block,
    )  # fmt: skip
    return row


@dataclass(frozen=True)
class HeldClaim:
    """A claim (or refund) about to be sent: `cumulative` is the channel total it sets."""

    wallet: str
    channel_id: str
    kind: str  # claim | refund
    cumulative: int
    refund_amount: int = 0
    refund_nonce: int | None = None


async def hold_claim(conn: asyncpg.Connection, c: HeldClaim) -> UUID | None:
    """Record a claim as `pending` before it is sent; None when the channel already has one in
    flight (another instance's, or one not yet reconciled)."""
    claim_id: UUID | None = await conn.fetchval(
        """INSERT INTO channel_claims (wallet, channel_id, kind, cumulative, refund_amount,
               refund_nonce, status)
           VALUES ($1, $2, $3, $4, $5, $6, 'pending')
           ON CONFLICT DO NOTHING
           RETURNING id""",
        c.wallet, c.channel_id, c.kind, c.cumulative, c.refund_amount, c.refund_nonce,
    )  # fmt: skip
    return claim_id


async def lower_balance_for_refund(
    conn: asyncpg.Connection, wallet: str, channel_id: str, charged: int
) -> bool:
    """Before a refund is sent, the channel takes no voucher beyond what it has charged (what
    the refund leaves in escrow); False when a voucher raised the charged total meanwhile. A
    refund that fails gets the balance back from the chain on the claimer's next look."""
    done = await conn.fetchval(
        """UPDATE payment_channels SET balance = charged
           WHERE wallet = $1 AND channel_id = $2 AND charged = $3
           RETURNING 1""",
        wallet, channel_id, charged,
    )  # fmt: skip
    return done is not None


async def note_claim_sent(
    conn: asyncpg.Connection, wallet: str, channel_id: str, claim_id: UUID, tx_hash: str
) -> None:
    """A claim's transaction went out with no answer yet: kept pending, with its hash."""
    await conn.execute(
        """UPDATE channel_claims SET tx_hash = $4, updated_at = now()
           WHERE wallet = $1 AND channel_id = $2 AND id = $3 AND status = 'pending'""",
        wallet, channel_id, claim_id, tx_hash,
    )  # fmt: skip


async def confirm_claim(
    conn: asyncpg.Connection, wallet: str, channel_id: str, claim_id: UUID, tx_hash: str | None
) -> bool:
    """On chain: the claim is confirmed and the channel's claimed total follows (False: it was
    no longer pending, someone else resolved it)."""
    cumulative = await conn.fetchval(
        """UPDATE channel_claims
           SET status = 'confirmed', tx_hash = coalesce($4, tx_hash), error = NULL,
               updated_at = now()
           WHERE wallet = $1 AND channel_id = $2 AND id = $3 AND status = 'pending'
           RETURNING cumulative""",
        wallet, channel_id, claim_id, tx_hash,
    )  # fmt: skip
    if cumulative is None:
        return False
    await conn.execute(
        """UPDATE payment_channels SET total_claimed = greatest(total_claimed, $3)
           WHERE wallet = $1 AND channel_id = $2""",
        wallet, channel_id, cumulative,
    )  # fmt: skip
    return True


async def fail_claim(
    conn: asyncpg.Connection, wallet: str, channel_id: str, claim_id: UUID, error: str
) -> bool:
    """Not on chain, and not coming: the channel may be claimed again."""
    done = await conn.fetchval(
        """UPDATE channel_claims SET status = 'failed', error = $4, updated_at = now()
           WHERE wallet = $1 AND channel_id = $2 AND id = $3 AND status = 'pending'
           RETURNING 1""",
        wallet, channel_id, claim_id, error[:500],
    )  # fmt: skip
    return done is not None


async def mark_settled(
    conn: asyncpg.Connection, wallet: str, channel_id: str, claim_ids: list[UUID],
    settle_tx: str | None,
) -> None:  # fmt: skip
    """A settlement swept these confirmed claims' funds to the receiver (`settle_tx` None: one
    sent by someone else had)."""
    await conn.execute(
        """UPDATE channel_claims SET settled_at = now(), settle_tx = $4, updated_at = now()
           WHERE wallet = $1 AND channel_id = $2 AND id = ANY($3::uuid[])
             AND status = 'confirmed' AND settled_at IS NULL""",
        wallet, channel_id, claim_ids, settle_tx,
    )  # fmt: skip


# ---- what GET /v1/payments shows of a wallet's channels --------------------------------------


async def channels_of_wallet(
    conn: asyncpg.Connection, wallet: str, limit: int
) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT channel_id, network, asset, receiver, balance, charged, total_claimed,
                  withdraw_requested_at, refund_nonce, deposit_tx, created_at, updated_at
           FROM payment_channels WHERE wallet = $1
           ORDER BY updated_at DESC, channel_id LIMIT $2""",
        wallet, limit,
    )  # fmt: skip
    return rows


async def recent_vouchers(
    conn: asyncpg.Connection, wallet: str, limit: int
) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT channel_id, cumulative, charged_after, amount, endpoint, request_id, created_at
           FROM channel_vouchers WHERE wallet = $1
           ORDER BY created_at DESC, cumulative DESC LIMIT $2""",
        wallet, limit,
    )  # fmt: skip
    return rows


async def recent_claims(conn: asyncpg.Connection, wallet: str, limit: int) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT id, channel_id, kind, cumulative, refund_amount, status, tx_hash, settle_tx,
                  created_at, updated_at
           FROM channel_claims WHERE wallet = $1
           ORDER BY created_at DESC, id LIMIT $2""",
        wallet, limit,
    )  # fmt: skip
    return rows
