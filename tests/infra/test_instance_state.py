"""Shared state behaves the same in-process and on a real Redis (127.0.0.1:6379 by default)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.infra.instance_state import (
    BREAKER_FAILURES,
    InProcessStore,
    RedisStore,
    SharedStore,
    StoreUnavailable,
)
from app.payments.service import SharedStoreGuard
from tests.support.outage import PrivateRedis
from tests.support.shared_store import REDIS_URL


@pytest.fixture(params=["in-process", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SharedStore]:
    s: SharedStore = InProcessStore() if request.param == "in-process" else RedisStore(REDIS_URL)
    yield s
    await s.close()


async def test_claim_is_exclusive_until_released_or_expired(store: SharedStore) -> None:
    key = f"nonce:{uuid.uuid4()}"
    results = await asyncio.gather(*(store.claim(key, 5) for _ in range(50)))
    assert results.count(True) == 1
    await store.release(key)
    assert await store.claim(key, 0.2)
    assert not await store.claim(key, 0.2)
    await asyncio.sleep(0.35)
    assert await store.claim(key, 0.2)


async def test_hit_counts_within_a_window(store: SharedStore) -> None:
    key = f"rate:{uuid.uuid4()}"
    counts = await asyncio.gather(*(store.hit(key, 60) for _ in range(20)))
    assert sorted(counts) == list(range(1, 21))


async def test_two_redis_clients_share_claims() -> None:
    a, b = RedisStore(REDIS_URL), RedisStore(REDIS_URL)
    key = f"nonce:{uuid.uuid4()}"
    try:
        assert await a.claim(key, 5)
        assert not await b.claim(key, 5)
    finally:
        await a.close()
        await b.close()


async def test_health_reports_redis_when_configured(make_app) -> None:
    async with AsyncTestClient(app=make_app(database={"redis_url": REDIS_URL})) as c:
        body = (await c.get("/health")).json()
    assert body["shared_state"] == "redis"
    async with AsyncTestClient(app=make_app(database={"redis_url": "redis://127.0.0.1:1/0"})) as c:
        r = await c.get("/health")
    assert r.status_code == 503 and r.json()["error"]["code"] == "SERVICE_UNAVAILABLE"


# ---- Redis failing: short timeouts, a circuit breaker, and the callers' fallbacks ------------


@pytest.fixture
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    if server.proc is not None:
        os.kill(server.proc.pid, signal.SIGCONT)  # in case a test froze it
    server.stop()


async def test_the_circuit_opens_on_failures_and_closes_when_redis_is_back(
    private_redis: PrivateRedis,
) -> None:
    store = RedisStore(private_redis.url, breaker_open_seconds=0.5)
    try:
        assert await store.hit(f"t:{uuid.uuid4()}", 60) == 1
        private_redis.stop()
        failures = []
        for _ in range(BREAKER_FAILURES + 2):
            with pytest.raises(StoreUnavailable) as caught:
                await store.hit(f"t:{uuid.uuid4()}", 60)
            failures.append(caught.value.circuit_open)
        # the first failures reach Redis; once open, calls fail without trying
        assert failures == [False] * BREAKER_FAILURES + [True, True]
        private_redis.start()
        while True:  # the circuit lets a trial call through once its open time is over
            try:
                assert await store.hit(f"t:{uuid.uuid4()}", 60) == 1
                break
            except StoreUnavailable as exc:
                assert exc.circuit_open
                await asyncio.sleep(0.1)
        assert await store.claim(f"t:{uuid.uuid4()}", 10)
    finally:
        await store.close()


async def test_a_frozen_redis_fails_calls_instead_of_holding_them(
    private_redis: PrivateRedis,
) -> None:
    """SIGSTOP: Redis accepts nothing and answers nothing. redis-py would wait its default 5 s
    socket timeout on every call; the store's own short timeout turns it into StoreUnavailable."""
    store = RedisStore(private_redis.url)
    try:
        assert await store.claim(f"t:{uuid.uuid4()}", 10)
        assert private_redis.proc is not None
        os.kill(private_redis.proc.pid, signal.SIGSTOP)
        with pytest.raises(StoreUnavailable) as caught:
            await store.claim(f"t:{uuid.uuid4()}", 10)
        assert "Timeout" in repr(caught.value.__cause__)
        os.kill(private_redis.proc.pid, signal.SIGCONT)
    finally:
        await store.close()


async def test_payment_claims_move_to_postgres_while_redis_is_down(database_url: str) -> None:
    guard = SharedStoreGuard(RedisStore("redis://127.0.0.1:1/0"), ttl_seconds=60)
    key = f"eip155:8453:0xpayer:{uuid.uuid4()}"
    first, second = await asyncpg.connect(database_url), await asyncpg.connect(database_url)
    try:
        async with first.transaction():
            assert await guard.acquire(first, key)  # an advisory lock in first's transaction
            async with second.transaction():
                assert not await guard.acquire(second, key)  # held by first: refused
            await guard.release(key)  # nothing to do in Redis: first's end releases it
        async with second.transaction():
            assert await guard.acquire(second, key)
    finally:
        await first.close()
        await second.close()
        await guard.store.close()


async def test_the_redis_timeout_is_the_operators_setting(make_app) -> None:
    """ENGRAM_REDIS_TIMEOUT_MS reaches every Redis call's socket (a remote Redis needs more)."""
    app = make_app(database={"redis_url": REDIS_URL, "redis_timeout_ms": 1500})
    shared = app.state.shared
    assert isinstance(shared, RedisStore)
    kwargs = shared._redis.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 1.5
    default = make_app(database={"redis_url": REDIS_URL}).state.shared
    assert default._redis.connection_pool.connection_kwargs["socket_timeout"] == 0.25
    await shared.close()
    await default.close()
