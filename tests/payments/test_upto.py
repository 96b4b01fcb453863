"""x402's `upto` scheme on variable-cost routes (ENGRAM_X402_SCHEMES=exact,upto) on the dev chain:
x402's stock client signs the route's price as a maximum; Engram settles what the call really
cost (per item stored, per 1k LLM tokens), through Permit2 and the upto proxy. A call that would
cost more than the maximum is refused before any work."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
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
from x402.mechanisms.evm.constants import PERMIT2_ADDRESS
from x402.mechanisms.evm.signers import EthAccountSigner
from x402.mechanisms.evm.upto import UptoEvmClientScheme

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from app.dev.usdc import token_abi
from app.payments.reconcile import ChainReader
from tests.support.api import auth
from tests.support.chain_calls import account_with_gas, transact
from tests.support.settings import changed
from tests.support.x402 import paid_only

NETWORK = "eip155:8453"
BATCH_MAXIMUM = 40_000  # a batch store's price, $0.04: the most an upto payment signs for
PER_ITEM = 400  # $0.0004 an item
PER_1K_TOKENS = 2_000  # $0.002


@pytest.fixture(scope="module")
def dev(chain: DevChain) -> DevChain:
    chain.install_upto_proxy()
    return chain


@pytest.fixture(scope="module")
def upto_settings(settings: Settings, dev: DevChain) -> Settings:
    return changed(paid_only(settings, dev), x402={"schemes": "exact,upto"})


@pytest.fixture(scope="module")
async def paid(upto_settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=create_app(upto_settings), timeout=60) as client:
        yield client


@pytest.fixture
def payer(dev: DevChain) -> LocalAccount:
    """A payer who approved Permit2 once (the one transaction it pays gas for)."""
    account = account_with_gas(dev, usdc=1_000_000)
    token = dev.w3.eth.contract(address=dev.usdc_address, abi=token_abi())
    transact(dev, account, token.functions.approve(PERMIT2_ADDRESS, 2**256 - 1))
    return account


def batch(n: int) -> dict[str, Any]:
    return {"memories": [{"content": f"Upto memory {i} {uuid.uuid4()}"} for i in range(n)]}


class Payer:
    """x402's stock HTTP client with only its upto scheme registered."""

    def __init__(self, client: AsyncTestClient[Litestar], account: LocalAccount) -> None:
        self.client = client
        self.account = account
        scheme = UptoEvmClientScheme(EthAccountSigner(account))
        self.x402 = x402HTTPClientSync(x402ClientSync().register(NETWORK, scheme))

    async def pay(self, path: str, body: dict[str, Any]) -> tuple[Any, dict[str, str]]:
        r = await self.client.post(path, json=body, headers=auth(self.account))
        assert r.status_code == 402, r.text
        headers, _ = self.x402.handle_402_response(dict(r.headers), r.content, str(r.url))
        r = await self.client.post(path, json=body, headers={**auth(self.account), **headers})
        return r, headers


async def ledger_rows(database_url: str, payer: LocalAccount) -> list[Any]:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch(
            "SELECT * FROM payments WHERE wallet = $1 ORDER BY created_at",
            payer.address.lower(),
        )
    finally:
        await conn.close()


async def memory_count(database_url: str, payer: LocalAccount) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM memories WHERE user_id = $1", payer.address.lower()
            )
        )
    finally:
        await conn.close()


def reason_of(r: Any) -> str:
    return str(r.json()["error"]["details"]["reason"])


# ---- the offer --------------------------------------------------------------------------------


async def test_metered_routes_offer_upto_beside_exact(
    paid: AsyncTestClient[Litestar], dev: DevChain
) -> None:
    r = await paid.post("/v1/store/batch", json=batch(1), headers=auth(Account.create()))
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    exact, upto = required.accepts
    assert (exact.scheme, upto.scheme) == ("exact", "upto")
    assert upto.amount == exact.amount == str(BATCH_MAXIMUM)
    assert (upto.pay_to, upto.asset) == (exact.pay_to, exact.asset)
    assert (upto.extra or {})["facilitatorAddress"] == dev.relayer.address

    for path, body in [("/v1/memories/extract", {"messages": [{"role": "user", "content": "x"}]})]:
        r = await paid.post(path, json=body, headers=auth(Account.create()))
        assert [a.scheme for a in decode_payment_required_header(
            r.headers["PAYMENT-REQUIRED"]).accepts] == ["exact", "upto"]  # fmt: skip
    # a fixed-price route is not metered: exact only
    r = await paid.post("/v1/store", json={"content": "x"}, headers=auth(Account.create()))
    accepts = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"]).accepts
    assert [a.scheme for a in accepts] == ["exact"]


