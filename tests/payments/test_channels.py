"""x402 payment channels (batch-settlement, offered by default with a relayer key) on the dev
chain: x402's own client deposits once, then pays with vouchers that touch no chain; each voucher
Engram refuses is refused with its own reason and changes nothing; vouchers on one channel take
turns."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient
from x402 import x402ClientSync
from x402.extensions.payment_identifier import (
    PAYMENT_IDENTIFIER,
    append_payment_identifier_to_extensions,
    declare_payment_identifier_extension,
)
from x402.http import x402HTTPClientSync
from x402.http.utils import decode_payment_required_header, decode_payment_response_header
from x402.mechanisms.evm.batch_settlement.client import (
    BatchSettlementEvmScheme,
)
from x402.mechanisms.evm.batch_settlement.client.voucher import sign_voucher
from x402.mechanisms.evm.batch_settlement.constants import MIN_WITHDRAW_DELAY
from x402.mechanisms.evm.batch_settlement.types import ChannelConfig
from x402.mechanisms.evm.batch_settlement.utils import compute_channel_id
from x402.mechanisms.evm.signers import EthAccountSigner, EthAccountSignerWithRPC

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from tests.support.api import auth
from tests.support.settings import changed
from tests.support.x402 import paid_only, paid_store, reference_payment

PRICE = 5_000  # a store, $0.005 in USDC atomic units
NETWORK = "eip155:8453"


@pytest.fixture(scope="module")
def dev(chain: DevChain) -> DevChain:
    chain.install_batch_settlement()
    return chain


@pytest.fixture(scope="module")
def channel_settings(settings: Settings, dev: DevChain) -> Settings:
    """Channels on; the claimer's timer quiet (its look at the chain would undo the withdrawal
    these tests write into a channel's row)."""
    return changed(
        paid_only(settings, dev),
        x402={"schemes": "exact,batch-settlement", "claim_every_seconds": 10**9},
    )


@pytest.fixture(scope="module")
async def paid(channel_settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=create_app(channel_settings), timeout=60) as client:
        yield client


@pytest.fixture
def payer(dev: DevChain) -> LocalAccount:
    account: LocalAccount = Account.create()
    dev.fund(account.address, 1_000_000, eth_wei=0)  # the payer never pays gas
    return account


class Payer:
    """x402's stock HTTP client with its batch-settlement scheme, on the in-process app."""

    def __init__(
        self, client: AsyncTestClient[Litestar], account: LocalAccount, rpc_url: str = ""
    ) -> None:
        self.client = client
        self.account = account
        # with an RPC URL, the client can read the chain: what its resync checks against
        signer = EthAccountSignerWithRPC(account, rpc_url) if rpc_url else EthAccountSigner(account)
        scheme = BatchSettlementEvmScheme(signer)
        self.x402 = x402HTTPClientSync(x402ClientSync().register(NETWORK, scheme))
        self.last_payload: Any = None

    async def store(self, content: str | None = None) -> Any:
        body = {"content": content or f"Channel memory {uuid.uuid4()}"}
        r = await self.client.post("/v1/store", json=body, headers=auth(self.account))
        assert r.status_code == 402, r.text
        headers, payload = self.x402.handle_402_response(dict(r.headers), r.content, str(r.url))
        self.last_payload = payload
        r = await self.client.post(
            "/v1/store", json=body, headers={**auth(self.account), **headers}
        )
        self.x402.process_payment_result(payload, r.headers.get, r.status_code)
        return r


