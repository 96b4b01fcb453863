"""x402 payments end to end on a real local chain (anvil) with a real EIP-3009 USDC token:
challenge, v1 and v2 proofs, the reference client, every reject path, settle before commit,
idempotent replay and one-proof concurrency."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import anyio
import httpx
import pytest
import redis.asyncio as redis
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient
from memoclaw.errors import APIError, PaymentRequiredError
from x402 import x402Client, x402FacilitatorSync
from x402.http.clients.httpx import x402HttpxClient
from x402.http.utils import decode_payment_response_header
from x402.mechanisms.evm.exact import ExactEvmClientScheme, ExactEvmFacilitatorScheme
from x402.mechanisms.evm.signers import EthAccountSigner, FacilitatorWeb3Signer
from x402.schemas import PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from tests.support.api import auth
from tests.support.db import count_memories
from tests.support.facilitator_wire import LocalFacilitatorServer
from tests.support.server import served
from tests.support.settings import changed
from tests.support.shared_store import REDIS_URL
from tests.support.x402 import offer_of, reference_payment, sign_proof

BASE_USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
PRICE = 5000  # $0.005


@pytest.fixture(scope="module")
def pay_to() -> str:
    return str(Account.create().address)


def paid_settings(settings: Settings, chain: DevChain, pay_to: str) -> Settings:
    return changed(
        settings, limits={"free_tier_calls": 0},
        x402={"pay_to": pay_to, "rpc_url": chain.rpc_url, "relayer_key": chain.relayer.key.hex()},
    )  # fmt: skip


@pytest.fixture(scope="module")
def paid_app(settings: Settings, chain: DevChain, pay_to: str) -> Litestar:
    return create_app(paid_settings(settings, chain, pay_to))


@pytest.fixture(scope="module")
async def paid(paid_app: Litestar) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=paid_app, timeout=60) as client:
        yield client


@pytest.fixture
def payer(chain: DevChain) -> LocalAccount:
    account: LocalAccount = Account.create()
    chain.fund(account.address, 1_000_000, eth_wei=0)  # gasless: the relayer pays gas
    return account


async def _challenge(paid: AsyncTestClient, account: LocalAccount, path: str = "/v1/store",
                     body: dict | None = None) -> httpx.Response:  # fmt: skip
    r = await paid.post(path, json=body or {"content": "x"}, headers=auth(account))
    assert r.status_code == 402, r.text
    return r


# ---- the challenge -----------------------------------------------------------------------------


async def test_402_speaks_v1_v2_and_the_contract(paid: AsyncTestClient, wallet, pay_to) -> None:
    r = await paid.post("/v1/store", json={"content": "hello"}, headers=auth(wallet))
    assert r.status_code == 402
    body = r.json()
    assert body["error"]["code"] == "PAYMENT_REQUIRED"  # the contract's object, never a string
    assert body["x402Version"] == 1
    v1 = body["accepts"][0]
    assert v1["scheme"] == "exact" and v1["network"] == "base" and v1["maxAmountRequired"] == "5000"
    assert v1["asset"] == BASE_USDC and v1["payTo"] == pay_to
    assert v1["extra"] == {"name": "USD Coin", "version": "2"}
    assert v1["resource"].endswith("/v1/store")
    v2 = offer_of(r)
    assert v2["network"] == "eip155:8453" and v2["amount"] == "5000" and v2["asset"] == BASE_USDC
    assert v2["payTo"] == pay_to and v2["extra"] == {"name": "USD Coin", "version": "2"}
    # MemoClaw's SDK reads it as a typed payment error instead of crashing
    error = APIError.from_response(402, body)
    assert isinstance(error, PaymentRequiredError)
    # no identity at all: the same challenge
    r = await paid.post("/v1/recall", json={"query": "q"})
    assert r.status_code == 402 and offer_of(r)["amount"] == "5000"
    r = await paid.post(
        "/v1/store/batch", json={"memories": [{"content": "a"}]}, headers=auth(wallet)
    )
    assert offer_of(r)["amount"] == "40000"


async def test_base_sepolia_offers_its_own_usdc(settings, chain, pay_to, wallet) -> None:
    app = create_app(
        changed(paid_settings(settings, chain, pay_to), x402={"network": "base-sepolia"})
    )
    async with AsyncTestClient(app=app) as client:
        r = await client.post("/v1/recall", json={"query": "q"}, headers=auth(wallet))
    offer = offer_of(r)
    assert offer["network"] == "eip155:84532"
    assert offer["asset"] == "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
    assert offer["extra"] == {"name": "USDC", "version": "2"}
    assert r.json()["accepts"][0]["network"] == "base-sepolia"


# ---- paying ------------------------------------------------------------------------------------


async def test_reference_client_pays_a_store_and_the_token_moves(
    paid: AsyncTestClient, chain: DevChain, payer, pay_to, database_url
) -> None:
    body = {"content": f"Paid memory {uuid.uuid4()}"}
    r = await _challenge(paid, payer, body=body)
    before_payer, before_pay_to = chain.usdc_balance(payer.address), chain.usdc_balance(pay_to)
    r = await paid.post("/v1/store", json=body,
                        headers={**auth(payer), **await reference_payment(payer, r)})  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.headers["cache-control"] == "private, no-store"
    receipt = decode_payment_response_header(r.headers["PAYMENT-RESPONSE"])
    assert receipt.success and receipt.transaction.startswith("0x")
    assert receipt.network == "eip155:8453"  # v2 names networks by CAIP-2 id
    assert chain.usdc_balance(payer.address) == before_payer - PRICE
    assert chain.usdc_balance(pay_to) == before_pay_to + PRICE
    assert await count_memories(database_url, payer.address) == 1
    payments = (await paid.get("/v1/payments", headers=auth(payer))).json()
    assert payments["total"] == 1
    assert payments["payments"][0]["tx_hash"] == receipt.transaction
    assert payments["payments"][0]["amount"] == "5000"
    assert payments["payments"][0]["endpoint"] == "POST /v1/store"


async def test_reference_httpx_client_pays_unmodified(settings, paid, chain, pay_to, payer) -> None:
    """x402's own httpx client over real HTTP: sees the 402, pays, retries; no wallet header."""
    client = x402Client()
    client.register("eip155:8453", ExactEvmClientScheme(EthAccountSigner(payer)))
    with served(create_app(paid_settings(settings, chain, pay_to))) as url:
        async with x402HttpxClient(client, base_url=url, timeout=60) as agent:
            r = await agent.post("/v1/store", json={"content": f"Agent memory {uuid.uuid4()}"})
            assert r.status_code == 201, r.text
            r = await agent.post("/v1/recall", json={"query": "agent memory"})
            assert r.status_code == 200, r.text
            assert r.json()["memories"][0]["content"].startswith("Agent memory")
    assert chain.usdc_balance(payer.address) == 1_000_000 - 2 * PRICE
    # the payer alone identified the caller: the memory is the payer's
    mine = await paid.get("/v1/memories", headers=auth(payer))
    assert mine.json()["total"] == 1


