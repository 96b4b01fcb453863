"""GET /v1/usage (free): a wallet's metered calls per UTC day and endpoint, the USDC it paid per
day from the payments ledger, and its free tier; strict about its own parameters, private to
the wallet, and counting nothing a free route or a failed call did."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from tests.support.api import auth, store_memory
from tests.support.team import as_agent, as_grantee, delegate, forbidden, grant
from tests.support.x402 import paid_only, paid_store


def _today() -> str:
    return str(datetime.now(UTC).date())


async def test_metered_calls_are_counted_by_day_and_endpoint(
    client: AsyncTestClient, wallet: LocalAccount
) -> None:
    h = auth(wallet)
    stored = await store_memory(client, wallet, "the harbour ferry leaves at seven")
    await store_memory(client, wallet, "the night bus stops at the square")
    assert (await client.post("/v1/recall", json={"query": "ferry"}, headers=h)).status_code == 200
    # free routes are not metered
    assert (await client.get("/v1/memories", headers=h)).status_code == 200
    assert (await client.get(f"/v1/memories/{stored['id']}", headers=h)).status_code == 200
    # a refused call counts nothing
    assert (await client.post("/v1/store", json={"content": ""}, headers=h)).status_code == 422
    r = await client.get("/v1/usage", headers=h)
    assert r.status_code == 200, r.text
    usage = r.json()
    assert usage["bucket"] == "day" and usage["to"] == _today()
    assert len(usage["days"]) == 30 and usage["days"][-1]["day"] == _today()
    today = usage["days"][-1]
    assert today["calls"] == {"POST /v1/store": 2, "POST /v1/recall": 1}
    assert (today["free_calls"], today["paid_calls"], today["paid_usdc"]) == (3, 0, "0")
    assert usage["totals"] == {"calls": 3, "free_calls": 3, "paid_calls": 0, "paid_usdc": "0"}
    assert usage["free_tier"]["free_tier_remaining"] == 97
    assert all(d["calls"] == {} for d in usage["days"][:-1])  # empty days are listed, empty


async def test_the_range_and_routes_with_ids_are_named_by_their_template(
    client: AsyncTestClient, wallet: LocalAccount
) -> None:
    h = auth(wallet)
    stored = await store_memory(client, wallet, "a memory to change")
    r = await client.patch(f"/v1/memories/{stored['id']}", json={"importance": 0.9}, headers=h)
    assert r.status_code == 200, r.text
    today = _today()
    r = await client.get(f"/v1/usage?from={today}&to={today}&bucket=day&extra=ignored", headers=h)
    assert r.status_code == 200, r.text
    [day] = r.json()["days"]
    assert set(day["calls"]) <= {"POST /v1/store", "PATCH /v1/memories/{memory_id}"}
    assert day["calls"]["POST /v1/store"] == 1
    yesterday = str(datetime.now(UTC).date() - timedelta(days=1))
    r = await client.get(f"/v1/usage?from={yesterday}&to={yesterday}", headers=h)
    assert r.json()["days"] == [
        {"day": yesterday, "calls": {}, "free_calls": 0, "paid_calls": 0, "paid_usdc": "0"}
    ]


async def test_usage_is_private_to_the_wallet(
    client: AsyncTestClient, wallet: LocalAccount, other_wallet: LocalAccount
) -> None:
    await store_memory(client, wallet, "only mine")
    theirs = (await client.get("/v1/usage", headers=auth(other_wallet))).json()
    assert theirs["totals"]["calls"] == 0
    assert (await client.get("/v1/usage")).status_code == 401


@pytest.mark.parametrize(
    "query",
    [
        "from=yesterday",
        "to=2026-13-01",
        "from=2026-12-04&to=2026-12-01",
        "from=2024-01-01&to=2026-01-01",
        "bucket=week",
        "bucket=",
        "from=2026-12-01T00:00:00",
    ],
)
async def test_bad_parameters_are_422(
    client: AsyncTestClient, wallet: LocalAccount, query: str
) -> None:
    r = await client.get(f"/v1/usage?{query}", headers=auth(wallet))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "VALIDATION_ERROR"


async def test_paid_calls_and_the_usdc_they_paid(
    settings: Settings, chain: DevChain, database_url: str
) -> None:
    payer = Account.create()
    chain.fund(payer.address, 1_000_000, eth_wei=0)
    app = create_app(paid_only(settings, chain))
    async with AsyncTestClient(app=app, timeout=60) as client:
        for _ in range(2):
            body = {"content": f"paid {uuid.uuid4()}"}
            _, payment = await paid_store(client, payer, body)
            # its replay is no new call
            again = await client.post("/v1/store", json=body, headers={**auth(payer), **payment})
            assert again.headers["x-idempotent-replay"] == "true"
        usage = (await client.get("/v1/usage", headers=auth(payer))).json()
    today = usage["days"][-1]
    assert today["calls"] == {"POST /v1/store": 2}
    assert (today["free_calls"], today["paid_calls"], today["paid_usdc"]) == (0, 2, "0.01")
    assert usage["totals"]["paid_usdc"] == "0.01"
    assert usage["free_tier"]["free_tier_remaining"] == 0


async def test_a_grantee_or_an_agent_key_cannot_read_the_owners_usage(
    client: AsyncTestClient, wallet: LocalAccount, other_wallet: LocalAccount
) -> None:
    agent = Account.create()
    await grant(client, wallet, other_wallet, "write", "team")
    await delegate(client, wallet, agent, ["write"], None)
    for headers in (as_grantee(other_wallet, wallet), as_agent(agent, wallet)):
        r = await client.get("/v1/usage", headers=headers)
        assert forbidden(r), r.text


@pytest.mark.parametrize(
    ("query", "status", "days"),
    [
        ("to=0001-01-01", 422, None),  # was a 500: the default from fell before year 1
        ("to=0001-01-29", 422, None),
        ("to=0001-01-30", 200, ("0001-01-01", "0001-01-30")),
        ("from=0001-01-01&to=0001-01-01", 200, ("0001-01-01", "0001-01-01")),
        ("from=0001-01-01", 422, None),  # to today: more than 366 days
        ("to=9999-12-31", 200, ("9999-12-02", "9999-12-31")),
        ("from=9999-12-31&to=9999-12-31", 200, ("9999-12-31", "9999-12-31")),
        ("from=9999-12-31", 422, None),  # after today
        ("to=0000-12-31", 422, None),
        ("to=10000-01-01", 422, None),
        ("from=2023-02-29&to=2023-03-01", 422, None),
        ("from=2024-02-29&to=2024-03-01", 200, ("2024-02-29", "2024-03-01")),
    ],
)
def test_calendar_edges_are_422_never_500(
    server: str, query: str, status: int, days: tuple[str, str] | None
) -> None:
    """Through a real `engram serve` (its log is checked for tracebacks when it stops)."""
    r = httpx.get(f"{server}/v1/usage?{query}", headers=auth(Account.create()), timeout=30)
    assert r.status_code == status, r.text
    if status == 422:
        assert r.json()["error"]["code"] == "VALIDATION_ERROR", r.text
        assert r.json()["error"]["details"]["field"] in ("from", "to"), r.text
    else:
        usage = r.json()
        assert (usage["from"], usage["to"]) == days
        assert (usage["days"][0]["day"], usage["days"][-1]["day"]) == days
