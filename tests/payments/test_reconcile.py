"""Payments reconciled, on the dev chain: a payment is recorded as pending before it settles, in a
transaction of its own, so that money moved for work that never committed is found and redeemed
(the same proof and request get the work, without a second charge), never lost.

Three ways to lose it, each tested: the settlement's answer never arrives (a timeout), the
request's commit fails after settling, and the process is killed between settle and commit."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from app.payments.reconcile import ChainReader, Reconciler
from tests.support.api import auth
from tests.support.db import count_memories
from tests.support.facilitator_wire import LocalFacilitatorServer
from tests.support.server import start_serve
from tests.support.settings import changed
from tests.support.x402 import offer_of, sign_proof

PRICE = 5000
NETWORK = "eip155:8453"


@pytest.fixture(scope="module")
def pay_to() -> str:
    return str(Account.create().address)


@pytest.fixture
def payer(chain: DevChain) -> LocalAccount:
    account: LocalAccount = Account.create()
    chain.fund(account.address, 1_000_000, eth_wei=0)
    return account


class SettlesThen:
    """A facilitator that settles for real, then does `then()` instead of answering."""

    def __init__(self, inner: Any, then: Any) -> None:
        self.inner, self.then = inner, then

    def verify(self, *args: Any) -> Any:
        return self.inner.verify(*args)

    def get_supported(self) -> Any:
        return self.inner.get_supported()

    def settle(self, *args: Any) -> Any:
        receipt = self.inner.settle(*args)
        assert receipt.success, receipt
        self.then()
        return receipt


async def _ledger(database_url: str, wallet: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(
            "SELECT status, tx_hash, response_body IS NOT NULL AS served FROM payments"
            " WHERE wallet = $1", wallet.lower(),
        ))  # fmt: skip
    finally:
        await conn.close()


async def _reconcile(database_url: str, chain: DevChain) -> None:
    """One reconciler run with no grace period (nothing else is in flight for these wallets)."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    assert pool is not None
    try:
        await Reconciler({NETWORK: ChainReader(chain.rpc_url)}, after_seconds=0).run_once(pool)
    finally:
        await pool.close()


async def _redeemed(client: Any, body: dict[str, Any], headers: dict[str, str]) -> None:
    """The same proof and request: the work is done now, then replayed."""
    r = await client.post("/v1/store", json=body, headers=headers)
    assert r.status_code == 201, r.text
    assert r.headers.get("x-idempotent-replay") is None  # done now, not replayed
    assert r.headers["PAYMENT-RESPONSE"]
    again = await client.post("/v1/store", json=body, headers=headers)
    assert again.status_code == 201 and again.headers["x-idempotent-replay"] == "true"
    assert again.json() == r.json()


async def test_a_settlement_whose_answer_never_comes_is_reconciled_and_redeemed(
    settings: Settings, chain: DevChain, pay_to: str, payer: LocalAccount, database_url: str
) -> None:
    with LocalFacilitatorServer(chain.relayer.key.hex(), chain.rpc_url, NETWORK) as remote:

        def no_answer() -> None:
            raise ConnectionAbortedError("the facilitator went away after settling")

        remote.facilitator = SettlesThen(remote.facilitator, no_answer)
        app = create_app(changed(settings, limits={"free_tier_calls": 0},
                                 x402={"pay_to": pay_to, "facilitator_url": remote.url}))  # fmt: skip
        async with AsyncTestClient(app=app, timeout=60) as client:
            body = {"content": f"Settled in the dark {uuid.uuid4()}"}
            r = await client.post("/v1/store", json=body, headers=auth(payer))
            name, value = sign_proof(payer, offer_of(r))
            headers = {**auth(payer), name: value}
            r = await client.post("/v1/store", json=body, headers=headers)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["details"]["reason"] == "settlement_pending"
            assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE  # the money moved
            assert await count_memories(database_url, payer.address) == 0
            assert [r["status"] for r in await _ledger(database_url, payer.address)] == ["pending"]
            # until the reconciler has looked, the same proof neither pays again nor redeems
            r = await client.post("/v1/store", json=body, headers=headers)
            assert r.status_code == 503 and r.headers["retry-after"]
            await _reconcile(database_url, chain)
            assert [r["status"] for r in await _ledger(database_url, payer.address)] == [
                "redeemable"
            ]
            listed = (await client.get("/v1/payments", headers=auth(payer))).json()
            assert [p["status"] for p in listed["payments"]] == ["redeemable"]
            # another request with that proof is still refused
            other = await client.post("/v1/store", json={"content": "other"}, headers=headers)
            assert other.status_code == 402, other.text
            remote.facilitator = remote.facilitator.inner  # settling works again: not needed
            await _redeemed(client, body, headers)
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE  # charged once
    assert await count_memories(database_url, payer.address) == 1
    assert [(r["status"], r["served"]) for r in await _ledger(database_url, payer.address)] == [
        ("settled", True)
    ]