async def test_v1_x_payment_header_pays_a_recall(paid: AsyncTestClient, chain, payer) -> None:
    r = await _challenge(paid, payer, "/v1/recall", {"query": "anything"})
    name, value = sign_proof(payer, offer_of(r), version=1)
    r = await paid.post(
        "/v1/recall", json={"query": "anything"}, headers={**auth(payer), name: value}
    )
    assert r.status_code == 200, r.text
    receipt = json.loads(base64.b64decode(r.headers["X-PAYMENT-RESPONSE"]))
    # a v1 payer is answered in v1's terms: the network by its v1 name, not its CAIP-2 id
    assert receipt["success"] is True and receipt["network"] == "base"
    assert "PAYMENT-RESPONSE" not in r.headers
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    # a retry with the same proof replays the answer, the receipt in the same terms
    again = await paid.post(
        "/v1/recall", json={"query": "anything"}, headers={**auth(payer), name: value}
    )
    assert again.headers["X-Idempotent-Replay"] == "true"
    assert json.loads(base64.b64decode(again.headers["X-PAYMENT-RESPONSE"]))["network"] == "base"
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE


# ---- every reject path -------------------------------------------------------------------------

NOW = int(time.time())
REJECTS = {
    "wrong amount": ({"value": 4999}, "invalid_exact_evm_payload_authorization_value_mismatch"),
    "wrong payTo": ({"to": "0x000000000000000000000000000000000000dEaD"},
                    "invalid_exact_evm_payload_recipient_mismatch"),
    "wrong network": ({"network": "eip155:84532"}, "invalid_network"),
    "wrong v1 network": ({"version": 1, "network": "base-sepolia"}, "invalid_network"),
    "wrong chain id": ({"chain_id": 84532}, "invalid_exact_evm_payload_signature"),
    "wrong token domain": ({"name": "USDC"}, "invalid_exact_evm_payload_signature"),
    "expired": ({"valid_before": NOW - 10}, "invalid_exact_evm_payload_authorization_valid_before"),
    "about to expire": ({"valid_before": NOW + 2}, "invalid_exact_evm_payload_authorization_valid_before"),
    "not yet valid": ({"valid_after": NOW + 3600}, "invalid_exact_evm_payload_authorization_valid_after"),
    "bad signature": ({"signer": "impostor"}, "invalid_exact_evm_payload_signature"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REJECTS))
