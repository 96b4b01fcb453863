"""x402 on two networks at once (ENGRAM_X402_NETWORKS), on two dev chains: Base's (8453, the
default network) and Arbitrum's (42161). The 402 offers each network's schemes; a payment on
either settles on its own chain only (its own token, relayer or facilitator, channels); a proof
made for one network and sent naming the other is refused as such, with nothing done; the
reconciler checks a pending payment on its own network's chain; the settings are checked at
start."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient
from x402 import x402ClientSync
from x402.http import x402HTTPClientSync
from x402.http.utils import decode_payment_required_header, decode_payment_response_header
from x402.mechanisms.evm.batch_settlement.client import BatchSettlementEvmScheme
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner

from app.asgi import create_app
from app.config import ExtraNetwork, Settings, X402Settings
from app.dev.chain import DevChain
from app.payments.claimer import Claimer, ClaimPolicy
from app.payments.network import configured_networks
from app.payments.reconcile import Reconciler, chain_readers
from app.payments.service import other_rails
from tests.support.api import auth
from tests.support.db import count_memories
from tests.support.facilitator_wire import LocalFacilitatorServer
from tests.support.settings import changed
from tests.support.x402 import paid_only, sign_proof

PRICE = 5_000  # a store, $0.005 in USDC atomic units
BASE, ARBITRUM = "eip155:8453", "eip155:42161"
ARBITRUM_PAY_TO = str(Account.create().address)  # ENGRAM_X402_ARBITRUM_PAY_TO


@pytest.fixture(scope="module")
def dev(chain: DevChain) -> DevChain:
    chain.install_batch_settlement()
    return chain


@pytest.fixture(scope="module")
def arbitrum() -> Iterator[DevChain]:
    """A second anvil chain, with Arbitrum's chain id and USDC at Arbitrum's address."""
    with DevChain(chain_id=42161) as second:
        second.install_usdc()
        second.install_batch_settlement()
        yield second


def on_arbitrum(arbitrum: DevChain, **values: Any) -> ExtraNetwork:
    """Arbitrum as ENGRAM_X402_NETWORKS=arbitrum with ENGRAM_X402_ARBITRUM_* would set it."""
    return ExtraNetwork(
        "arbitrum", rpc_url=arbitrum.rpc_url, relayer_key=arbitrum.relayer.key.hex(), **values
    )


@pytest.fixture(scope="module")
def two_networks(settings: Settings, dev: DevChain, arbitrum: DevChain) -> Settings:
    return changed(
        paid_only(settings, dev),
        x402={
            "schemes": "exact,batch-settlement",
            "networks": (on_arbitrum(arbitrum, pay_to=ARBITRUM_PAY_TO),),
        },
    )


@pytest.fixture(scope="module")
async def paid(two_networks: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=create_app(two_networks), timeout=60) as client:
        yield client


@pytest.fixture
def payer(dev: DevChain, arbitrum: DevChain) -> LocalAccount:
    account: LocalAccount = Account.create()
    dev.fund(account.address, 1_000_000, eth_wei=0)
    arbitrum.fund(account.address, 1_000_000, eth_wei=0)
    return account


def stock_client(payer: LocalAccount, network: str, scheme: Any) -> x402HTTPClientSync:
    """x402's stock HTTP client, able to pay on `network` only."""
    return x402HTTPClientSync(x402ClientSync().register(network, scheme(EthAccountSigner(payer))))


async def pay_with(
    client: AsyncTestClient[Litestar], payer: LocalAccount, x402: x402HTTPClientSync
) -> tuple[Any, Any]:
    """A store: its 402, paid by `x402` as it chooses; the answer and the payment sent."""
    body = {"content": f"Paid on one of two networks {uuid.uuid4()}"}
    r = await client.post("/v1/store", json=body, headers=auth(payer))
    assert r.status_code == 402, r.text
    headers, payload = x402.handle_402_response(dict(r.headers), r.content, str(r.url))
    r = await client.post("/v1/store", json=body, headers={**auth(payer), **headers})
    if r.status_code < 400:
        x402.process_payment_result(payload, r.headers.get, r.status_code)
    return r, payload


