"""Per-wallet rate limits (docs/api-contract.md, "Rate limits"): counts, headers, the
429 body, route limits, window rollover, and one count shared by instances through Redis."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from eth_account import Account
from litestar import Litestar, get
from litestar.openapi import OpenAPIConfig
from litestar.testing import AsyncTestClient

from app.auth.middleware import WalletAuthMiddleware
from app.auth.signature import WalletVerifier
from app.config import Settings
from app.core.contract import STORE
from app.core.errors import InvalidInput
from app.http.errors import EXCEPTION_HANDLERS
from app.http.markers import PUBLIC_OPT_KEY, UNLIMITED_OPT_KEY, limited, paid, unlimited
from app.http.ratelimit import (
    LLM_ROUTE_PER_MINUTE,
    OVERALL_PER_MINUTE,
    RateLimitMiddleware,
)
from app.infra.instance_state import InProcessStore, RedisStore, SharedStore
from tests.support.api import auth
from tests.support.server import served
from tests.support.shared_store import REDIS_URL

LIMIT = 5  # the tiny app's overall limit
STRICT = 3  # its /strict route's own limit


class Clock:
    """A settable unix clock; each test starts in a minute of its own, so counters left in Redis
    by other tests (or earlier runs) are never in its keys."""

    def __init__(self) -> None:
        self.window_start = (1_800_000_000 // 60 + random.randrange(10**7)) * 60
        self.now = self.window_start + 10.0

    def __call__(self) -> float:
        return self.now

    @property
    def reset(self) -> int:
        return self.window_start + 60

    def next_minute(self) -> None:
        self.window_start += 60
        self.now = self.window_start + 1.0


@get("/plain", sync_to_thread=False)
def plain() -> dict[str, bool]:
    return {"ok": True}


@get("/strict", opt=limited(STRICT), sync_to_thread=False)
def strict() -> dict[str, bool]:
    return {"ok": True}


@get("/paid", opt=paid(STORE), sync_to_thread=False)
def paid_route() -> dict[str, bool]:
    return {"ok": True}  # no payment gate here: only who is counted matters


@get("/public", opt={PUBLIC_OPT_KEY: True}, sync_to_thread=False)
def public() -> dict[str, bool]:
    return {"ok": True}


@get("/health", opt={PUBLIC_OPT_KEY: True, **unlimited()}, sync_to_thread=False)
def probe() -> dict[str, bool]:
    return {"ok": True}


@get("/boom", sync_to_thread=False)
def boom() -> dict[str, bool]:
    raise InvalidInput("bad input")


def tiny_app(store: SharedStore, clock: Callable[[], float], per_minute: int = LIMIT) -> Litestar:
    return Litestar(
        route_handlers=[plain, strict, paid_route, public, probe, boom],
        middleware=[
            WalletAuthMiddleware(WalletVerifier(300)),
            RateLimitMiddleware(store, per_minute, clock=clock),
        ],
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        openapi_config=OpenAPIConfig(title="tiny", version="0", path="/docs"),  # as Engram's
        # the test client serves the app in a loop of its own: a Redis client closes in it
        on_shutdown=[store.close],
    )


@pytest.fixture(params=["in-process", "redis"])
def store(request: pytest.FixtureRequest) -> SharedStore:
    # closed by the app that uses it (see tiny_app). These tests count in Redis: a call slower
    # than the production 250 ms (a loaded CI machine) must not send them to the per-process
    # fallback, which test_a_store_outage_falls_back_to_per_process_limits checks on its own.
    if request.param == "in-process":
        return InProcessStore()
    return RedisStore(REDIS_URL, socket_timeout=5.0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def limits(r: Any) -> tuple[int, int, int]:
    h = r.headers
    return int(h["x-ratelimit-limit"]), int(h["x-ratelimit-remaining"]), int(h["x-ratelimit-reset"])


def iso(unix: int) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def assert_429(r: Any, limit: int, reset: int, retry_after: int) -> None:
    assert r.status_code == 429, r.text
    assert r.json() == {
        "error": {
            "code": "RATE_LIMIT_EXCEEDED",
            "message": r.json()["error"]["message"],
            "details": {"limit": limit, "reset_at": iso(reset)},
        }
    }
    assert "Rate limit exceeded" in r.json()["error"]["message"]
    assert limits(r) == (limit, 0, reset)
    assert r.headers["retry-after"] == str(retry_after)


async def test_headers_count_down_to_the_next_minute(store: SharedStore, clock: Clock) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        headers = auth(Account.create())
        seen = [limits(await c.get("/plain", headers=headers)) for _ in range(LIMIT)]
    assert seen == [(LIMIT, LIMIT - n, clock.reset) for n in range(1, LIMIT + 1)]
    assert clock.reset % 60 == 0 and clock.window_start < clock.now < clock.reset


async def test_excess_is_429_with_the_contract_body(store: SharedStore, clock: Clock) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        headers = auth(Account.create())
        for _ in range(LIMIT):
            assert (await c.get("/plain", headers=headers)).status_code == 200
        clock.now = clock.window_start + 42.5
        r = await c.get("/plain", headers=headers)
    assert_429(r, LIMIT, clock.reset, retry_after=math.ceil(60 - 42.5))


async def test_wallets_are_counted_apart(store: SharedStore, clock: Clock) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        first, second = auth(Account.create()), auth(Account.create())
        for _ in range(LIMIT):
            await c.get("/plain", headers=first)
        assert (await c.get("/plain", headers=first)).status_code == 429
        r = await c.get("/plain", headers=second)
    assert r.status_code == 200 and limits(r) == (LIMIT, LIMIT - 1, clock.reset)


async def test_the_same_wallet_with_any_case_or_signature_shares_a_count(
    store: SharedStore, clock: Clock
) -> None:
    wallet = Account.create()
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        for n in range(LIMIT):
            # a fresh signature each time (another timestamp): still the same wallet
            r = await c.get("/plain", headers=auth(wallet, int(time.time()) - n))
            assert r.status_code == 200
        assert (await c.get("/plain", headers=auth(wallet))).status_code == 429


async def test_a_route_limit_is_counted_besides_the_overall_one(
    store: SharedStore, clock: Clock
) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        headers = auth(Account.create())
        seen = [limits(await c.get("/strict", headers=headers)) for _ in range(STRICT)]
        # the route's bucket is the tighter one: its numbers are reported
        assert seen == [(STRICT, STRICT - n, clock.reset) for n in range(1, STRICT + 1)]
        assert_429(await c.get("/strict", headers=headers), STRICT, clock.reset, 50)
        # the overall bucket counted all four, refused one included
        r = await c.get("/plain", headers=headers)
        assert r.status_code == 200 and limits(r) == (LIMIT, 0, clock.reset)
        assert_429(await c.get("/plain", headers=headers), LIMIT, clock.reset, 50)


async def test_headers_report_the_overall_bucket_when_it_is_tighter(
    store: SharedStore, clock: Clock
) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        headers = auth(Account.create())
        for _ in range(LIMIT - 1):
            await c.get("/plain", headers=headers)
        r = await c.get("/strict", headers=headers)  # overall 5/5 left 0, route 1/3 left 2
        assert r.status_code == 200 and limits(r) == (LIMIT, 0, clock.reset)
        # refused by the overall bucket: the route's own budget is not spent
        assert_429(await c.get("/strict", headers=headers), LIMIT, clock.reset, 50)
        clock.next_minute()
        r = await c.get("/strict", headers=headers)
        assert r.status_code == 200 and limits(r) == (STRICT, STRICT - 1, clock.reset)


async def test_a_new_minute_starts_a_new_count(store: SharedStore, clock: Clock) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        headers = auth(Account.create())
        for _ in range(LIMIT):
            await c.get("/plain", headers=headers)
        clock.now = clock.reset - 0.2  # the last instant of the window: still refused
        assert_429(await c.get("/plain", headers=headers), LIMIT, clock.reset, retry_after=1)
        old_reset = clock.reset
        clock.next_minute()
        r = await c.get("/plain", headers=headers)
    assert r.status_code == 200
    assert limits(r) == (LIMIT, LIMIT - 1, old_reset + 60)


async def test_error_responses_carry_the_headers_too(store: SharedStore, clock: Clock) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        headers = auth(Account.create())
        r = await c.get("/boom", headers=headers)
        assert r.status_code == 422 and limits(r) == (LIMIT, LIMIT - 1, clock.reset)
        # refused by the auth middleware, which runs first: not counted, no headers
        r = await c.get("/plain", headers={"x-wallet-auth": "garbage"})
        assert r.status_code == 401 and "x-ratelimit-limit" not in r.headers
        # unknown paths never reach route middleware
        r = await c.get("/nope", headers=headers)
        assert r.status_code == 404 and "x-ratelimit-limit" not in r.headers


async def test_callers_without_a_wallet_are_limited_by_ip(store: SharedStore, clock: Clock) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        # an anonymous paid call (the payment gate would answer 402) and a public route share
        # the IP's bucket; a wallet's calls from the same IP do not count against it
        for _ in range(LIMIT - 2):
            assert (await c.get("/paid")).status_code == 200
        assert (await c.get("/plain", headers=auth(Account.create()))).status_code == 200
        r = await c.get("/public")
        assert r.status_code == 200 and limits(r) == (LIMIT, 1, clock.reset)
        assert (await c.get("/public")).status_code == 200
        assert_429(await c.get("/paid"), LIMIT, clock.reset, 50)
        assert_429(await c.get("/public"), LIMIT, clock.reset, 50)


async def test_unlimited_routes_and_docs_are_never_counted(
    store: SharedStore, clock: Clock
) -> None:
    async with AsyncTestClient(app=tiny_app(store, clock)) as c:
        for path in ("/health", "/docs/openapi.json"):
            for _ in range(LIMIT * 2):
                r = await c.get(path)
                assert r.status_code == 200 and "x-ratelimit-limit" not in r.headers
        r = await c.get("/public")
    assert limits(r) == (LIMIT, LIMIT - 1, clock.reset)


async def test_two_instances_on_one_redis_share_the_count(clock: Clock) -> None:
    a = AsyncTestClient(app=tiny_app(RedisStore(REDIS_URL), clock))
    b = AsyncTestClient(app=tiny_app(RedisStore(REDIS_URL), clock))
    async with a, b:
        headers = auth(Account.create())
        for _ in range(3):
            assert (await a.get("/plain", headers=headers)).status_code == 200
        assert limits(await b.get("/plain", headers=headers)) == (LIMIT, 1, clock.reset)
        assert limits(await a.get("/plain", headers=headers)) == (LIMIT, 0, clock.reset)
        assert_429(await b.get("/plain", headers=headers), LIMIT, clock.reset, 50)
        assert_429(await a.get("/plain", headers=headers), LIMIT, clock.reset, 50)


async def test_instances_without_redis_count_apart(clock: Clock) -> None:
    a = AsyncTestClient(app=tiny_app(InProcessStore(), clock))
    b = AsyncTestClient(app=tiny_app(InProcessStore(), clock))
    async with a, b:
        headers = auth(Account.create())
        for _ in range(LIMIT):
            await a.get("/plain", headers=headers)
        assert (await a.get("/plain", headers=headers)).status_code == 429
        assert (await b.get("/plain", headers=headers)).status_code == 200


async def test_concurrent_requests_never_exceed_the_limit(store: SharedStore, clock: Clock) -> None:
    # a real server: the test client would serve these one after another
    headers = auth(Account.create())
    with served(tiny_app(store, clock)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            rs = await asyncio.gather(*(c.get("/plain", headers=headers) for _ in range(20)))
    assert sorted(r.status_code for r in rs) == [200] * LIMIT + [429] * (20 - LIMIT)
    remaining = sorted(limits(r)[1] for r in rs if r.status_code == 200)
    assert remaining == list(range(LIMIT))


async def test_zero_disables_the_overall_limit_only(clock: Clock) -> None:
    async with AsyncTestClient(app=tiny_app(InProcessStore(), clock, per_minute=0)) as c:
        headers = auth(Account.create())
        for _ in range(OVERALL_PER_MINUTE + 1):
            r = await c.get("/plain", headers=headers)
            assert r.status_code == 200 and "x-ratelimit-limit" not in r.headers
        for _ in range(STRICT):
            assert (await c.get("/strict", headers=headers)).status_code == 200
        assert_429(await c.get("/strict", headers=headers), STRICT, clock.reset, 50)


async def test_a_store_outage_falls_back_to_per_process_limits(clock: Clock) -> None:
    """Redis refusing connections: requests are still served, counted in this process, and the
    limit still holds (issue 11: it used to fail open)."""
    async with AsyncTestClient(app=tiny_app(RedisStore("redis://127.0.0.1:1/0"), clock)) as c:
        headers = auth(Account.create())
        for i in range(LIMIT):
            r = await c.get("/plain", headers=headers)
            assert r.status_code == 200, r.text
            assert limits(r) == (LIMIT, LIMIT - i - 1, clock.reset)
        assert_429(await c.get("/plain", headers=headers), LIMIT, clock.reset, 50)


def test_limits_are_validated() -> None:
    assert limited(LLM_ROUTE_PER_MINUTE) == {"rate_limit": 10}
    assert unlimited() == {UNLIMITED_OPT_KEY: True}
    assert (OVERALL_PER_MINUTE, LLM_ROUTE_PER_MINUTE) == (100, 10)  # the contract's numbers
    with pytest.raises(ValueError):
        limited(0)
    with pytest.raises(ValueError):
        RateLimitMiddleware(InProcessStore(), -1)


def test_the_overall_limit_is_configured_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_RATE_LIMIT_PER_MINUTE", raising=False)
    assert Settings.from_env().limits.rate_limit_per_minute == OVERALL_PER_MINUTE
    monkeypatch.setenv("ENGRAM_RATE_LIMIT_PER_MINUTE", "0")
    assert Settings.from_env().limits.rate_limit_per_minute == 0


async def test_the_real_app_limits_each_wallet(make_app, wallet, other_wallet) -> None:
    if 60 - time.time() % 60 < 5:  # six requests must fall in one window
        await asyncio.sleep(60 - time.time() % 60 + 0.1)
    async with AsyncTestClient(app=make_app(limits={"rate_limit_per_minute": 5}), timeout=60) as c:
        seen = []
        for _ in range(5):
            r = await c.get("/v1/memories", headers=auth(wallet))
            assert r.status_code == 200, r.text
            seen.append(limits(r))
        reset = seen[0][2]
        assert reset % 60 == 0 and 0 < reset - time.time() <= 60
        assert seen == [(5, n, reset) for n in (4, 3, 2, 1, 0)]
        r = await c.get("/v1/memories", headers=auth(wallet))
        assert_429(r, 5, reset, retry_after=int(r.headers["retry-after"]))
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert r.headers["x-request-id"]
        other = await c.get("/v1/memories", headers=auth(other_wallet))
        assert other.status_code == 200 and limits(other) == (5, 4, reset)
        health = await c.get("/health")
        assert health.status_code == 200 and "x-ratelimit-limit" not in health.headers


async def test_the_in_process_store_forgets_past_windows() -> None:
    # every minute makes new keys per caller; without a sweep they would pile up for good
    s = InProcessStore()
    for n in range(50):
        await s.hit(f"ratelimit:ip:test:all:{n}", 0)  # expired at once
    s._next_sweep = 0.0  # as if a sweep interval had gone by
    await s.hit("ratelimit:ip:test:all:live", 60)
    assert set(s._counts) == {"ratelimit:ip:test:all:live"}