async def test_reject_paths(paid: AsyncTestClient, chain, payer, database_url, case: str) -> None:
    overrides, reason = REJECTS[case]
    overrides = dict(overrides)
    if overrides.get("signer") == "impostor":
        overrides["signer"] = Account.create()
    body = {"content": f"never stored {uuid.uuid4()}"}
    r = await _challenge(paid, payer, body=body)
    name, value = sign_proof(payer, offer_of(r), **overrides)
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), name: value})
    assert r.status_code == 402, r.text
    assert r.json()["error"]["details"]["reason"] == reason, r.text
    assert "PAYMENT-REQUIRED" in r.headers  # a fresh offer to pay correctly
    assert await count_memories(database_url, payer.address) == 0
    assert chain.usdc_balance(payer.address) == 1_000_000


async def test_garbage_payment_header(paid: AsyncTestClient, payer) -> None:
    for value in ("!!not-base64!!", "bm90IGpzb24=", "WzEsMl0="):  # junk, "not json", "[1,2]"
        r = await paid.post("/v1/store", json={"content": "x"},
                            headers={**auth(payer), "PAYMENT-SIGNATURE": value})  # fmt: skip
        assert r.status_code == 402, value
        assert r.json()["error"]["details"]["reason"] == "invalid_payload"


async def test_insufficient_balance(paid: AsyncTestClient, chain, database_url) -> None:
    poor: LocalAccount = Account.create()
    chain.fund(poor.address, PRICE - 1, eth_wei=0)
    r = await _challenge(paid, poor)
    name, value = sign_proof(poor, offer_of(r))
    r = await paid.post("/v1/store", json={"content": "x"}, headers={**auth(poor), name: value})
    assert r.status_code == 402
    assert r.json()["error"]["details"]["reason"] == "invalid_exact_evm_insufficient_balance"
    assert await count_memories(database_url, poor.address) == 0


async def test_nonce_used_on_chain_elsewhere_is_refused(
    paid: AsyncTestClient, chain, payer, pay_to
) -> None:
    """An authorization already settled outside Engram cannot pay for a call."""
    r = await _challenge(paid, payer)
    offer = offer_of(r)
    requirements = PaymentRequirements.model_validate(offer)
    client = x402Client()
    client.register("eip155:8453", ExactEvmClientScheme(EthAccountSigner(payer)))
    payload = await client.create_payment_payload(
        PaymentRequired(accepts=[requirements], resource=ResourceInfo(url="http://elsewhere"))
    )
    assert isinstance(payload, PaymentPayload)
    facilitator = x402FacilitatorSync()
    signer = FacilitatorWeb3Signer(private_key=chain.relayer.key.hex(), rpc_url=chain.rpc_url)
    facilitator.register(["eip155:8453"], ExactEvmFacilitatorScheme(signer))
    assert (await asyncio.to_thread(facilitator.settle, payload, requirements)).success
    auth_ = payload.payload["authorization"]
    name, value = sign_proof(
        payer, offer, nonce=auth_["nonce"], valid_before=int(auth_["validBefore"])
    )
    r = await paid.post("/v1/store", json={"content": "x"}, headers={**auth(payer), name: value})
    assert r.status_code == 402
    assert r.json()["error"]["details"]["reason"] == "invalid_exact_evm_nonce_already_used"


# ---- never double-charge, never double-serve ---------------------------------------------------


async def test_replay_of_a_settled_proof(paid: AsyncTestClient, chain, payer, database_url) -> None:
    body = {"content": f"Replayed memory {uuid.uuid4()}"}
    r = await _challenge(paid, payer, body=body)
    headers = {**auth(payer), "PAYMENT-SIGNATURE": sign_proof(payer, offer_of(r))[1]}
    first = await paid.post("/v1/store", json=body, headers=headers)
    assert first.status_code == 201
    again = await paid.post(
        "/v1/store", json=body, headers=headers
    )  # a client that lost the answer
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["x-idempotent-replay"] == "true"
    assert again.headers["PAYMENT-RESPONSE"] == first.headers["PAYMENT-RESPONSE"]
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    other = await paid.post("/v1/store", json={"content": "another request"}, headers=headers)
    assert other.status_code == 402
    assert other.json()["error"]["details"]["reason"] == "invalid_exact_evm_nonce_already_used"
    assert await count_memories(database_url, payer.address) == 1


