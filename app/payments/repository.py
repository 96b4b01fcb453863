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
               request_id, request_fingerprint, status, valid_before, payment_identifier)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12)
           ON CONFLICT DO NOTHING
           RETURNING id""",
        p.payer, p.wallet, p.nonce, p.network, p.asset.lower(), p.amount, p.pay_to.lower(),
        p.endpoint, p.request_id, p.request_fingerprint, p.valid_before, p.payment_identifier,
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
        """SELECT id, wallet, payer, nonce, asset, tx_hash, valid_before FROM payments
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
               refund_nonce, deposit_tx)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
           ON CONFLICT (wallet, channel_id) DO UPDATE SET
               balance = excluded.balance, total_claimed = excluded.total_claimed,
               charged = excluded.charged, signed_max_claimable = excluded.signed_max_claimable,
               signature = excluded.signature,
               withdraw_requested_at = excluded.withdraw_requested_at,
               refund_nonce = excluded.refund_nonce, deposit_tx = excluded.deposit_tx,
               updated_at = excluded.updated_at
           WHERE payment_channels.wallet = $1""",
        c.wallet, c.channel_id, c.network, c.asset.lower(), c.receiver.lower(),
        c.receiver_authorizer.lower(), c.payer_authorizer.lower(), c.withdraw_delay, c.salt,
        c.balance, c.total_claimed, c.charged, c.signed_max_claimable, c.signature,
        c.withdraw_requested_at, c.refund_nonce, c.deposit_tx,
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
