"""The free tier: counted atomically on paid endpoints only, never twice, never past the limit."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
from eth_account import Account
from litestar.testing import AsyncTestClient

from tests.support.api import auth
from tests.support.db import count_memories
from tests.support.server import served


async def _used(database_url: str, address: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT coalesce((SELECT free_calls_used FROM wallets WHERE address = $1), 0)",
                address.lower(),
            )
        )
    finally:
        await conn.close()


async def test_info_is_public_and_describes_the_tier(client: AsyncTestClient) -> None:
    body = (await client.get("/v1/free-tier/info")).json()
    assert body["free_tier"]["calls_per_wallet"] == 100
    assert body["auth"]["header"] == "x-wallet-auth"
    assert body["auth"]["message_to_sign"] == "memoclaw-auth:{unix_timestamp}"
    assert body["auth"]["expiry_seconds"] == 300


async def test_only_paid_calls_count(client: AsyncTestClient, wallet, database_url) -> None:
    r = await client.get("/v1/free-tier/status", headers=auth(wallet))
    assert r.json() == {
        "wallet": wallet.address.lower(),
        "free_tier_remaining": 100,
        "free_tier_total": 100,
        "free_tier_used": 0,
    }
    assert r.headers["x-free-tier-remaining"] == "100"
    for _ in range(3):
        assert (await client.get("/v1/memories", headers=auth(wallet))).status_code == 200
    r = await client.post("/v1/store", json={"content": "one paid call"}, headers=auth(wallet))
    assert r.status_code == 201
    assert r.headers["x-free-tier-remaining"] == "99"
    r = await client.get("/v1/memories", headers=auth(wallet))
    assert r.headers["x-free-tier-remaining"] == "99"
    assert await _used(database_url, wallet.address) == 1


async def test_failed_paid_call_costs_nothing(
    client: AsyncTestClient, wallet, database_url
) -> None:
    missing = "00000000-0000-0000-0000-000000000000"
    r = await client.patch(f"/v1/memories/{missing}", json={"importance": 1}, headers=auth(wallet))
    assert r.status_code == 404
    r = await client.post("/v1/store", json={"content": "x", "importance": 7}, headers=auth(wallet))
    assert r.status_code == 422
    assert await _used(database_url, wallet.address) == 0


async def test_exhausted_tier_goes_through_the_payment_seam(make_app, database_url) -> None:
    account = Account.create()
    async with AsyncTestClient(app=make_app(limits={"free_tier_calls": 2})) as small:
        for remaining in ("1", "0"):
            r = await small.post(
                "/v1/store", json={"content": f"m{remaining}"}, headers=auth(account)
            )
            assert r.status_code == 201 and r.headers["x-free-tier-remaining"] == remaining
        r = await small.post("/v1/store", json={"content": "one too many"}, headers=auth(account))
        assert r.status_code == 402
        err = r.json()["error"]
        assert err["code"] == "PAYMENT_REQUIRED" and "Free tier used up" in err["message"]
        assert r.headers["x-free-tier-remaining"] == "0"
        # free endpoints still work with the tier used up
        assert (await small.get("/v1/memories", headers=auth(account))).status_code == 200
    assert await _used(database_url, account.address) == 2
    assert await count_memories(database_url, account.address) == 2


async def test_200_concurrent_calls_use_exactly_the_tier(make_app, database_url) -> None:
    # a real server: the test client would serve these one after another
    account = Account.create()
    headers = auth(account)
    start = asyncio.Event()
    deduplicated = 0

    with served(make_app()) as url:
        # no keep-alive: a connection idle past uvicorn's keep-alive timeout (5 s) could be
        # closed by the server just as the client reuses it ("Server disconnected")
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

            async def store(i: int) -> int:
                nonlocal deduplicated
                await start.wait()  # all 200 are sent together
                r = await client.post(
                    "/v1/store", json={"content": f"concurrent memory number {i}"}, headers=headers
                )
                if r.status_code == 201:
                    deduplicated += r.json()["deduplicated"]
                return r.status_code

            calls = [asyncio.create_task(store(i)) for i in range(200)]
            await asyncio.sleep(0)  # every task now waits on the event
            start.set()
            codes = await asyncio.gather(*calls)
            status = (await client.get("/v1/free-tier/status", headers=headers)).json()
    assert codes.count(201) == 100, codes
    assert codes.count(402) == 100, codes
    assert await _used(database_url, account.address) == 100
    # near-identical texts merge (store dedups at cosine >= 0.95): every success is accounted for
    assert await count_memories(database_url, account.address) + deduplicated == 100
    assert status["free_tier_remaining"] == 0 and status["free_tier_used"] == 100
