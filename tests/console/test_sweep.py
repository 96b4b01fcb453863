"""Expired console sessions and sign-in links are swept away; live ones stay."""

from __future__ import annotations

import asyncpg
from eth_account import Account

from app.console.service import ConsoleSessions, token_hash


async def test_the_sweep_takes_expired_sessions_and_links_only(database_url: str) -> None:
    sessions = ConsoleSessions(ttl_seconds=3600)
    wallet = Account.create().address.lower()
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            live = await sessions.start(conn, wallet)
            dead = await sessions.start(conn, wallet)
            live_link = await sessions.issue_link(conn, wallet)
            dead_link = await sessions.issue_link(conn, wallet)
            await conn.execute(
                "UPDATE console_sessions SET expires_at = now() - interval '1 s'"
                " WHERE token_hash = $1", token_hash(dead.token),
            )  # fmt: skip
            await conn.execute(
                "UPDATE console_links SET expires_at = now() - interval '1 s'"
                " WHERE token_hash = $1", token_hash(dead_link),
            )  # fmt: skip
        assert await sessions.sweep(pool) >= 2
        async with pool.acquire() as conn:
            left = await conn.fetchval(
                "SELECT count(*) FROM console_sessions WHERE token_hash = ANY($1)",
                [token_hash(live.token), token_hash(dead.token)],
            )
            assert left == 1 and await sessions.find(conn, live.token) is not None
            assert await sessions.redeem_link(conn, dead_link) is None
            assert await sessions.redeem_link(conn, live_link) == wallet
    finally:
        await pool.close()
