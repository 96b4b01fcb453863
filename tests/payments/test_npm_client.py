"""x402's TypeScript client from npm (`@x402/fetch` with `@x402/evm`'s batch-settlement scheme,
pinned in package.json) pays Engram through a payment channel, unmodified: Engram served over
real HTTP with channels on, on the dev chain; one deposit, then 50 calls paid with vouchers, and
the chain's transactions counted."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from eth_account import Account

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from app.dev.npm import npm_packages
from tests.support.server import served
from tests.support.settings import changed
from tests.support.x402 import paid_only

SCRIPT = Path(__file__).with_name("npm_batch_client.mjs")
PRICE = 5_000  # a store, $0.005 in USDC atomic units
CALLS = 51  # the deposit's call, then 50 on the same channel
NODE_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def dev(chain: DevChain) -> DevChain:
    chain.install_batch_settlement()
    return chain


@pytest.fixture(scope="module")
def channel_url(settings: Settings, dev: DevChain) -> Iterator[str]:
    """Engram over HTTP, paid on the dev chain, offering channels beside `exact`."""
    paid = changed(paid_only(settings, dev), x402={"schemes": "exact,batch-settlement"})
    with served(create_app(paid)) as url:
        yield url


def run_client(url: str, dev: DevChain, payer_key: str) -> list[dict[str, Any]]:
    """The node script's calls, one JSON object each (it stops at the first unpaid one)."""
    node = shutil.which("node")
    assert node, "node (Node.js >= 20) is needed for the npm client test"
    root = npm_packages()  # an existing node_modules gets the x402 packages too
    assert SCRIPT.resolve().is_relative_to(root), f"{SCRIPT} cannot import from {root}"
    env = {
        **os.environ, "ENGRAM_URL": url, "RPC_URL": dev.rpc_url, "PAYER_KEY": payer_key,
        "NETWORK": dev.network, "CALLS": str(CALLS),
    }  # fmt: skip
    done = subprocess.run([node, str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=NODE_TIMEOUT_S, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def transactions_since(dev: DevChain, first_block: int) -> int:
    latest = dev.w3.eth.block_number
    return sum(
        dev.w3.eth.get_block_transaction_count(n) for n in range(first_block + 1, latest + 1)
    )


async def channel_state(database_url: str, payer: str) -> tuple[int, int, int]:
    """(charged total, deposit, vouchers) Engram holds for the payer's channel."""
    conn = await asyncpg.connect(database_url)
    try:
        channel = await conn.fetchrow(
            "SELECT charged, balance FROM payment_channels WHERE wallet = $1", payer
        )
        vouchers = await conn.fetchval(
            "SELECT count(*) FROM channel_vouchers WHERE wallet = $1", payer
        )
    finally:
        await conn.close()
    return int(channel["charged"]), int(channel["balance"]), int(vouchers)


async def test_x402_fetch_deposits_once_then_pays_50_calls_with_vouchers(
    channel_url: str, dev: DevChain, database_url: str
) -> None:
    payer = Account.create()
    dev.fund(payer.address, 1_000_000, eth_wei=0)  # the payer never pays gas
    first_block = dev.w3.eth.block_number
    calls = await asyncio.to_thread(
        run_client, channel_url, dev, "0x" + payer.key.hex().removeprefix("0x")
    )
    assert [c["status"] for c in calls] == [201] * CALLS
    deposit, vouchers = calls[0], calls[1:]
    assert deposit["transaction"]  # the one on-chain step
    assert [c["transaction"] for c in vouchers] == [""] * (CALLS - 1)
    assert [c["charged"] for c in calls] == [str(n * PRICE) for n in range(1, CALLS + 1)]
    assert {c["chargedAmount"] for c in calls} == {str(PRICE)}
    assert transactions_since(dev, first_block) == 1  # the deposit
    charged, balance, voucher_rows = await channel_state(database_url, payer.address.lower())
    assert charged == CALLS * PRICE
    assert balance == 200 * PRICE  # the client deposited the offer's minDeposit (200 calls)
    assert voucher_rows == CALLS