async def test_offered_by_default_where_engram_settles_and_opted_out_by_listing(
    settings: Settings, dev: DevChain
) -> None:
    for schemes, offered in [
        ("auto", ["exact", "batch-settlement", "upto"]),
        ("exact,batch-settlement", ["exact", "batch-settlement"]),
        ("exact", ["exact"]),
    ]:
        app = create_app(changed(paid_only(settings, dev), x402={"schemes": schemes}))
        async with AsyncTestClient(app=app) as client:
            r = await client.post("/v1/store/batch", json=batch(1), headers=auth(Account.create()))
        accepts = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"]).accepts
        assert [a.scheme for a in accepts] == offered, schemes


def test_listed_without_a_local_relayer_stops_the_start(settings: Settings) -> None:
    """A remote facilitator cannot settle a permit that names Engram's relayer."""
    remote = changed(
        settings,
        x402={"schemes": "exact,upto", "pay_to": "0x" + "11" * 20,
              "facilitator_url": "http://127.0.0.1:9/facilitator"},
    )  # fmt: skip
    with pytest.raises(SystemExit, match="upto"):
        create_app(remote)


# ---- paying the real cost -----------------------------------------------------------------------


async def test_a_batch_pays_per_item_stored(
    paid: AsyncTestClient[Litestar], dev: DevChain, payer: LocalAccount,
    upto_settings: Settings, database_url: str,
) -> None:  # fmt: skip
    pay_to = upto_settings.x402.pay_to
    assert pay_to is not None
    r, _ = await Payer(paid, payer).pay("/v1/store/batch", batch(3))
    assert r.status_code == 201, r.text
    assert r.json()["count"] == 3
    receipt = decode_payment_response_header(r.headers["PAYMENT-RESPONSE"])
    assert receipt.success and receipt.transaction
    assert dev.usdc_balance(pay_to) == 3 * PER_ITEM
    assert dev.usdc_balance(payer.address) == 1_000_000 - 3 * PER_ITEM
    (row,) = await ledger_rows(database_url, payer)
    assert (row["scheme"], int(row["amount"]), row["status"]) == ("upto", 3 * PER_ITEM, "settled")


