"""The console's usage page from real paid calls on the dev chain: the receipts with their
transaction hashes, USDC paid per day in the chart's data, and the free tier left."""

from __future__ import annotations

import json
import uuid

from eth_account import Account
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from tests.support.api import auth
from tests.support.console import sign_in
from tests.support.x402 import paid_only, paid_store


async def test_receipts_and_paid_usdc_come_from_real_payments(
    settings: Settings, chain: DevChain
) -> None:
    payer = Account.create()
    chain.fund(payer.address, 1_000_000, eth_wei=0)
    app = create_app(paid_only(settings, chain))
    async with AsyncTestClient(app=app, timeout=60) as client:
        client.follow_redirects = False
        for _ in range(2):
            await paid_store(client, payer, {"content": f"paid {uuid.uuid4()}"})
        receipts = (await client.get("/v1/payments", headers=auth(payer))).json()["payments"]
        await sign_in(client, payer)
        page = (await client.get("/console/usage")).text
    hashes = [p["tx_hash"] for p in receipts]
    assert len(hashes) == 2 and all(h and h.startswith("0x") for h in hashes)
    table = page.split('class="receipts"', 1)[1].split("</table>", 1)[0]
    for tx in hashes:
        assert tx in table
    assert table.count("0.005") == 2  # each store's price, in USDC
    assert 'id="paid-total">0.01 USDC<' in page
    assert 'id="free-left">0<' in page
    data = json.loads(page.split('id="usage-data">', 1)[1].split("</script>", 1)[0])
    assert data["paid_usdc"][-1] == "0.01" and data["calls"][-1] == {"POST /v1/store": 2}
