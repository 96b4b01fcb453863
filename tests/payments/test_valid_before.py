"""An EIP-3009 authorization may be valid until any uint256: one past year 9999 (the largest
uint256 is a common "never expires") pays like any other, through a real `engram serve` on the
local chain (it was a 500: the ledger's valid_before overflowed Python's calendar)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from eth_account import Account

from app.dev.chain import DevChain
from tests.support.api import auth
from tests.support.server import serving
from tests.support.x402 import offer_of, sign_proof

# Past year 9999 as unix seconds: the largest uint256, 2**63, and the first second of year 33658
FAR_VALID_BEFORE = [2**256 - 1, 2**63, 10**12]


@pytest.fixture(scope="module")
def paid_server(
    database_url: str, chain: DevChain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    with serving(
        tmp_path_factory.mktemp("paid"), ENGRAM_DATABASE_URL=database_url,
        ENGRAM_FREE_TIER_CALLS="0", ENGRAM_RATE_LIMIT_PER_MINUTE="0",
        ENGRAM_X402_PAY_TO=Account.create().address, ENGRAM_X402_RPC_URL=chain.rpc_url,
        ENGRAM_X402_RELAYER_KEY=chain.relayer.key.hex(),
    ) as served:  # fmt: skip
        yield served


@pytest.mark.parametrize("valid_before", FAR_VALID_BEFORE, ids=["uint256-max", "2^63", "1e12"])
def test_a_payment_valid_past_year_9999_pays(
    paid_server: tuple[str, Path], chain: DevChain, valid_before: int
) -> None:
    url, _ = paid_server
    payer = Account.create()
    chain.fund(payer.address, 1_000_000, eth_wei=0)
    body = {"content": f"paid with an authorization valid until {valid_before}"}
    r = httpx.post(f"{url}/v1/store", json=body, headers=auth(payer), timeout=60)
    assert r.status_code == 402, r.text
    name, value = sign_proof(payer, offer_of(r), valid_before=valid_before)
    r = httpx.post(f"{url}/v1/store", json=body, headers={**auth(payer), name: value}, timeout=60)
    assert r.status_code == 201, r.text
    [payment] = httpx.get(f"{url}/v1/payments", headers=auth(payer), timeout=60).json()["payments"]
    assert payment["status"] == "settled", payment