async def test_an_extraction_pays_per_1k_tokens(
    paid: AsyncTestClient[Litestar], dev: DevChain, payer: LocalAccount, database_url: str
) -> None:
    """Offline (no LLM configured) extraction reports no tokens: it costs one unit."""
    body = {"messages": [{"role": "user", "content": "I moved to Lisbon in May."}]}
    r, _ = await Payer(paid, payer).pay("/v1/memories/extract", body)
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens_used"]
    (row,) = await ledger_rows(database_url, payer)
    assert int(row["amount"]) == PER_1K_TOKENS * max(1, -(-tokens // 1000))
    assert dev.usdc_balance(payer.address) == 1_000_000 - int(row["amount"])


async def test_a_call_costing_more_than_signed_is_refused_before_its_work(
    settings: Settings, dev: DevChain, payer: LocalAccount, database_url: str
) -> None:
    """Items at $0.02: three cost $0.06, above the $0.04 maximum. Nothing is stored, nothing
    moves, and the permit stays unused (it pays a smaller batch afterwards)."""
    dear = changed(
        paid_only(settings, dev),
        x402={
            "schemes": "exact,upto",
            "unit_prices_usd": {"item": Decimal("0.02"), "1k_tokens": Decimal("0.002")},
        },
    )
    async with AsyncTestClient(app=create_app(dear), timeout=60) as client:
        r, headers = await Payer(client, payer).pay("/v1/store/batch", batch(3))
        assert r.status_code == 402, r.text
        assert reason_of(r) == "upto_amount_exceeds_permitted"
        assert await memory_count(database_url, payer) == 0
        assert await ledger_rows(database_url, payer) == []
        assert dev.usdc_balance(payer.address) == 1_000_000

        two = batch(2)
        r = await client.post("/v1/store/batch", json=two, headers={**auth(payer), **headers})
        assert r.status_code == 201, r.text
        assert dev.usdc_balance(payer.address) == 1_000_000 - 2 * 20_000


# ---- refusals ------------------------------------------------------------------------------------


def forged(headers: dict[str, str], change: Any) -> dict[str, str]:
    """The same payment header with its JSON changed by `change` (a broken signature or not)."""
    ((name, value),) = headers.items()
    data = json.loads(base64.b64decode(value))
    change(data)
    return {name: base64.b64encode(json.dumps(data).encode()).decode()}


async def test_refusals_each_with_its_reason(
    paid: AsyncTestClient[Litestar], dev: DevChain, payer: LocalAccount, database_url: str
) -> None:
    p = Payer(paid, payer)
    r = await paid.post("/v1/store/batch", json=batch(1), headers=auth(payer))
    headers, _ = p.x402.handle_402_response(dict(r.headers), r.content, str(r.url))

    def permit(data: dict[str, Any]) -> dict[str, Any]:
        return data["payload"]["permit2Authorization"]  # type: ignore[no-any-return]

    cases = {
        "upto_facilitator_mismatch": lambda d: permit(d)["witness"].update(
            facilitator="0x" + "42" * 20
        ),
        "invalid_network": lambda d: d["accepted"].update(network="eip155:1"),
        "invalid_permit2_spender": lambda d: permit(d).update(spender="0x" + "43" * 20),
        "invalid_upto_evm_payload_amount_mismatch": lambda d: permit(d)["permitted"].update(
            amount="1"
        ),
        "invalid_payload": lambda d: permit(d).update(nonce="not a number"),
    }
    for reason, change in cases.items():
        r = await paid.post(
            "/v1/store/batch", json=batch(1), headers={**auth(payer), **forged(headers, change)}
        )
        assert r.status_code == 402, (reason, r.text)
        assert reason_of(r).lower().startswith(reason.lower()), (reason, r.text)
    assert await memory_count(database_url, payer) == 0
    assert dev.usdc_balance(payer.address) == 1_000_000


async def test_a_permit_pays_once(
    paid: AsyncTestClient[Litestar], payer: LocalAccount, database_url: str
) -> None:
    """The same permit with the same request gets its first answer; with another, a refusal."""
    body = batch(2)
    r, headers = await Payer(paid, payer).pay("/v1/store/batch", body)
    assert r.status_code == 201
    again = await paid.post("/v1/store/batch", json=body, headers={**auth(payer), **headers})
    assert again.status_code == 201
    assert again.headers.get("X-Idempotent-Replay") == "true"
    assert again.json()["ids"] == r.json()["ids"]
    other = await paid.post("/v1/store/batch", json=batch(2), headers={**auth(payer), **headers})
    assert other.status_code == 402
    assert len(await ledger_rows(database_url, payer)) == 1
    assert await memory_count(database_url, payer) == 2


# ---- reconciliation --------------------------------------------------------------------------------


async def test_the_reconciler_reads_permit2_nonces(dev: DevChain, payer: LocalAccount) -> None:
    """An upto row's nonce is a Permit2 nonce: used once the permit settled, not before."""
    reader = ChainReader(dev.rpc_url)
    nonce = "0x" + "00" * 31 + "07"
    assert await reader.permit2_nonce_used(payer.address, nonce) is False
    permit2 = dev.w3.eth.contract(
        address=PERMIT2_ADDRESS,
        abi=[{"name": "invalidateUnorderedNonces", "type": "function",
              "stateMutability": "nonpayable", "outputs": [],
              "inputs": [{"name": "wordPos", "type": "uint256"},
                         {"name": "mask", "type": "uint256"}]}],
    )  # fmt: skip
    transact(dev, payer, permit2.functions.invalidateUnorderedNonces(0, 1 << 7))
    assert await reader.permit2_nonce_used(payer.address, nonce) is True
    # a pending row asks where its scheme keeps its nonce: Permit2 for upto, the token for exact
    row = {"scheme": "upto", "payer": payer.address, "nonce": nonce, "asset": dev.usdc_address}
    assert await reader.spent(row) is True  # type: ignore[arg-type]
    assert await reader.spent({**row, "scheme": "exact"}) is False  # type: ignore[arg-type]
