"""Expired sign-in nonces are swept by a timer (every minute, app/asgi.py), off the request path (on Citus the sweep is the
one statement that reads every shard of auth_nonces); issuing a nonce no longer sweeps."""

from __future__ import annotations

import asyncio
import secrets

import asyncpg

from app.auth.repository import issue_nonce
from app.auth.siwx import NONCES_PER_SWEEP, SiwxVerifier
from app.infra.periodic import every


async def _expired(conn: asyncpg.Connection, n: int) -> list[str]:
    nonces = [f"test-{secrets.token_hex(8)}" for _ in range(n)]
    await conn.executemany(
        "INSERT INTO auth_nonces (nonce, expires_at) VALUES ($1, now() - interval '1 minute')",
        [(nonce,) for nonce in nonces],
    )
    return nonces


async def _left(conn: asyncpg.Connection, nonces: list[str]) -> int:
    return int(
        await conn.fetchval("SELECT count(*) FROM auth_nonces WHERE nonce = ANY($1)", nonces)
    )


async def test_a_sweep_clears_every_expired_nonce_in_batches_and_keeps_live_ones(
    database_url: str,
) -> None:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    assert pool is not None
    try:
        async with pool.acquire() as conn:
            expired = await _expired(conn, NONCES_PER_SWEEP + 5)  # more than one batch
            live = f"test-{secrets.token_hex(8)}"
            await issue_nonce(conn, live, 300)
            assert await _left(conn, expired) == len(expired)  # issuing swept nothing
        swept = await SiwxVerifier("eip155:8453", 300).sweep_expired(pool)
        assert swept >= len(expired)
        async with pool.acquire() as conn:
            assert await _left(conn, expired) == 0
            assert await _left(conn, [live]) == 1
    finally:
        await pool.close()


async def test_the_timer_runs_its_job_again_after_a_failure_until_cancelled() -> None:
    runs: list[int] = []

    async def job() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("the database restarted")

    timer = asyncio.create_task(every(0.01, job, "test", first_after=0.01))
    for _ in range(200):
        if len(runs) >= 3:
            break
        await asyncio.sleep(0.01)
    timer.cancel()
    await asyncio.gather(timer, return_exceptions=True)
    assert timer.cancelled() and len(runs) >= 3