@pytest.mark.parametrize("guard", ["postgres", "redis"])
async def test_50_concurrent_requests_with_one_proof(
    settings, chain, pay_to, payer, database_url, guard: str
) -> None:
    # a real server: the test client would serve these one after another, so no request would
    # ever meet another one in flight
    changes = {"database": {"redis_url": REDIS_URL}} if guard == "redis" else {}
    app = create_app(changed(paid_settings(settings, chain, pay_to), **changes))
    start = asyncio.Event()
    with served(app) as url:
        # no keep-alive: a connection idle past uvicorn's keep-alive timeout (5 s) could be
        # closed by the server just as the client reuses it ("Server disconnected")
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
            body = {"content": f"Concurrent paid memory {uuid.uuid4()}"}
            r = await _challenge(client, payer, body=body)
            headers = {**auth(payer), "PAYMENT-SIGNATURE": sign_proof(payer, offer_of(r))[1]}
            before = chain.usdc_balance(pay_to)

            async def send() -> httpx.Response:
                await start.wait()
                return await client.post("/v1/store", json=body, headers=headers)

            # All 50 wait on one event and are released in the same loop turn, so they reach the
            # server together. The request holding the proof keeps it through verify, handler
            # and on-chain settle (hundreds of ms), while the others only need to get to the
            # guard: some of them always find it held (409); any that come after the commit are
            # replayed. (Measured: 49 of 49 got 409, with either guard.)
            calls = [asyncio.create_task(send()) for _ in range(50)]
            await asyncio.sleep(0)  # every task now waits on the event
            start.set()
            responses = await asyncio.gather(*calls)
    handled = [
        x for x in responses if x.status_code == 201 and "x-idempotent-replay" not in x.headers
    ]
    replays = [x for x in responses if x.headers.get("x-idempotent-replay") == "true"]
    in_flight = [x for x in responses if x.status_code == 409]
    assert len(handled) == 1, [x.status_code for x in responses]
    assert len(handled) + len(replays) + len(in_flight) == 50
    assert all(x.json() == handled[0].json() for x in replays)
    assert all(x.json()["error"]["details"]["reason"] == "payment_in_flight" for x in in_flight)
    assert in_flight, "no request met the payment in flight: they did not overlap"
    assert await count_memories(database_url, payer.address) == 1  # one handler run
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE  # dropped once
    assert chain.usdc_balance(pay_to) == before + PRICE  # one transfer


# ---- settle before commit ----------------------------------------------------------------------


async def test_failed_settle_leaves_no_memory(
    paid: AsyncTestClient, chain, payer, database_url
) -> None:
    body = {"content": f"Unpaid memory {uuid.uuid4()}"}
    r = await _challenge(paid, payer, body=body)
    name, value = sign_proof(payer, offer_of(r))
    relayer_eth = chain.eth_balance(chain.relayer.address)
    chain.set_eth_balance(chain.relayer.address, 0)  # the relayer cannot pay gas: settle fails
    try:
        r = await paid.post("/v1/store", json=body, headers={**auth(payer), name: value})
    finally:
        chain.set_eth_balance(chain.relayer.address, relayer_eth)
    assert r.status_code == 402, r.text
    receipt = decode_payment_response_header(r.headers["PAYMENT-RESPONSE"])
    assert not receipt.success
    assert await count_memories(database_url, payer.address) == 0
    assert chain.usdc_balance(payer.address) == 1_000_000
    # the refused send left no gap in the relayer's nonces: the next settlement goes through
    r = await _challenge(paid, payer, body=body)
    name, value = sign_proof(payer, offer_of(r))
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), name: value})
    assert r.status_code == 201, r.text
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE


async def test_failed_handler_settles_nothing(paid: AsyncTestClient, chain, payer) -> None:
    missing = f"/v1/memories/{uuid.uuid4()}"
    r = await paid.patch(missing, json={"importance": 1}, headers=auth(payer))
    assert r.status_code == 402
    name, value = sign_proof(payer, offer_of(r))
    nonce = value  # the same proof, kept for reuse below
    r = await paid.patch(missing, json={"importance": 1}, headers={**auth(payer), name: nonce})
    assert r.status_code == 404
    assert chain.usdc_balance(payer.address) == 1_000_000
    # nothing was settled, so the same authorization still pays for a call that succeeds
    r = await paid.post("/v1/store", json={"content": f"Second try {uuid.uuid4()}"},
                        headers={**auth(payer), name: nonce})  # fmt: skip
    assert r.status_code == 201, r.text
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE


# ---- who owns what -----------------------------------------------------------------------------


async def test_payer_pays_and_signed_wallet_owns(paid: AsyncTestClient, payer, wallet) -> None:
    body = {"content": f"Sponsored memory {uuid.uuid4()}"}
    r = await _challenge(paid, wallet, body=body)
    name, value = sign_proof(payer, offer_of(r))
    r = await paid.post("/v1/store", json=body, headers={**auth(wallet), name: value})
    assert r.status_code == 201, r.text
    memory_id = r.json()["id"]
    assert (await paid.get(f"/v1/memories/{memory_id}", headers=auth(wallet))).status_code == 200
    assert (await paid.get(f"/v1/memories/{memory_id}", headers=auth(payer))).status_code == 404
    listed = (await paid.get("/v1/payments", headers=auth(wallet))).json()
    assert listed["total"] == 1
    assert listed["payments"][0]["payer"] == payer.address.lower()
    assert listed["payments"][0]["wallet"] == wallet.address.lower()
    # the ledger row names the request it paid for, as its answer did
    assert listed["payments"][0]["request_id"] == r.headers["x-request-id"]
    # receipts are the wallet's that they served (kept on its shard): the payer has the tx hash
    assert (await paid.get("/v1/payments", headers=auth(payer))).json()["total"] == 0


async def test_payments_list_is_private(paid: AsyncTestClient, other_wallet) -> None:
    assert (await paid.get("/v1/payments", headers=auth(other_wallet))).json()["total"] == 0
    assert (await paid.get("/v1/payments")).status_code == 401


def test_random_nonce_helper_is_random() -> None:
    assert secrets.token_hex(32) != secrets.token_hex(32)


# ---- a remote facilitator ----------------------------------------------------------------------