async def _one(database_url: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchrow(sql, *args)
    finally:
        await conn.close()


async def channel_row(database_url: str, payer: LocalAccount) -> Any:
    return await _one(
        database_url,
        "SELECT * FROM payment_channels WHERE wallet = $1",
        payer.address.lower(),
    )


async def voucher_count(database_url: str, payer: LocalAccount) -> int:
    row = await _one(
        database_url,
        "SELECT count(*) AS n FROM channel_vouchers WHERE wallet = $1",
        payer.address.lower(),
    )
    return int(row["n"])


# ---- the offer --------------------------------------------------------------------------------


async def offered(app_settings: Settings) -> list[str]:
    async with AsyncTestClient(app=create_app(app_settings)) as client:
        r = await client.post("/v1/store", json={"content": "x"}, headers=auth(Account.create()))
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    return [a.scheme for a in required.accepts]


async def test_on_by_default_with_a_relayer_key_and_exact_opts_out(
    settings: Settings, dev: DevChain
) -> None:
    """A server that settles itself (relayer key over an RPC URL) offers channels unless
    ENGRAM_X402_SCHEMES=exact; one paid through a remote facilitator alone offers exact."""
    assert await offered(paid_only(settings, dev)) == ["exact", "batch-settlement"]
    opted_out = changed(paid_only(settings, dev), x402={"schemes": "exact"})
    assert await offered(opted_out) == ["exact"]
    remote = changed(paid_only(settings, dev), x402={
        "relayer_key": None, "facilitator_url": "http://127.0.0.1:9",
    })  # fmt: skip
    assert await offered(remote) == ["exact"]


async def test_every_paid_route_offers_both_schemes(
    paid: AsyncTestClient[Litestar], dev: DevChain
) -> None:
    r = await paid.post("/v1/store", json={"content": "x"}, headers=auth(Account.create()))
    assert r.status_code == 402
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    exact, batch = required.accepts
    assert (exact.scheme, batch.scheme) == ("exact", "batch-settlement")
    assert (batch.amount, batch.pay_to, batch.asset) == (exact.amount, exact.pay_to, exact.asset)
    extra = batch.extra or {}
    assert extra["receiverAuthorizer"] == dev.relayer.address
    assert extra["withdrawDelay"] == MIN_WITHDRAW_DELAY
    assert int(extra["minDeposit"]) >= PRICE
    assert [a["scheme"] for a in r.json()["accepts"]] == ["exact"]  # v1 knows no channels


# ---- paying ------------------------------------------------------------------------------------


async def test_exact_still_pays_with_channels_on(
    paid: AsyncTestClient[Litestar], payer: LocalAccount
) -> None:
    r, _ = await paid_store(paid, payer, {"content": f"Exact {uuid.uuid4()}"})
    assert decode_payment_response_header(r.headers["PAYMENT-RESPONSE"]).transaction
    body = {"content": f"Reference {uuid.uuid4()}"}
    r = await paid.post("/v1/store", json=body, headers=auth(payer))
    headers = await reference_payment(payer, r)  # x402's client with the exact scheme only
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), **headers})
    assert r.status_code == 201, r.text


async def test_a_stock_client_deposits_once_then_pays_50_calls_with_vouchers(
    paid: AsyncTestClient[Litestar], dev: DevChain, payer: LocalAccount, database_url: str
) -> None:
    stock = Payer(paid, payer)
    first_block = dev.w3.eth.block_number
    r = await stock.store()
    assert r.status_code == 201, r.text
    ids = {r.json()["id"]}
    assert stock.last_payload.payload["type"] == "deposit"
    receipt = decode_payment_response_header(r.headers["PAYMENT-RESPONSE"])
    assert receipt.transaction  # the deposit's
    deposit = int(stock.last_payload.payload["deposit"]["amount"])
    for call in range(2, 52):
        r = await stock.store()
        assert r.status_code == 201, r.text
        ids.add(r.json()["id"])
        assert stock.last_payload.payload["type"] == "voucher"
        receipt = decode_payment_response_header(r.headers["PAYMENT-RESPONSE"])
        assert receipt.transaction == ""
        assert receipt.extra is not None
        assert receipt.extra["channelState"]["chargedCumulativeAmount"] == str(call * PRICE)
        assert receipt.extra["chargedAmount"] == str(PRICE)
    assert dev.w3.eth.block_number == first_block + 1  # one transaction: the deposit
    channel = await channel_row(database_url, payer)
    assert (int(channel["charged"]), int(channel["balance"])) == (51 * PRICE, deposit)
    assert await voucher_count(database_url, payer) == 51
    memories = await _one(
        database_url, "SELECT count(*) AS n FROM memories WHERE user_id = $1",
        payer.address.lower(),
    )  # fmt: skip
    # every call's work was done; two random contents may embed as near-duplicates and merge
    assert memories["n"] == len(ids) >= 50


