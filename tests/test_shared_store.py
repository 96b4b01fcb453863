"""Shared state behaves the same in-process and on a real Redis (127.0.0.1:6379 by default)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator

import pytest
from litestar.testing import AsyncTestClient

from app.shared.store import InProcessStore, RedisStore, SharedStore

REDIS_URL = os.environ.get("ENGRAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


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
    async with AsyncTestClient(app=make_app(redis_url=REDIS_URL)) as c:
        body = (await c.get("/health")).json()
    assert body["shared_state"] == "redis"
    async with AsyncTestClient(app=make_app(redis_url="redis://127.0.0.1:1/0")) as c:
        r = await c.get("/health")
    assert r.status_code == 503 and r.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
