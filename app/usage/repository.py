"""SQL for usage: metered calls counted per wallet, UTC day and endpoint; USDC per day comes from
the payments ledger."""

from __future__ import annotations

from datetime import date

import asyncpg


async def count_call(conn: asyncpg.Connection, wallet: str, endpoint: str, paid: bool) -> None:
    """One metered call, in the request's transaction (it commits with the call's work)."""
    await conn.execute(
        """INSERT INTO usage_daily (wallet, day, endpoint, free_calls, paid_calls)
           VALUES ($1, (now() AT TIME ZONE 'UTC')::date, $2, $3, $4)
           ON CONFLICT (wallet, day, endpoint) DO UPDATE
               SET free_calls = usage_daily.free_calls + excluded.free_calls,
                   paid_calls = usage_daily.paid_calls + excluded.paid_calls""",
        wallet, endpoint, int(not paid), int(paid),
    )  # fmt: skip


async def calls_by_day(
    conn: asyncpg.Connection, wallet: str, first: date, last: date
) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT day, endpoint, free_calls, paid_calls FROM usage_daily
           WHERE wallet = $1 AND day BETWEEN $2 AND $3 ORDER BY day, endpoint""",
        wallet, first, last,
    )  # fmt: skip
    return rows


async def paid_by_day(
    conn: asyncpg.Connection, wallet: str, first: date, last: date
) -> list[asyncpg.Record]:
    """Settled payments' atomic amounts per UTC day (the ledger's own record)."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT (created_at AT TIME ZONE 'UTC')::date AS day, sum(amount) AS amount
           FROM payments
           WHERE wallet = $1 AND status = 'settled'
             AND created_at >= $2::date AND created_at < $3::date + 1
           GROUP BY 1 ORDER BY 1""",
        wallet, first, last,
    )  # fmt: skip
    return rows
