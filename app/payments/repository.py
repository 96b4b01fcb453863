"""SQL for the payments ledger."""

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
