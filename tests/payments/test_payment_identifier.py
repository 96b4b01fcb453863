"""x402's payment-identifier extension, advertised in every 402 and honoured: the same id with
the same payment and request gets the cached response; the same id with another payment or
request is a 409 and charges nothing. Built with x402's own client helpers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient
from x402.extensions.payment_identifier import (
    PAYMENT_IDENTIFIER,
    append_payment_identifier_to_extensions,
)
from x402.http.utils import decode_payment_required_header

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from tests.support.api import auth
from tests.support.db import count_memories
from tests.support.settings import changed
from tests.support.x402 import offer_of, sign_proof

PRICE = 5000


@pytest.fixture(scope="module")
async def paid(settings: Settings, chain: DevChain) -> AsyncIterator[AsyncTestClient]:
    app = create_app(changed(settings, limits={"free_tier_calls": 0}, x402={
        "pay_to": str(Account.create().address), "rpc_url": chain.rpc_url,
        "relayer_key": chain.relayer.key.hex(),
    }))  # fmt: skip
    async with AsyncTestClient(app=app, timeout=60) as client:
        yield client


@pytest.fixture
def payer(chain: DevChain) -> LocalAccount:
    account: LocalAccount = Account.create()
    chain.fund(account.address, 1_000_000, eth_wei=0)
    return account


def _with_id(extensions: dict, payment_id: str | None = None) -> dict:  # type: ignore[type-arg]
    chosen = append_payment_identifier_to_extensions({**extensions})
    if payment_id is not None:
        chosen[PAYMENT_IDENTIFIER]["info"]["id"] = payment_id
    return chosen


async def test_the_id_replays_the_same_payment_and_refuses_another(
    paid: AsyncTestClient, chain: DevChain, payer: LocalAccount, database_url: str
) -> None:
    body = {"content": f"Idempotent by id {uuid.uuid4()}"}
    r = await paid.post("/v1/store", json=body, headers=auth(payer))
    assert r.status_code == 402
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    assert required.extensions and PAYMENT_IDENTIFIER in required.extensions  # advertised
    extensions = _with_id(required.extensions)
    payment_id = extensions[PAYMENT_IDENTIFIER]["info"]["id"]
    name, first = sign_proof(payer, offer_of(r), extensions=extensions)
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), name: first})
    assert r.status_code == 201, r.text
    stored = r.json()
    # the same id, the same payment and request: the cached response, no second charge
    again = await paid.post("/v1/store", json=body, headers={**auth(payer), name: first})
    assert again.status_code == 201 and again.json() == stored
    assert again.headers["x-idempotent-replay"] == "true"
    # the same id with a new payment (a client that signed again): refused, nothing charged
    offer = offer_of(await paid.post("/v1/store", json=body, headers=auth(payer)))
    _, second = sign_proof(payer, offer, extensions=_with_id(required.extensions, payment_id))
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), name: second})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["details"]["reason"] == "payment_identifier_conflict"
    # the same id and payment for another request: refused too
    r = await paid.post("/v1/store", json={"content": "another"},
                        headers={**auth(payer), name: first})  # fmt: skip
    assert r.status_code == 409, r.text
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    assert await count_memories(database_url, payer.address) == 1


async def test_an_invalid_id_is_refused_before_anything_is_charged(
    paid: AsyncTestClient, chain: DevChain, payer: LocalAccount
) -> None:
    body = {"content": f"Bad id {uuid.uuid4()}"}
    r = await paid.post("/v1/store", json=body, headers=auth(payer))
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    name, value = sign_proof(payer, offer_of(r), extensions=_with_id(required.extensions, "short"))
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), name: value})
    assert r.status_code == 402, r.text
    assert r.json()["error"]["details"]["reason"] == "invalid_payment_identifier"
    assert chain.usdc_balance(payer.address) == 1_000_000


async def test_a_schema_sent_with_the_id_is_not_run(
    paid: AsyncTestClient, chain: DevChain, payer: LocalAccount
) -> None:
    """Only the rules Engram declares apply to an id: a schema in the proof would be code run for
    anyone (a backtracking `pattern` stalls the server), so one that refuses every id changes
    nothing."""
    body = {"content": f"Own schema {uuid.uuid4()}"}
    r = await paid.post("/v1/store", json=body, headers=auth(payer))
    required = decode_payment_required_header(r.headers["PAYMENT-REQUIRED"])
    extensions = _with_id(required.extensions)
    extensions[PAYMENT_IDENTIFIER] = {
        **extensions[PAYMENT_IDENTIFIER],
        "schema": {"properties": {"id": {"type": "string", "pattern": "^no id matches$"}}},
    }
    name, value = sign_proof(payer, offer_of(r), extensions=extensions)
    r = await paid.post("/v1/store", json=body, headers={**auth(payer), name: value})
    assert r.status_code == 201, r.text
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