# ---- refusals: each its own reason, nothing stored ---------------------------------------------


async def opened(paid: AsyncTestClient[Litestar], payer: LocalAccount) -> Payer:
    stock = Payer(paid, payer)
    r = await stock.store()
    assert r.status_code == 201, r.text
    return stock


def voucher(
    stock: Payer, cumulative: int, *, signer: LocalAccount | None = None,
    config: dict[str, Any] | None = None, channel_id: str | None = None,
    network: str = NETWORK, claimed_id: str | None = None, payment_id: str | None = None,
    **payload: Any,
) -> dict[str, str]:  # fmt: skip
    """A voucher proof on the payer's channel, with one thing changed."""
    base = stock.last_payload.model_dump(by_alias=True, exclude_none=True)
    cfg = {**base["payload"]["channelConfig"], **(config or {})}
    cid = channel_id or compute_channel_id(ChannelConfig.from_dict(cfg), NETWORK)
    signed = sign_voucher(EthAccountSigner(signer or stock.account), cid, cumulative, NETWORK)
    if claimed_id is not None:
        signed.channel_id = claimed_id
    base["accepted"]["network"] = network
    if payment_id is not None:
        declared = {PAYMENT_IDENTIFIER: declare_payment_identifier_extension()}
        base["extensions"] = append_payment_identifier_to_extensions(declared)
        base["extensions"][PAYMENT_IDENTIFIER]["info"]["id"] = payment_id
    base["payload"] = {
        "type": "voucher", "channelConfig": cfg, "voucher": signed.to_dict(), **payload,
    }  # fmt: skip
    return {"PAYMENT-SIGNATURE": base64.b64encode(json.dumps(base).encode()).decode()}


async def refused(stock: Payer, headers: dict[str, str], reason: str, database_url: str) -> None:
    before = await voucher_count(database_url, stock.account)
    charged = (await channel_row(database_url, stock.account))["charged"]
    r = await stock.client.post(
        "/v1/store", json={"content": f"Refused {uuid.uuid4()}"},
        headers={**auth(stock.account), **headers},
    )  # fmt: skip
    assert r.status_code == 402, r.text
    assert r.json()["error"]["details"]["reason"] == reason, r.text
    assert await voucher_count(database_url, stock.account) == before
    assert (await channel_row(database_url, stock.account))["charged"] == charged


