"""The channel claimer (app/payments/claimer.py) against the dev chain's escrow: channels opened and
paid by x402's stock client, then claimed past the operator's thresholds (in batches), settled to
the receiver, refunded when idle, claimed at once on a withdrawal; a failed send is retried, a
pending claim already mined is confirmed and not sent again, and a claim whose process is killed
mid-flight (`kill -9` of a real `engram serve`) is reconciled by the next process: no voucher
lost, none claimed twice."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient
from x402 import x402ClientSync
from x402.http import x402HTTPClientSync
from x402.mechanisms.evm.batch_settlement.client import BatchSettlementEvmScheme
from x402.mechanisms.evm.batch_settlement.constants import BATCH_SETTLEMENT_ADDRESS
from x402.mechanisms.evm.batch_settlement.facilitator.utils import to_contract_channel_config
from x402.mechanisms.evm.batch_settlement.server.channel_manager_common import (
    build_claim_payment_payload,
    build_payment_requirements,
)
from x402.mechanisms.evm.signers import EthAccountSigner

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from app.payments import repository
from app.payments.claimer import (
    CLAIMS_PER_TRANSACTION,
    Claimer,
    ClaimPolicy,
    channel_config,
    voucher_claim,
)
from tests.support.api import auth
from tests.support.server import start_serve
from tests.support.settings import changed
from tests.support.x402 import paid_only

PRICE = 5_000  # a store, $0.005 in USDC atomic units
NETWORK = "eip155:8453"
NEVER = 10**9  # seconds: a threshold that is never reached
QUIET = ClaimPolicy(
    min_unclaimed=10**18, after_seconds=NEVER, refund_idle_seconds=NEVER,
    reconcile_after_seconds=NEVER,
)  # fmt: skip


@pytest.fixture(scope="module")
def dev(chain: DevChain) -> DevChain:
    chain.install_batch_settlement()
    return chain


@pytest.fixture
def channel_settings(settings: Settings, dev: DevChain) -> Settings:
    """Channels on, paid to a fresh receiver (each test its own), the app's own claimer quiet."""
    return changed(
        paid_only(settings, dev),
        x402={"schemes": "exact,batch-settlement", "claim_every_seconds": NEVER},
    )


@pytest.fixture
async def paid(channel_settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=create_app(channel_settings), timeout=60) as client:
        yield client


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    assert p is not None
    try:
        yield p
    finally:
        await p.close()


def claimer(client: AsyncTestClient[Litestar], policy: ClaimPolicy) -> Claimer:
    app: Any = client.app
    return Claimer(app.state.payment_gate.x402.channels, NETWORK, policy)


class Payer:
    """x402's stock HTTP client with its batch-settlement scheme, on the in-process app."""

    def __init__(self, client: AsyncTestClient[Litestar], dev: DevChain) -> None:
        self.client = client
        self.account: LocalAccount = Account.create()
        dev.fund(self.account.address, 1_000_000, eth_wei=10**17)
        scheme = BatchSettlementEvmScheme(EthAccountSigner(self.account))
        self.x402 = x402HTTPClientSync(x402ClientSync().register(NETWORK, scheme))
        self.last_payload: Any = None
        self.opening: dict[str, Any] = {}  # the deposit's payload

    @property
    def wallet(self) -> str:
        return self.account.address.lower()

    async def store(self) -> Any:
        body = {"content": f"Channel memory {uuid.uuid4()}"}
        r = await self.client.post("/v1/store", json=body, headers=auth(self.account))
        assert r.status_code == 402, r.text
        headers, payload = self.x402.handle_402_response(dict(r.headers), r.content, str(r.url))
        self.last_payload = payload
        r = await self.client.post(
            "/v1/store", json=body, headers={**auth(self.account), **headers}
        )
        self.x402.process_payment_result(payload, r.headers.get, r.status_code)
        assert r.status_code == 201, r.text
        return r

    async def calls(self, n: int) -> Payer:
        for _ in range(n):
            await self.store()
        return self

    @property
    def deposit(self) -> int:
        return int(self.opening["deposit"]["amount"])

    @property
    def channel_id(self) -> str:
        return str(self.last_payload.payload["voucher"]["channelId"]).lower()


