"""SQL for the payments ledger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg


@dataclass(frozen=True)
class SettledPayment:
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
    tx_hash: str | None
    settle_response: dict[str, Any]
    response_status: int | None
    response_body: bytes | None


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


async def record_settled(conn: asyncpg.Connection, p: SettledPayment) -> None:
    await conn.execute(
        """INSERT INTO payments (payer, wallet, nonce, network, asset, amount, pay_to, endpoint,
               request_id, request_fingerprint, status, tx_hash, settle_response,
               response_status, response_body)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'settled', $11, $12, $13, $14)""",
        p.payer, p.wallet, p.nonce, p.network, p.asset.lower(), p.amount, p.pay_to.lower(),
        p.endpoint, p.request_id, p.request_fingerprint, p.tx_hash, p.settle_response,
        p.response_status, p.response_body,
    )  # fmt: skip


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
