"""All SQL of the free tier: the calls a wallet has used, counted in its `wallets` row."""

from __future__ import annotations

import asyncpg


async def free_calls_used(conn: asyncpg.Connection, wallet: str) -> int:
    used = await conn.fetchval("SELECT free_calls_used FROM wallets WHERE address = $1", wallet)
    return int(used or 0)


async def consume_free_call(conn: asyncpg.Connection, wallet: str, limit: int) -> int | None:
    """Count one free call atomically; None when the wallet has none left.

    The conditional upsert takes the wallet row lock, so concurrent requests queue on it and the
    count can never pass the limit (nor go below zero remaining).
    """
    if limit <= 0:
        return None
    used = await conn.fetchval(
        """
        INSERT INTO wallets (address, free_calls_used, last_seen_at) VALUES ($1, 1, now())
        ON CONFLICT (address) DO UPDATE
            SET free_calls_used = wallets.free_calls_used + 1,
                last_seen_at = excluded.last_seen_at
            WHERE wallets.free_calls_used < $2
        RETURNING free_calls_used
        """,
        wallet,
        limit,
    )
    return None if used is None else int(used)