async def test_a_commit_that_fails_after_settling_leaves_the_payment_redeemable(
    settings: Settings, chain: DevChain, pay_to: str, payer: LocalAccount, database_url: str
) -> None:
    app = create_app(changed(settings, limits={"free_tier_calls": 0}, x402={
        "pay_to": pay_to, "rpc_url": chain.rpc_url, "relayer_key": chain.relayer.key.hex(),
    }))  # fmt: skip
    async with AsyncTestClient(app=app, timeout=60) as client:
        x402 = app.state.payment_gate.x402
        real = x402.facilitator

        class LosesTheDatabase:
            async def verify(self, *args: Any) -> Any:
                return await real.verify(*args)

            async def settle(self, *args: Any) -> Any:
                receipt = await real.settle(*args)
                conn = await asyncpg.connect(database_url)  # the request's connection, lost
                try:
                    await conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND state = 'idle in transaction'"
                        " AND pid <> pg_backend_pid()"
                    )
                finally:
                    await conn.close()
                return receipt

        x402.facilitator = LosesTheDatabase()
        body = {"content": f"Settled, never committed {uuid.uuid4()}"}
        r = await client.post("/v1/store", json=body, headers=auth(payer))
        name, value = sign_proof(payer, offer_of(r))
        headers = {**auth(payer), name: value}
        try:
            r = await client.post("/v1/store", json=body, headers=headers)
        finally:
            x402.facilitator = real
        assert r.status_code == 503, r.text
        assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
        assert await count_memories(database_url, payer.address) == 0
        [row] = await _ledger(database_url, payer.address)
        assert row["status"] == "redeemable" and row["tx_hash"].startswith("0x")
        await _redeemed(client, body, headers)
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    assert await count_memories(database_url, payer.address) == 1


async def test_a_process_killed_between_settle_and_commit_is_reconciled_on_start(
    chain: DevChain, pay_to: str, payer: LocalAccount, database_url: str, tmp_path: Path
) -> None:
    env = {
        "ENGRAM_DATABASE_URL": database_url, "ENGRAM_FREE_TIER_CALLS": "0",
        "ENGRAM_RATE_LIMIT_PER_MINUTE": "0", "ENGRAM_X402_PAY_TO": pay_to,
        "ENGRAM_X402_RPC_URL": chain.rpc_url, "ENGRAM_LOG_FORMAT": "text",
    }  # fmt: skip
    log = tmp_path / "serve.log"
    with LocalFacilitatorServer(chain.relayer.key.hex(), chain.rpc_url, NETWORK) as remote:
        env["ENGRAM_X402_FACILITATOR_URL"] = remote.url
        proc, url = start_serve(tmp_path, log, **env)
        remote.facilitator = SettlesThen(remote.facilitator, proc.kill)  # SIGKILL
        body = {"content": f"Killed mid-payment {uuid.uuid4()}"}
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            r = await client.post("/v1/store", json=body, headers=auth(payer))
            name, value = sign_proof(payer, offer_of(r))
            headers = {**auth(payer), name: value}
            with pytest.raises(httpx.TransportError):
                await client.post("/v1/store", json=body, headers=headers)
        assert proc.wait(timeout=30) != 0
        remote.facilitator = remote.facilitator.inner
        assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
        assert await count_memories(database_url, payer.address) == 0
        [row] = await _ledger(database_url, payer.address)
        assert row["status"] == "pending" and row["tx_hash"] is None  # no answer was noted
        # restarted, the reconciler runs on start and asks the chain
        proc, url = start_serve(tmp_path, log, ENGRAM_X402_RECONCILE_AFTER_SECONDS="0", **env)
        try:
            for _ in range(100):
                if (await _ledger(database_url, payer.address))[0]["status"] != "pending":
                    break
                await asyncio.sleep(0.1)
            assert (await _ledger(database_url, payer.address))[0]["status"] == "redeemable"
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                await _redeemed(client, body, headers)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    assert await count_memories(database_url, payer.address) == 1