async def test_each_bad_voucher_is_refused_with_its_own_reason(
    paid: AsyncTestClient[Litestar], dev: DevChain, payer: LocalAccount, database_url: str
) -> None:
    stock = await opened(paid, payer)
    deposit = int(stock.last_payload.payload["deposit"]["amount"])
    stranger: LocalAccount = Account.create()
    bad = "invalid_batch_settlement_evm_"
    cases: list[tuple[dict[str, str], str]] = [
        (voucher(stock, PRICE), f"{bad}cumulative_amount_mismatch"),  # no raise at all
        (voucher(stock, PRICE + PRICE // 2), f"{bad}cumulative_amount_mismatch"),  # by less
        (voucher(stock, deposit + PRICE), f"{bad}cumulative_exceeds_balance"),
        (voucher(stock, 2 * PRICE, signer=stranger), f"{bad}voucher_signature"),
        (voucher(stock, 2 * PRICE, channel_id="0x" + "ab" * 32), f"{bad}channel_id_mismatch"),
        (
            voucher(stock, 2 * PRICE, config={"receiver": stranger.address}),
            f"{bad}receiver_mismatch",
        ),
        (voucher(stock, 2 * PRICE, config={"token": stranger.address}), f"{bad}token_mismatch"),
        (voucher(stock, 2 * PRICE, network="eip155:84532"), f"{bad}network_mismatch"),
        (
            voucher(stock, 2 * PRICE, config={"salt": "0x" + "11" * 32}),
            f"{bad}channel_not_found",
        ),
        (voucher(stock, 2 * PRICE, claimed_id="not-a-channel"), f"{bad}voucher_payload"),
    ]
    for headers, reason in cases:
        await refused(stock, headers, reason, database_url)
    # a malformed voucher: no channel config at all
    proof = json.loads(base64.b64decode(voucher(stock, 2 * PRICE)["PAYMENT-SIGNATURE"]))
    del proof["payload"]["channelConfig"]
    malformed = {"PAYMENT-SIGNATURE": base64.b64encode(json.dumps(proof).encode()).decode()}
    await refused(stock, malformed, f"{bad}voucher_payload", database_url)
    # the channel still pays on
    r = await stock.store()
    assert r.status_code == 201, r.text


async def test_a_channel_whose_withdrawal_is_final_takes_no_voucher(
    paid: AsyncTestClient[Litestar], payer: LocalAccount, database_url: str
) -> None:
    stock = await opened(paid, payer)
    await _one(
        database_url,
        """UPDATE payment_channels SET withdraw_requested_at = 1
           WHERE wallet = $1 RETURNING 1""",
        payer.address.lower(),
    )
    await refused(
        stock, voucher(stock, 2 * PRICE), "invalid_batch_settlement_evm_channel_withdrawn",
        database_url,
    )  # fmt: skip


async def test_a_resent_voucher_gets_its_first_answer_once_charged(
    paid: AsyncTestClient[Litestar], payer: LocalAccount, database_url: str
) -> None:
    stock = await opened(paid, payer)
    body = {"content": f"Resent {uuid.uuid4()}"}
    headers = {**auth(payer), **voucher(stock, 2 * PRICE)}
    first = await paid.post("/v1/store", json=body, headers=headers)
    assert first.status_code == 201, first.text
    again = await paid.post("/v1/store", json=body, headers=headers)
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.headers["X-Idempotent-Replay"] == "true"
    assert int((await channel_row(database_url, payer))["charged"]) == 2 * PRICE
    assert await voucher_count(database_url, payer) == 2


async def test_a_voucher_whose_work_fails_is_not_kept(
    paid: AsyncTestClient[Litestar], payer: LocalAccount, database_url: str
) -> None:
    """The voucher and the channel's total are written in the request's transaction: a call that
    fails (an update of no memory, 404) rolls both back, and the same voucher pays the next."""
    stock = await opened(paid, payer)
    headers = voucher(stock, 2 * PRICE)
    r = await paid.patch(
        f"/v1/memories/{uuid.uuid4()}", json={"importance": 0.5},
        headers={**auth(payer), **headers},
    )  # fmt: skip
    assert r.status_code == 404, r.text
    assert int((await channel_row(database_url, payer))["charged"]) == PRICE
    assert await voucher_count(database_url, payer) == 1
    r = await paid.post(
        "/v1/store", json={"content": f"Paid after all {uuid.uuid4()}"},
        headers={**auth(payer), **headers},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    assert int((await channel_row(database_url, payer))["charged"]) == 2 * PRICE


async def test_a_payment_identifier_names_one_voucher_and_one_request(
    paid: AsyncTestClient[Litestar], payer: LocalAccount, database_url: str
) -> None:
    stock = await opened(paid, payer)
    payment_id = f"pay_{uuid.uuid4().hex}"
    body = {"content": f"Identified {uuid.uuid4()}"}
    headers = {**auth(payer), **voucher(stock, 2 * PRICE, payment_id=payment_id)}
    first = await paid.post("/v1/store", json=body, headers=headers)
    assert first.status_code == 201, first.text
    again = await paid.post("/v1/store", json=body, headers=headers)
    assert (again.status_code, again.json()) == (201, first.json())
    other = voucher(stock, 3 * PRICE, payment_id=payment_id)
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), **other})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["details"]["reason"] == "payment_identifier_conflict"
    assert int((await channel_row(database_url, payer))["charged"]) == 2 * PRICE