async def _claims(nonce: str) -> list[bytes]:
    """The payment claims held in Redis for an authorization nonce."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return list(await client.keys(f"engram:x402:*{nonce}"))
    finally:
        await client.aclose()


@pytest.mark.parametrize("cancelled_in", ["/verify", "/settle"])
async def test_a_cancelled_paid_request_releases_its_claim(
    settings, chain, pay_to, payer, database_url, cancelled_in: str
) -> None:
    """Litestar resolves dependencies in an anyio task group and cancels them all when one fails;
    anyio then cancels every later await too. A paid request cancelled while its payment is
    verified still releases its claim on the (payer, nonce), and the same proof pays later; one
    cancelled while it settles still settles, commits and records the payment (never lost)."""
    with LocalFacilitatorServer(chain.relayer.key.hex(), chain.rpc_url, "eip155:8453") as remote:
        app = create_app(changed(settings, limits={"free_tier_calls": 0},
                                 x402={"pay_to": pay_to, "facilitator_url": remote.url},
                                 database={"redis_url": REDIS_URL}))  # fmt: skip
        # httpx's ASGI transport runs the app in the caller's task, so a cancel reaches it
        async with (
            app.lifespan(),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://engram", timeout=60
            ) as client,
        ):
            body = {"content": f"Cancelled paid memory {uuid.uuid4()}"}
            r = await _challenge(client, payer, body=body)  # type: ignore[arg-type]
            nonce = "0x" + secrets.token_hex(32)
            name, value = sign_proof(payer, offer_of(r), nonce=nonce)
            headers = {**auth(payer), name: value}
            gate = remote.held(cancelled_in)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: client.post("/v1/store", json=body, headers=headers))
                    assert await anyio.to_thread.run_sync(remote.wait_for, cancelled_in)
                    assert await _claims(nonce), "the request holds the payment's claim"
                    tg.cancel_scope.cancel()
                    if cancelled_in == "/settle":
                        gate.set()  # settling, once begun, runs to its end
            finally:
                gate.set()
            assert await _claims(nonce) == []
            settled = cancelled_in == "/settle"
            assert await count_memories(database_url, payer.address) == int(settled)
            assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE * settled
            # the same proof now pays (after verify) or replays the settled call (after settle)
            r = await client.post("/v1/store", json=body, headers=headers)
            assert r.status_code == 201, r.text
            assert (r.headers.get("x-idempotent-replay") == "true") is settled
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    assert await count_memories(database_url, payer.address) == 1


async def test_remote_facilitator_over_http(settings, chain, pay_to, payer, database_url) -> None:
    """ENGRAM_X402_FACILITATOR_URL: verify and settle go over x402's HTTP facilitator protocol,
    with Engram's own requirements (never the client's copy)."""
    with LocalFacilitatorServer(chain.relayer.key.hex(), chain.rpc_url, "eip155:8453") as remote:
        app = create_app(changed(settings, limits={"free_tier_calls": 0},
                                 x402={"pay_to": pay_to, "facilitator_url": remote.url}))  # fmt: skip
        async with AsyncTestClient(app=app) as client:
            body = {"content": f"Remotely settled {uuid.uuid4()}"}
            r = await _challenge(client, payer, body=body)
            offer = offer_of(r)
            tampered = {**offer, "amount": "1"}  # the client's copy claims a smaller price
            name, value = sign_proof(payer, offer)
            proof = json.loads(base64.b64decode(value))
            proof["accepted"] = tampered
            value = base64.b64encode(json.dumps(proof).encode()).decode()
            r = await client.post("/v1/store", json=body, headers={**auth(payer), name: value})
            assert r.status_code == 201, r.text
            assert decode_payment_response_header(r.headers["PAYMENT-RESPONSE"]).success
    assert [req["path"] for req in remote.requests] == ["/verify", "/settle"]
    for req in remote.requests:
        assert req["body"]["paymentRequirements"]["amount"] == "5000"
        assert req["body"]["paymentRequirements"]["payTo"] == pay_to
        assert req["body"]["paymentPayload"]["accepted"]["amount"] == "5000"
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    assert await count_memories(database_url, payer.address) == 1


async def test_prices_and_asset_are_configuration(settings, chain, pay_to, wallet) -> None:
    token = "0x00000000000000000000000000000000000C0FFE"
    prices = {**settings.x402.prices_usd, "store": Decimal("0.01")}
    app = create_app(changed(paid_settings(settings, chain, pay_to), x402={
        "prices_usd": prices, "asset": token, "asset_name": "Test Dollar", "asset_version": "7",
    }))  # fmt: skip
    async with AsyncTestClient(app=app) as client:
        store = await client.post("/v1/store", json={"content": "x"}, headers=auth(wallet))
        recall = await client.post("/v1/recall", json={"query": "x"}, headers=auth(wallet))
    assert offer_of(store)["amount"] == "10000" and offer_of(recall)["amount"] == "5000"
    assert offer_of(store)["asset"] == token
    assert offer_of(store)["extra"] == {"name": "Test Dollar", "version": "7"}


def test_price_list_reads_overrides_and_refuses_nonsense() -> None:
    prices = Settings.from_env({"ENGRAM_PRICE_RECALL": "0.002"}).x402.prices_usd
    assert prices["recall"] == Decimal("0.002") and prices["store"] == Decimal("0.005")
    for bad in ("free", "-1", "0"):
        with pytest.raises(SystemExit):
            Settings.from_env({"ENGRAM_PRICE_STORE": bad})


async def test_permit2_proofs_are_refused_clearly(paid: AsyncTestClient, payer) -> None:
    """Engram offers EIP-3009 only (Permit2 needs the x402 proxy contract on chain)."""
    r = await _challenge(paid, payer)
    offer = offer_of(r)
    permit2 = {
        "x402Version": 2,
        "accepted": offer,
        "payload": {
            "signature": "0x" + "11" * 65,
            "permit2Authorization": {
                "permitted": {"token": offer["asset"], "amount": offer["amount"]},
                "from": payer.address, "spender": "0x402085c248EeA27D92E8b30b2C58ed07f9E20001",
                "nonce": "1", "deadline": str(int(time.time()) + 300),
                "witness": {"to": offer["payTo"], "validAfter": "0"},
            },
        },
    }  # fmt: skip
    value = base64.b64encode(json.dumps(permit2).encode()).decode()
    r = await paid.post("/v1/store", json={"content": "x"},
                        headers={**auth(payer), "PAYMENT-SIGNATURE": value})  # fmt: skip
    assert r.status_code == 402
    assert r.json()["error"]["details"]["reason"] == "invalid_payload"
    assert "EIP-3009" in r.json()["error"]["message"]