async def opened(client: AsyncTestClient[Litestar], dev: DevChain, calls: int) -> Payer:
    payer = Payer(client, dev)
    await payer.store()
    payer.opening = payer.last_payload.payload
    return await payer.calls(calls - 1)


async def rows(database_url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def claims_of(database_url: str, payer: Payer) -> list[asyncpg.Record]:
    return await rows(
        database_url,
        "SELECT * FROM channel_claims WHERE wallet = $1 ORDER BY created_at",
        payer.wallet,
    )


async def channel_of(database_url: str, payer: Payer) -> asyncpg.Record:
    (row,) = await rows(
        database_url, "SELECT * FROM payment_channels WHERE wallet = $1", payer.wallet
    )
    return row


def on_chain(dev: DevChain, payer: Payer) -> tuple[int, int]:
    """(balance, totalClaimed) of the payer's channel in the escrow."""
    balance, claimed = dev.escrow().functions.channels(payer.channel_id).call()
    return int(balance), int(claimed)


def claim_transactions(dev: DevChain, since_block: int) -> int:
    """claimWithSignature transactions mined since `since_block` (any sender)."""
    selector = dev.escrow().get_function_by_name("claimWithSignature").signature
    wanted = "0x" + dev.w3.keccak(text=selector).hex().removeprefix("0x")[:8]
    found = 0
    for number in range(since_block + 1, dev.w3.eth.block_number + 1):
        for tx in dev.w3.eth.get_block(number, full_transactions=True)["transactions"]:
            data = tx["input"].hex() if isinstance(tx["input"], bytes) else str(tx["input"])
            if (
                tx["to"] == BATCH_SETTLEMENT_ADDRESS
                and ("0x" + data.removeprefix("0x"))[:10] == wanted
            ):
                found += 1
    return found


def claims_on_chain(dev: DevChain, payer: Payer, since_block: int) -> list[int]:
    """The escrow's Claimed events for the payer's channel since `since_block`: the new claimed
    total of each."""
    logs = (
        dev.escrow()
        .events.Claimed()
        .get_logs(from_block=since_block + 1, argument_filters={"channelId": payer.channel_id})
    )
    return [int(log["args"]["newTotalClaimed"]) for log in logs]


# ---- thresholds, batches, settlement ---------------------------------------------------------


async def test_channels_are_claimed_past_a_threshold_in_batches_then_settled(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str,
    channel_settings: Settings,
) -> None:  # fmt: skip
    payers = [await opened(paid, dev, 2) for _ in range(CLAIMS_PER_TRANSACTION + 1)]
    block = dev.w3.eth.block_number
    app: Any = paid.app
    paged = Claimer(app.state.payment_gate.x402.channels, NETWORK, QUIET, page_size=2)
    quiet = await paged.run_once(pool)  # 2 channels a query: every page is read
    assert (quiet.claimed, quiet.refunded, quiet.claim_transactions) == (0, 0, [])
    assert quiet.refreshed >= len(payers)
    assert dev.w3.eth.block_number == block  # a look at the chain sends nothing
    receiver = channel_settings.x402.pay_to
    assert receiver is not None
    before = dev.usdc_balance(receiver)

    by_amount = ClaimPolicy(2 * PRICE, NEVER, NEVER, NEVER)
    run = await claimer(paid, by_amount).run_once(pool)
    assert run.claimed >= len(payers)  # (with any channel an earlier test left unclaimed)
    assert len(run.claim_transactions) == -(-run.claimed // CLAIMS_PER_TRANSACTION)  # batched
    assert claim_transactions(dev, block) == len(run.claim_transactions)
    gas = [dev.w3.eth.get_transaction_receipt(t)["gasUsed"] for t in run.claim_transactions]
    assert gas[0] < 450_000  # a full batch, under x402's 500k gas limit with room to spare
    settles = set()
    assert dev.usdc_balance(receiver) == before + len(payers) * 2 * PRICE
    for payer in payers:
        assert on_chain(dev, payer) == (payer.deposit, 2 * PRICE)
        [claim] = await claims_of(database_url, payer)
        assert (claim["status"], claim["kind"], int(claim["cumulative"])) == (
            "confirmed", "claim", 2 * PRICE,
        )  # fmt: skip
        assert claim["tx_hash"] in run.claim_transactions
        assert claim["settle_tx"] in run.settled and claim["settled_at"] is not None
        settles.add(claim["settle_tx"])
        assert int((await channel_of(database_url, payer))["total_claimed"]) == 2 * PRICE
    assert len(settles) == 1  # one settle for the receiver and token

    # claimed already: nothing more is sent, whatever the thresholds
    block = dev.w3.eth.block_number
    again = await claimer(paid, by_amount).run_once(pool)
    assert (again.claimed, again.claim_transactions, again.settled) == (0, [], [])
    assert dev.w3.eth.block_number == block

    # GET /v1/payments shows the channel, its vouchers and its claim
    payer = payers[0]
    listed = (await paid.get("/v1/payments", headers=auth(payer.account))).json()
    [channel] = listed["channels"]
    assert (channel["channel_id"], channel["charged"], channel["total_claimed"]) == (
        payer.channel_id, str(2 * PRICE), str(2 * PRICE),
    )  # fmt: skip
    assert [v["charged_after"] for v in listed["vouchers"]] == [str(2 * PRICE), str(PRICE)]
    assert [(c["kind"], c["status"]) for c in listed["claims"]] == [("claim", "confirmed")]
    metrics = (await paid.get("/metrics")).text
    assert 'engram_x402_channel_claims_total{kind="claim",outcome="confirmed"}' in metrics
    assert 'engram_x402_channel_payments_total{kind="voucher"}' in metrics
    assert 'engram_x402_channel_settlements_total{outcome="settled"}' in metrics


async def test_an_old_unclaimed_voucher_is_claimed_by_age(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    payer = await opened(paid, dev, 3)
    young = await claimer(paid, ClaimPolicy(10**18, 3600, NEVER, NEVER)).run_once(pool)
    assert young.claimed == 0 and on_chain(dev, payer)[1] == 0
    await rows(
        database_url,
        """UPDATE channel_vouchers SET created_at = now() - interval '2 hours'
           WHERE wallet = $1 AND channel_id = $2 RETURNING 1""",
        payer.wallet, payer.channel_id,
    )  # fmt: skip
    old = await claimer(paid, ClaimPolicy(10**18, 3600, NEVER, NEVER)).run_once(pool)
    assert old.claimed >= 1
    assert on_chain(dev, payer) == (payer.deposit, 3 * PRICE)


# ---- withdrawal, refund ----------------------------------------------------------------------


async def test_a_withdrawal_started_after_the_deposit_is_noticed_and_claimed_at_once(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    payer = await opened(paid, dev, 3)
    escrow = dev.escrow()
    config = to_contract_channel_config(channel_config(await channel_of(database_url, payer)))
    call = escrow.functions.initiateWithdraw(config, payer.deposit - 3 * PRICE)
    tx = call.build_transaction({
        "from": payer.account.address,
        "nonce": dev.w3.eth.get_transaction_count(payer.account.address),
    })  # fmt: skip
    signed = payer.account.sign_transaction(tx)
    receipt = dev.w3.eth.wait_for_transaction_receipt(
        dev.w3.eth.send_raw_transaction(signed.raw_transaction)
    )
    assert receipt["status"] == 1
    run = await claimer(paid, QUIET).run_once(pool)  # no threshold reached but the withdrawal
    assert run.claimed >= 1
    assert on_chain(dev, payer)[1] == 3 * PRICE
    channel = await channel_of(database_url, payer)
    assert int(channel["withdraw_requested_at"]) > 0
    # vouchers past the withdrawal's end are refused (channels.py check_not_withdrawn)
    await rows(
        database_url,
        "UPDATE payment_channels SET withdraw_requested_at = 1 WHERE wallet = $1 RETURNING 1",
        payer.wallet,
    )
    r = await paid.post("/v1/store", json={"content": "late"}, headers=auth(payer.account))
    headers, _ = payer.x402.handle_402_response(dict(r.headers), r.content, str(r.url))
    r = await paid.post(
        "/v1/store", json={"content": "late"}, headers={**auth(payer.account), **headers}
    )
    assert r.status_code == 402
    assert r.json()["error"]["details"]["reason"].endswith("channel_withdrawn")


async def test_an_idle_channel_is_refunded_with_its_claim(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    payer = await opened(paid, dev, 4)
    held = dev.usdc_balance(payer.account.address)
    run = await claimer(paid, ClaimPolicy(10**18, NEVER, 0, NEVER)).run_once(pool)
    assert run.refunded >= 1
    assert on_chain(dev, payer) == (4 * PRICE, 4 * PRICE)  # claimed what it owes, the rest back
    assert dev.usdc_balance(payer.account.address) == held + payer.deposit - 4 * PRICE
    [refund] = await claims_of(database_url, payer)
    assert (refund["kind"], refund["status"]) == ("refund", "confirmed")
    assert (int(refund["cumulative"]), int(refund["refund_amount"])) == (
        4 * PRICE, payer.deposit - 4 * PRICE,
    )  # fmt: skip
    channel = await channel_of(database_url, payer)
    assert (int(channel["balance"]), int(channel["total_claimed"])) == (4 * PRICE, 4 * PRICE)
    assert refund["settle_tx"] is not None  # its claim settled to the receiver
    # nothing left to claim or refund: the next run leaves the channel alone
    block = dev.w3.eth.block_number
    await claimer(paid, ClaimPolicy(0, 0, 0, NEVER)).run_once(pool)
    assert dev.w3.eth.block_number == block


# ---- failures, reconciliation ----------------------------------------------------------------


async def test_a_claim_whose_send_fails_is_failed_then_claimed_again(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    payer = await opened(paid, dev, 2)
    relayer_eth = dev.eth_balance(dev.relayer.address)
    dev.set_eth_balance(dev.relayer.address, 0)  # no gas money: the node refuses the send
    try:
        run = await claimer(paid, ClaimPolicy(0, NEVER, NEVER, NEVER)).run_once(pool)
    finally:
        dev.set_eth_balance(dev.relayer.address, relayer_eth)
    assert run.failed >= 1 and run.claimed == 0
    assert [c["status"] for c in await claims_of(database_url, payer)] == ["failed"]
    assert on_chain(dev, payer)[1] == 0
    run = await claimer(paid, ClaimPolicy(0, NEVER, NEVER, NEVER)).run_once(pool)
    assert run.claimed >= 1
    assert [c["status"] for c in await claims_of(database_url, payer)] == ["failed", "confirmed"]
    assert on_chain(dev, payer)[1] == 2 * PRICE


async def test_a_refund_whose_send_fails_gives_the_channel_its_balance_back(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    payer = await opened(paid, dev, 2)
    relayer_eth = dev.eth_balance(dev.relayer.address)
    dev.set_eth_balance(dev.relayer.address, 0)
    try:
        run = await claimer(paid, ClaimPolicy(10**18, NEVER, 0, NEVER)).run_once(pool)
    finally:
        dev.set_eth_balance(dev.relayer.address, relayer_eth)
    assert run.failed >= 1 and run.refunded == 0
    [refund] = await claims_of(database_url, payer)
    assert (refund["kind"], refund["status"]) == ("refund", "failed")
    assert on_chain(dev, payer) == (payer.deposit, 0)
    assert int((await channel_of(database_url, payer))["balance"]) == payer.deposit
    await payer.store()  # the channel still pays


async def test_a_pending_claim_already_mined_is_confirmed_not_sent_again(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    """A process wrote the claim `pending`, sent it, and died before it heard back: the next
    run finds it on chain (totalClaimed reached its total) and confirms it."""
    payer = await opened(paid, dev, 3)
    channels = claimer(paid, QUIET).channels
    row = await channel_of(database_url, payer)
    async with pool.acquire() as conn:
        claim_id = await repository.hold_claim(
            conn, repository.HeldClaim(payer.wallet, payer.channel_id, "claim", 3 * PRICE)
        )
    assert claim_id is not None
    requirements = build_payment_requirements(row["receiver"], row["asset"], NETWORK)
    payload = build_claim_payment_payload([voucher_claim(row, 3 * PRICE)], requirements, None)
    sent = channels._facilitator.settle(payload, requirements)
    assert sent.success, sent
    async with pool.acquire() as conn:
        await repository.note_claim_sent(
            conn, payer.wallet, payer.channel_id, claim_id, sent.transaction
        )
    block = dev.w3.eth.block_number
    run = await claimer(paid, ClaimPolicy(0, 0, NEVER, NEVER)).run_once(pool)
    assert run.reconciled >= 1
    assert claims_on_chain(dev, payer, block) == []  # confirmed, not sent again
    [claim] = await claims_of(database_url, payer)
    assert (claim["status"], claim["tx_hash"]) == ("confirmed", sent.transaction)
    assert on_chain(dev, payer)[1] == 3 * PRICE


async def test_a_pending_claim_never_sent_is_failed_and_claimed_again(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    payer = await opened(paid, dev, 2)
    async with pool.acquire() as conn:
        claim_id = await repository.hold_claim(
            conn, repository.HeldClaim(payer.wallet, payer.channel_id, "claim", 2 * PRICE)
        )
        assert claim_id is not None
        # a second claim on the channel while one is pending is not held
        assert (
            await repository.hold_claim(
                conn, repository.HeldClaim(payer.wallet, payer.channel_id, "claim", 2 * PRICE)
            )
            is None
        )
    waiting = await claimer(paid, ClaimPolicy(0, 0, NEVER, 3600)).run_once(pool)
    assert waiting.in_flight >= 1 and on_chain(dev, payer)[1] == 0  # may still be coming
    run = await claimer(paid, ClaimPolicy(0, 0, NEVER, 0)).run_once(pool)
    assert run.failed >= 1 and run.claimed >= 1
    assert [c["status"] for c in await claims_of(database_url, payer)] == ["failed", "confirmed"]
    assert on_chain(dev, payer)[1] == 2 * PRICE


# ---- kill -9 mid-claim -----------------------------------------------------------------------


async def wait_for(check: Any) -> Any:
    for _ in range(600):  # a minute
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    pytest.fail("timed out")


async def test_a_claim_killed_mid_flight_is_reconciled_by_the_next_process(
    paid: AsyncTestClient[Litestar], dev: DevChain, database_url: str,
    channel_settings: Settings, tmp_path: Path,
) -> None:  # fmt: skip
    """`engram serve` writes the claim `pending`, sends it, and is killed (SIGKILL) while the
    transaction waits in the mempool; it is mined after. The restarted process confirms the
    pending claim from the chain: every voucher claimed, once."""
    payer = await opened(paid, dev, 5)
    x402 = channel_settings.x402
    env = {
        "ENGRAM_DATABASE_URL": database_url, "ENGRAM_FREE_TIER_CALLS": "0",
        "ENGRAM_RATE_LIMIT_PER_MINUTE": "0", "ENGRAM_LOG_FORMAT": "text",
        "ENGRAM_X402_PAY_TO": str(x402.pay_to), "ENGRAM_X402_RPC_URL": dev.rpc_url,
        "ENGRAM_X402_RELAYER_KEY": dev.relayer.key.hex(),
        "ENGRAM_X402_SCHEMES": "exact,batch-settlement",
        "ENGRAM_X402_CLAIM_EVERY_SECONDS": "1", "ENGRAM_X402_CLAIM_MIN_USD": "0.000001",
        "ENGRAM_X402_SETTLE_AFTER_SECONDS": "0",
    }  # fmt: skip
    log = tmp_path / "serve.log"
    block = dev.w3.eth.block_number
    dev.rpc("evm_setAutomine", [False])
    try:
        proc, _ = start_serve(tmp_path, log, **env)
        try:
            await wait_for(lambda: pending_tx_of(database_url, payer))
            await wait_for(lambda: mempool(dev))
        finally:
            proc.kill()  # SIGKILL, the claim in flight
        assert proc.wait(timeout=30) != 0
        dev.rpc("evm_mine", [])
    finally:
        dev.rpc("evm_setAutomine", [True])
    [claim] = await claims_of(database_url, payer)
    assert claim["status"] == "pending"  # the process never heard back
    assert on_chain(dev, payer) == (payer.deposit, 5 * PRICE)  # yet it is on chain

    proc, _ = start_serve(tmp_path, log, **env)
    try:
        await wait_for(lambda: settled(database_url, payer))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    [claim] = await claims_of(database_url, payer)
    assert (claim["status"], int(claim["cumulative"])) == ("confirmed", 5 * PRICE)
    assert claims_on_chain(dev, payer, block) == [5 * PRICE]  # claimed once
    assert on_chain(dev, payer) == (payer.deposit, 5 * PRICE)  # every voucher, once
    channel = await channel_of(database_url, payer)
    assert (int(channel["charged"]), int(channel["total_claimed"])) == (5 * PRICE, 5 * PRICE)
    vouchers = await rows(
        database_url, "SELECT charged_after FROM channel_vouchers WHERE wallet = $1", payer.wallet
    )
    assert sorted(int(v["charged_after"]) for v in vouchers) == [n * PRICE for n in range(1, 6)]
    assert "Traceback" not in log.read_text()


async def pending_tx_of(database_url: str, payer: Payer) -> bool:
    return any(c["status"] == "pending" for c in await claims_of(database_url, payer))


async def settled(database_url: str, payer: Payer) -> bool:
    return any(c["settled_at"] is not None for c in await claims_of(database_url, payer))


async def mempool(dev: DevChain) -> bool:
    status = dev.rpc("txpool_status", [])
    return (
        int(status["pending"], 16) > 0
        if isinstance(status["pending"], str)
        else (status["pending"] > 0)
    )


async def test_a_chain_read_begun_before_a_top_up_was_mined_never_undoes_it(
    paid: AsyncTestClient[Litestar], dev: DevChain, pool: asyncpg.Pool, database_url: str
) -> None:
    """The claimer reads a channel, a top-up is settled and recorded meanwhile, then the stale
    read is written: the row keeps the deposit (the next voucher would otherwise be refused as
    above it). A read begun after the deposit's block is written as usual."""
    payer = await opened(paid, dev, 2)
    row = await channel_of(database_url, payer)
    mined_in = int(row["state_block"])
    assert mined_in == int(dev.w3.eth.get_transaction_receipt(row["deposit_tx"])["blockNumber"])
    balance, claimed = on_chain(dev, payer)
    stale = repository.ChainState(balance - 1, claimed, 0, 0, block=mined_in - 1)
    async with pool.acquire() as conn:
        assert await repository.refresh_channel(conn, payer.wallet, payer.channel_id, stale) is None
    assert int((await channel_of(database_url, payer))["balance"]) == balance
    fresh = repository.ChainState(balance, claimed, 7, 0, block=mined_in + 1)
    async with pool.acquire() as conn:
        written = await repository.refresh_channel(conn, payer.wallet, payer.channel_id, fresh)
    assert written is not None
    assert (int(written["withdraw_requested_at"]), int(written["state_block"])) == (7, mined_in + 1)


def test_settles_wait_for_an_hour_or_a_batch_of_claims() -> None:
    """A settle per claim would be a transaction per claim: a receiver's claims are swept once
    the oldest has waited settle_after_seconds, or a claim batch's worth is waiting."""
    from app.payments.claimer import CLAIMS_PER_TRANSACTION, ClaimPolicy, settle_due

    policy = ClaimPolicy(1, 3600, 86_400, 120, settle_after_seconds=3600)
    young = [{"idle_seconds": 5.0}, {"idle_seconds": 3599.0}]
    assert not settle_due(young, policy)  # type: ignore[arg-type]
    assert settle_due([*young, {"idle_seconds": 3600.0}], policy)  # type: ignore[arg-type]
    batch = [{"idle_seconds": 1.0}] * CLAIMS_PER_TRANSACTION
    assert settle_due(batch, policy)  # type: ignore[arg-type]
    assert settle_due(young, ClaimPolicy(1, 3600, 86_400, 120))  # type: ignore[arg-type]