async def _rows(database_url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def ledger(database_url: str, payer: LocalAccount) -> list[tuple[str, str]]:
    rows = await _rows(
        database_url, "SELECT network, status FROM payments WHERE wallet = $1",
        payer.address.lower(),
    )  # fmt: skip
    return [(r["network"], r["status"]) for r in rows]


# ---- the offer --------------------------------------------------------------------------------


async def test_the_402_lists_one_entry_per_network_and_scheme(
    paid: AsyncTestClient[Litestar], dev: DevChain, arbitrum: DevChain
) -> None:
    r = await paid.post("/v1/store", json={"content": "x"}, headers=auth(Account.create()))
    assert r.status_code == 402
    accepts = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"]).accepts
    assert [(a.network, a.scheme) for a in accepts] == [
        (BASE, "exact"), (BASE, "batch-settlement"),
        (ARBITRUM, "exact"), (ARBITRUM, "batch-settlement"),
    ]  # fmt: skip
    assert [a.asset for a in accepts] == [dev.usdc_address] * 2 + [arbitrum.usdc_address] * 2
    assert dev.usdc_address != arbitrum.usdc_address
    assert {a.amount for a in accepts} == {str(PRICE)}
    assert [a.pay_to for a in accepts[2:]] == [ARBITRUM_PAY_TO] * 2  # its own payTo
    assert accepts[0].pay_to == accepts[1].pay_to != ARBITRUM_PAY_TO
    authorizers = [(a.extra or {})["receiverAuthorizer"] for a in accepts[1::2]]
    assert authorizers == [dev.relayer.address, arbitrum.relayer.address]
    # x402 v1 has no name for Arbitrum: a v1 client is offered Base only
    assert [a["network"] for a in r.json()["accepts"]] == ["base"]
    assert r.json()["error"]["details"]["network"] == BASE  # the default network's


# ---- paying on the second network --------------------------------------------------------------


async def test_a_stock_client_pays_on_the_second_network_and_only_that_chain_moves(
    paid: AsyncTestClient[Litestar], dev: DevChain, arbitrum: DevChain, payer: LocalAccount,
    database_url: str,
) -> None:  # fmt: skip
    base_block = dev.w3.eth.block_number
    r, payload = await pay_with(paid, payer, stock_client(payer, ARBITRUM, ExactEvmClientScheme))
    assert r.status_code == 201, r.text
    assert payload.accepted.network == ARBITRUM
    receipt = decode_payment_response_header(r.headers["PAYMENT-RESPONSE"])
    assert receipt.network == ARBITRUM
    assert arbitrum.w3.eth.get_transaction_receipt(receipt.transaction)["status"] == 1
    pay_to = payload.accepted.pay_to
    assert pay_to == ARBITRUM_PAY_TO
    assert (arbitrum.usdc_balance(payer.address), arbitrum.usdc_balance(pay_to)) == (
        1_000_000 - PRICE, PRICE)  # fmt: skip
    assert (dev.usdc_balance(payer.address), dev.usdc_balance(pay_to)) == (1_000_000, 0)
    assert dev.w3.eth.block_number == base_block  # nothing sent on Base
    assert await ledger(database_url, payer) == [(ARBITRUM, "settled")]
    listed = (await paid.get("/v1/payments", headers=auth(payer))).json()["payments"]
    assert [(p["network"], p["asset"]) for p in listed] == [
        (ARBITRUM, arbitrum.usdc_address.lower())
    ]


async def test_a_channel_on_the_second_network_deposits_and_is_claimed_on_its_escrow(
    paid: AsyncTestClient[Litestar], dev: DevChain, arbitrum: DevChain, payer: LocalAccount,
    database_url: str,
) -> None:  # fmt: skip
    base_block = dev.w3.eth.block_number
    x402 = stock_client(payer, ARBITRUM, BatchSettlementEvmScheme)
    r, payload = await pay_with(paid, payer, x402)
    assert r.status_code == 201, r.text
    assert (payload.accepted.network, payload.payload["type"]) == (ARBITRUM, "deposit")
    deposit = int(payload.payload["deposit"]["amount"])
    assert arbitrum.usdc_balance(payer.address) == 1_000_000 - deposit
    assert arbitrum.usdc_balance(arbitrum.escrow_address) >= deposit
    r, payload = await pay_with(paid, payer, x402)
    assert r.status_code == 201, r.text
    assert payload.payload["type"] == "voucher"
    assert dev.w3.eth.block_number == base_block
    assert dev.usdc_balance(payer.address) == 1_000_000
    [channel] = await _rows(
        database_url, "SELECT network, charged FROM payment_channels WHERE wallet = $1",
        payer.address.lower(),
    )  # fmt: skip
    assert (channel["network"], int(channel["charged"])) == (ARBITRUM, 2 * PRICE)
    # Arbitrum's claimer (one per network with channels, as the app runs them) claims there
    app: Any = paid.app
    [(base, _), (on_arbitrum, channels)] = app.state.payment_gate.x402.all_channels()
    assert (base.caip2, on_arbitrum.caip2) == (BASE, ARBITRUM)
    claim_now = ClaimPolicy(min_unclaimed=1, after_seconds=0, refund_idle_seconds=10**6,
                            reconcile_after_seconds=120)  # fmt: skip
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    assert pool is not None
    try:
        run = await Claimer(channels, ARBITRUM, claim_now).run_once(pool)
    finally:
        await pool.close()
    assert run.claimed >= 1 and run.claim_transactions
    for transaction in run.claim_transactions:
        assert arbitrum.w3.eth.get_transaction_receipt(transaction)["status"] == 1
    channel_id = payload.payload["voucher"]["channelId"]
    _, claimed = arbitrum.escrow().functions.channels(bytes.fromhex(channel_id[2:])).call()
    assert claimed == 2 * PRICE  # on Arbitrum's escrow
    assert dev.w3.eth.block_number == base_block
    listed = (await paid.get("/v1/payments", headers=auth(payer))).json()
    assert [(c["network"], c["total_claimed"]) for c in listed["channels"]] == [
        (ARBITRUM, str(2 * PRICE))
    ]


# ---- a payment for one network, naming the other ------------------------------------------------


async def refused(
    client: AsyncTestClient[Litestar], payer: LocalAccount, headers: dict[str, str], reason: str
) -> None:
    r = await client.post(
        "/v1/store", json={"content": f"Refused {uuid.uuid4()}"}, headers={**auth(payer), **headers}
    )
    assert r.status_code == 402, r.text
    assert r.json()["error"]["details"]["reason"] == reason, r.text


def renamed(payload: Any, network: str) -> dict[str, str]:
    """A stock client's payment, sent naming `network` instead of the one it was made for."""
    proof = payload.model_dump(by_alias=True, exclude_none=True)
    proof["accepted"]["network"] = network
    return {"PAYMENT-SIGNATURE": base64.b64encode(json.dumps(proof).encode()).decode()}


async def test_a_payment_made_for_one_network_and_naming_the_other_is_refused(
    paid: AsyncTestClient[Litestar], dev: DevChain, arbitrum: DevChain, payer: LocalAccount,
    database_url: str,
) -> None:  # fmt: skip
    r = await paid.post("/v1/store", json={"content": "x"}, headers=auth(payer))
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    on_base = required.accepts[0].model_dump(by_alias=True)
    blocks = (dev.w3.eth.block_number, arbitrum.w3.eth.block_number)
    # `exact`, signed for Base's token: as Arbitrum's, as a network not taken, as v1's unnamed
    await refused(paid, payer, dict([sign_proof(payer, on_base, network=ARBITRUM)]),
                  "network_mismatch")  # fmt: skip
    await refused(paid, payer, dict([sign_proof(payer, on_base, network="eip155:1")]),
                  "invalid_network")  # fmt: skip
    await refused(paid, payer, dict([sign_proof(payer, on_base, version=1, network="arbitrum")]),
                  "invalid_network")  # fmt: skip
    # a channel deposit on Base's escrow, as Arbitrum's
    x402 = x402ClientSync().register(BASE, BatchSettlementEvmScheme(EthAccountSigner(payer)))
    deposit = x402.create_payment_payload(required)
    assert (deposit.accepted.network, deposit.payload["type"]) == (BASE, "deposit")
    await refused(paid, payer, renamed(deposit, ARBITRUM),
                  "invalid_batch_settlement_evm_network_mismatch")  # fmt: skip
    # nothing was done: no transaction on either chain, no ledger row, channel or memory
    assert (dev.w3.eth.block_number, arbitrum.w3.eth.block_number) == blocks
    assert dev.usdc_balance(payer.address) == arbitrum.usdc_balance(payer.address) == 1_000_000
    assert await ledger(database_url, payer) == []
    wallet = payer.address.lower()
    assert (
        await _rows(database_url, "SELECT 1 FROM payment_channels WHERE wallet = $1", wallet) == []
    )
    assert await count_memories(database_url, payer.address) == 0
    # the same payments, naming the network they were made for, pay
    r, _ = await pay_with(paid, payer, stock_client(payer, BASE, ExactEvmClientScheme))
    assert r.status_code == 201, r.text


# ---- the reconciler ----------------------------------------------------------------------------


class SettlesThenFails:
    """Arbitrum's facilitator settling for real, then never answering."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def verify(self, *args: Any) -> Any:
        return self.inner.verify(*args)

    def get_supported(self) -> Any:
        return self.inner.get_supported()

    def settle(self, *args: Any) -> Any:
        receipt = self.inner.settle(*args)
        assert receipt.success, receipt
        raise ConnectionAbortedError("the facilitator went away after settling")


async def test_the_reconciler_checks_a_pending_payment_on_its_own_network(
    settings: Settings, dev: DevChain, arbitrum: DevChain, payer: LocalAccount,
    database_url: str,
) -> None:  # fmt: skip
    relayer = arbitrum.relayer.key.hex()
    with LocalFacilitatorServer(relayer, arbitrum.rpc_url, ARBITRUM) as remote:
        remote.facilitator = SettlesThenFails(remote.facilitator)
        # Arbitrum settled by its own facilitator; its RPC URL serves the reconciler
        extra = ExtraNetwork("arbitrum", facilitator_url=remote.url, rpc_url=arbitrum.rpc_url)
        configured = changed(paid_only(settings, dev), x402={"networks": (extra,)})
        async with AsyncTestClient(app=create_app(configured), timeout=60) as client:
            x402 = stock_client(payer, ARBITRUM, ExactEvmClientScheme)
            r, _ = await pay_with(client, payer, x402)
        assert r.status_code == 503, r.text
    assert arbitrum.usdc_balance(payer.address) == 1_000_000 - PRICE  # it moved, on Arbitrum
    assert await ledger(database_url, payer) == [(ARBITRUM, "pending")]
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    assert pool is not None
    try:
        readers = chain_readers(configured.x402)
        assert set(readers) == {BASE, ARBITRUM}
        # with no reader for Arbitrum nothing can tell: the row waits, never dropped
        await Reconciler({BASE: readers[BASE]}, after_seconds=0).run_once(pool)
        assert await ledger(database_url, payer) == [(ARBITRUM, "pending")]
        # asked on Arbitrum's chain, where the nonce was used (on Base's, Arbitrum's token
        # address holds no contract: the read would fail, and the row would wait)
        await Reconciler(readers, after_seconds=0).run_once(pool)
    finally:
        await pool.close()
    assert await ledger(database_url, payer) == [(ARBITRUM, "redeemable")]


# ---- the settings, checked at start -------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"ENGRAM_X402_NETWORKS": "Arbitrum"}, "a network name such as arbitrum"),
        ({"ENGRAM_X402_NETWORKS": "arbitrum,arbitrum"}, "lists a network twice"),
        (
            {"ENGRAM_X402_NETWORKS": "arbitrum", "ENGRAM_X402_ARBITRUM_RPC_ULR": "http://x"},
            "RPC_ULR is not a network setting",
        ),
        ({"ENGRAM_X402_POLYGON_RPC_URL": "http://x"}, "does not list the network 'polygon'"),
        ({"ENGRAM_X402_BASE_PAY_TO": "0x" + "1" * 40}, "does not list the network 'base'"),
        (
            {"ENGRAM_X402_NETWORKS": "arbitrum", "ENGRAM_X402_ARBITRUM_ASSET_DECIMALS": "six"},
            "ENGRAM_X402_ARBITRUM_ASSET_DECIMALS must be an integer",
        ),
    ],
)
def test_misspelt_network_settings_stop_the_start(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        Settings.from_env(environ)


def test_the_network_variables_are_read_per_network() -> None:
    x402 = Settings.from_env({
        "ENGRAM_X402_NETWORKS": "arbitrum, arbitrum-sepolia",
        "ENGRAM_X402_ARBITRUM_RPC_URL": "http://arbitrum",
        "ENGRAM_X402_ARBITRUM_SEPOLIA_FACILITATOR_URL": "http://facilitator",
        "ENGRAM_X402_ARBITRUM_SEPOLIA_RELAYER_KEY": "0xkey",
    }).x402  # fmt: skip
    assert x402.networks == (
        ExtraNetwork("arbitrum", rpc_url="http://arbitrum"),
        ExtraNetwork("arbitrum-sepolia", facilitator_url="http://facilitator", relayer_key="0xkey"),
    )
    assert "0xkey" not in repr(x402)


PAY_TO = "0x" + "2" * 40
KEY = "0x" + "3" * 64


@pytest.mark.parametrize(
    ("x402", "message"),
    [
        (X402Settings(networks=(ExtraNetwork("base"),)), "'base', the default network"),
        (X402Settings(networks=(ExtraNetwork("zksync"),)), "ENGRAM_X402_NETWORKS names 'zksync'"),
        (
            X402Settings(networks=(ExtraNetwork("arbitrum", asset="0x" + "4" * 40),)),
            "ENGRAM_X402_ARBITRUM_ASSET needs ENGRAM_X402_ARBITRUM_ASSET_NAME",
        ),
        (
            X402Settings(
                networks=(
                    ExtraNetwork(
                        "arbitrum",
                        asset="0x" + "4" * 40,
                        asset_name="T",
                        asset_version="1",
                        asset_decimals=18,
                    ),
                )
            ),
            "the token on arbitrum has 18 decimals",
        ),
    ],
)
def test_a_network_that_cannot_be_named_stops_the_start(x402: X402Settings, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        configured_networks(x402)


@pytest.mark.parametrize(
    ("x402", "default_settles", "message"),
    [
        (
            X402Settings(networks=(ExtraNetwork("arbitrum", rpc_url="http://a", relayer_key=KEY),)),
            False,
            "set that one up first",
        ),
        (
            X402Settings(pay_to=PAY_TO, networks=(ExtraNetwork("arbitrum"),)),
            True,
            "lists arbitrum, which nothing settles: set ENGRAM_X402_ARBITRUM_FACILITATOR_URL",
        ),
        (
            X402Settings(
                pay_to=PAY_TO,
                schemes="exact,batch-settlement",
                networks=(ExtraNetwork("arbitrum", facilitator_url="http://f"),),
            ),
            True,
            "set ENGRAM_X402_ARBITRUM_RPC_URL",
        ),
    ],
)
def test_a_network_that_cannot_be_settled_stops_the_start(
    x402: X402Settings, default_settles: bool, message: str
) -> None:
    with pytest.raises(SystemExit, match=message):
        other_rails(x402, configured_networks(x402), default_settles)


def test_a_listed_network_takes_the_default_pay_to_and_relayer_key() -> None:
    x402 = X402Settings(
        pay_to=PAY_TO, relayer_key=KEY,
        networks=(ExtraNetwork("arbitrum", rpc_url="http://127.0.0.1:9"),),
    )  # fmt: skip
    [rail] = other_rails(x402, configured_networks(x402), True)
    assert (rail.network.caip2, rail.pay_to) == (ARBITRUM, PAY_TO)
    assert rail.facilitator.relayer_address == Account.from_key(KEY).address
