"""What a process remembers of each wallet's free calls (app/free_tier/service.py RecentCounts):
recent positive counts spare a read, zero is always read again, and a count gone stale because
another process used the calls never makes a call free."""

from __future__ import annotations

import asyncpg
from eth_account import Account
from litestar.testing import AsyncTestClient

from app.free_tier.service import FreeTier, RecentCounts
from tests.support.api import auth
from tests.support.db import count_memories


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _set_used(database_url: str, wallet: str, used: int) -> None:
    """What another process (or an operator) does to the count meanwhile."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO wallets (address, free_calls_used) VALUES ($1, $2)"
            " ON CONFLICT (address) DO UPDATE SET free_calls_used = $2",
            wallet.lower(),
            used,
        )
    finally:
        await conn.close()


def test_recent_counts_keep_positive_counts_for_a_while_and_never_zero() -> None:
    clock = Clock()
    recent = RecentCounts(max_age=1.0, max_wallets=2, clock=clock)
    assert recent.calls_left("0xa") is None
    recent.learnt("0xa", 7)
    assert recent.calls_left("0xa") == 7
    clock.now += 1.01
    assert recent.calls_left("0xa") is None  # too old: read again
    recent.learnt("0xa", 0)
    assert recent.calls_left("0xa") is None  # none left is never taken on trust
    recent.learnt("0xb", 3)
    recent.learnt("0xc", 4)
    recent.learnt("0xd", 5)  # bounded: the least recently learnt goes
    assert recent.calls_left("0xb") is None and recent.calls_left("0xd") == 5


async def test_remaining_reads_once_within_the_memo_and_consume_teaches_it(
    database_url: str,
) -> None:
    clock = Clock()
    tier = FreeTier(10, RecentCounts(clock=clock))
    wallet = Account.create().address.lower()
    conn = await asyncpg.connect(database_url)
    try:
        assert await tier.remaining(conn, wallet) == 10
        await _set_used(database_url, wallet, 4)
        assert await tier.remaining(conn, wallet) == 10  # not read again within the second
        clock.now += 2
        assert await tier.remaining(conn, wallet) == 6
        assert await tier.consume(conn, wallet) == 5
        await _set_used(database_url, wallet, 9)
        assert await tier.remaining(conn, wallet) == 5  # as consume left it, still recent
        assert await tier.consume(conn, wallet) == 0  # the database decides: it had 1 left
        assert await tier.consume(conn, wallet) is None
    finally:
        await conn.close()


async def test_a_stale_count_never_makes_a_call_free(
    client: AsyncTestClient, database_url: str
) -> None:
    wallet = Account.create()
    h = auth(wallet)
    r = await client.post("/v1/store", json={"content": "first free call"}, headers=h)
    assert r.status_code == 201 and r.headers["x-free-tier-remaining"] == "99"
    await _set_used(database_url, wallet.address, 100)  # another instance used the rest
    r = await client.post("/v1/store", json={"content": "one call too many"}, headers=h)
    assert r.status_code == 402  # the process still believed in 99: consume refused
    assert await count_memories(database_url, wallet.address) == 1  # rolled back
    r = await client.post("/v1/store", json={"content": "and again"}, headers=h)
    assert r.status_code == 402
    await _set_used(database_url, wallet.address, 50)  # an operator gives calls back
    r = await client.post("/v1/store", json={"content": "free again"}, headers=h)
    assert r.status_code == 201 and r.headers["x-free-tier-remaining"] == "49"
    assert await count_memories(database_url, wallet.address) == 2