async def test_concurrent_vouchers_on_one_channel_take_turns(
    channel_settings: Settings, payer: LocalAccount, database_url: str
) -> None:
    """Five requests at once, on three app instances sharing the database, with the same next
    voucher: the channel row's lock lets exactly one raise the total; the others are refused
    as not raising it."""
    apps = [create_app(channel_settings) for _ in range(3)]
    async with (
        AsyncTestClient(app=apps[0], timeout=60) as one,
        AsyncTestClient(app=apps[1], timeout=60) as two,
        AsyncTestClient(app=apps[2], timeout=60) as three,
    ):
        stock = await opened(one, payer)
        headers = {**auth(payer), **voucher(stock, 2 * PRICE)}
        answers = await asyncio.gather(*[
            client.post("/v1/store", json={"content": f"Race {i} {uuid.uuid4()}"},
                        headers=headers)
            for i, client in enumerate([one, two, three, one, two])
        ])  # fmt: skip
    codes = sorted(r.status_code for r in answers)
    assert codes == [201, 402, 402, 402, 402], [r.text for r in answers]
    for r in answers:
        if r.status_code == 402:
            assert r.json()["error"]["details"]["reason"] == (
                "invalid_batch_settlement_evm_cumulative_amount_mismatch"
            )
    assert int((await channel_row(database_url, payer))["charged"]) == 2 * PRICE
    assert await voucher_count(database_url, payer) == 2


# ---- a withdrawal under way ---------------------------------------------------------------------


def test_vouchers_stop_a_margin_before_a_withdrawal_can_be_finalised() -> None:
    """The claimer looks at the chain once a run: from two runs before the withdrawal's end, a
    voucher might be accepted after its last look and lost to the payer's finalise."""
    from app.payments.channels import check_not_withdrawn
    from app.payments.proofs import PaymentRejected

    now, delay, margin = 1_000_000, MIN_WITHDRAW_DELAY, 120
    check_not_withdrawn({"withdraw_requested_at": 0, "withdraw_delay": delay}, now, margin)
    just_started = {"withdraw_requested_at": now, "withdraw_delay": delay}
    check_not_withdrawn(just_started, now, margin)  # the claimer has the delay to claim
    before_margin = {"withdraw_requested_at": now - delay + margin + 1, "withdraw_delay": delay}
    check_not_withdrawn(before_margin, now, margin)
    for requested in (now - delay + margin, now - delay, now - 10 * delay):
        with pytest.raises(PaymentRejected) as refused:
            check_not_withdrawn(
                {"withdraw_requested_at": requested, "withdraw_delay": delay}, now, margin
            )
        assert refused.value.reason.endswith("channel_withdrawn")


async def test_a_client_that_lost_its_count_resyncs_from_the_corrective_402(
    paid: AsyncTestClient[Litestar], dev: DevChain, payer: LocalAccount, database_url: str
) -> None:
    """x402's client restarted with empty storage signs from nothing; Engram's refusal carries
    the channel's snapshot (x402's channelState and voucherState extras), the stock client
    resyncs from it, and its next voucher pays. Nothing is charged for the refused try."""
    first = Payer(paid, payer)
    for _ in range(3):
        assert (await first.store()).status_code == 201
    restarted = Payer(paid, payer, rpc_url=dev.rpc_url)  # the same key, a fresh count
    body = {"content": f"After a restart {uuid.uuid4()}"}
    r = await paid.post("/v1/store", json=body, headers=auth(payer))
    headers, tried = restarted.x402.handle_402_response(dict(r.headers), r.content, str(r.url))
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), **headers})
    assert r.status_code == 402, r.text
    restarted.x402.process_payment_result(tried, r.headers.get, r.status_code)  # its resync
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    assert required.error == "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    (batch,) = [a for a in required.accepts if a.scheme == "batch-settlement"]
    state = (batch.extra or {})["channelState"]
    assert state["chargedCumulativeAmount"] == str(3 * PRICE)
    assert (batch.extra or {})["voucherState"]["signedMaxClaimable"] == str(3 * PRICE)
    assert int((await channel_row(database_url, payer))["charged"]) == 3 * PRICE

    headers, payload = restarted.x402.handle_402_response(dict(r.headers), r.content, str(r.url))
    assert payload.payload["type"] == "voucher"
    assert int(payload.payload["voucher"]["maxClaimableAmount"]) >= 4 * PRICE
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), **headers})
    assert r.status_code == 201, r.text
    assert int((await channel_row(database_url, payer))["charged"]) == 4 * PRICE
