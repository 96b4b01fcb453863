"""GET /v1/suggested (categories and review scores as app/suggested/service.py documents them),
core memories (pinned) on every path, GET /v1/tags, and the filters of GET /v1/memories/count."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient
from memoclaw import MemoClaw

from app.asgi import create_app
from tests.support.api import auth, store_batch
from tests.support.server import served

DAY = timedelta(days=1)
MISSING = "00000000-0000-0000-0000-000000000000"


async def _set(database_url: str, account, memory_id: str, **columns: Any) -> None:
    """Craft a memory's history (access counts, times) directly: the API never sets these."""
    conn = await asyncpg.connect(database_url)
    try:
        sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(columns, start=3))
        await conn.execute(
            f"UPDATE memories SET {sets} WHERE user_id = $1 AND id = $2::uuid",
            account.address.lower(),
            memory_id,
            *columns.values(),
        )
    finally:
        await conn.close()


async def _relate(database_url: str, account, source: str, targets: list[str]) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        for target in targets:
            await conn.execute(
                """INSERT INTO memory_relations (user_id, source_id, target_id, relation_type)
                   VALUES ($1, $2::uuid, $3::uuid, 'related_to')""",
                account.address.lower(),
                source,
                target,
            )
    finally:
        await conn.close()


def _ago(days: float) -> datetime:
    return datetime.now(UTC) - days * DAY


def _by_content(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["content"]: item for item in body["suggested"]}


# ---- suggested ---------------------------------------------------------------------------------

HOT = "The deploy script lives in ops/deploy.sh and needs the staging token"
FRESH = "Alice joined the platform team this week as a backend engineer"
STALE = "The user strongly prefers metric units in every report"
DECAYING = "Saw a flaky test in the payments suite on Tuesday afternoon"
ORDINARY = "The office coffee machine was replaced with an espresso model"
PINNED_OLD = "Observed that the CI cache is shared between branches"


def _nothing_suggested(**categories: int) -> dict[str, Any]:
    """GET /v1/suggested's whole answer when nothing is suggested; `categories`: the counts that
    are not 0 (a category filter still counts every category)."""
    counts = {"stale": 0, "fresh": 0, "hot": 0, "decaying": 0, **categories}
    return {"suggested": [], "suggestions": [], "categories": counts, "total": 0}


async def _four_categories(client: AsyncTestClient, database_url: str, account) -> list[str]:
    ids = await store_batch(
        client,
        account,
        [
            {"content": HOT, "importance": 0.5, "session_id": "s1", "agent_id": "a1"},
            {"content": FRESH, "importance": 0.6, "namespace": "team"},
            {"content": STALE, "importance": 0.9, "memory_type": "preference"},
            {"content": DECAYING, "importance": 0.3, "memory_type": "observation"},
            {"content": ORDINARY, "importance": 0.5},
            {
                "content": PINNED_OLD,
                "importance": 0.3,
                "memory_type": "observation",
                "pinned": True,
            },
        ],
    )
    hot, _fresh, stale, decaying, ordinary, pinned_old = ids
    await _set(database_url, account, hot, access_count=8, accessed_at=_ago(1), created_at=_ago(40))
    await _set(database_url, account, stale, accessed_at=_ago(40), created_at=_ago(100))
    await _set(database_url, account, decaying, accessed_at=_ago(30), created_at=_ago(60))
    await _set(
        database_url, account, ordinary, access_count=1, accessed_at=_ago(5), created_at=_ago(20)
    )
    await _set(database_url, account, pinned_old, accessed_at=_ago(100), created_at=_ago(100))
    return ids


async def test_suggested_categories_and_review_scores(
    client: AsyncTestClient, wallet, database_url
) -> None:
    await _four_categories(client, database_url, wallet)
    r = await client.get("/v1/suggested", headers=auth(wallet))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["categories"] == {"stale": 1, "fresh": 1, "hot": 1, "decaying": 1}
    assert body["total"] == 4
    items = _by_content(body)
    # ORDINARY fits no category; a pinned memory never decays and PINNED_OLD is not important
    assert set(items) == {HOT, FRESH, STALE, DECAYING}
    assert {c: items[c]["category"] for c in items} == {
        HOT: "hot",
        FRESH: "fresh",
        STALE: "stale",
        DECAYING: "decaying",
    }
    expected = {
        HOT: 0.5 * min(0.1 * 8, 1.0),  # importance × (access_boost − 1)
        FRESH: 0.6 * 1.0,  # importance × recency (just created)
        STALE: 0.9 * (1 - math.exp(-40 / 30)),  # importance × (1 − exp(−idle/30))
        DECAYING: 0.3 * (1 - 0.5 ** (30 / 14)),  # importance × (1 − type_decay)
    }
    for content, score in expected.items():
        assert items[content]["review_score"] == pytest.approx(score, abs=1e-3), content
    # best review score first
    scores = [item["review_score"] for item in body["suggested"]]
    assert scores == sorted(scores, reverse=True)
    assert [i["content"] for i in body["suggested"]] == [STALE, FRESH, HOT, DECAYING]
    # memory fields plus the suggestion's own, as MemoClaw's SDK parses them
    hot = items[HOT]
    assert hot["access_count"] == 8 and hot["relation_count"] == 0
    assert hot["accessed_at"] and hot["created_at"] and hot["user_id"] == wallet.address.lower()
    memory = (await client.get(f"/v1/memories/{hot['id']}", headers=auth(wallet))).json()
    use = ("access_count", "accessed_at")  # the read itself is a use (counted: a day has passed)
    assert {k: hot[k] for k in memory if k not in use} == {
        k: v for k, v in memory.items() if k not in use
    }
    assert memory["access_count"] == 9


async def test_suggested_filters_and_limit(client: AsyncTestClient, wallet, database_url) -> None:
    await _four_categories(client, database_url, wallet)
    h = auth(wallet)
    body = (await client.get("/v1/suggested?category=hot", headers=h)).json()
    assert [i["content"] for i in body["suggested"]] == [HOT]
    assert body["total"] == 1
    # categories always count the whole filtered set, whatever category asks for
    assert body["categories"] == {"stale": 1, "fresh": 1, "hot": 1, "decaying": 1}

    body = (await client.get("/v1/suggested?limit=2", headers=h)).json()
    assert [i["content"] for i in body["suggested"]] == [STALE, FRESH]
    assert body["total"] == 4

    body = (await client.get("/v1/suggested?namespace=team", headers=h)).json()
    assert [i["content"] for i in body["suggested"]] == [FRESH]
    assert body["categories"] == {"stale": 0, "fresh": 1, "hot": 0, "decaying": 0}
    for query in ("session_id=s1", "agent_id=a1", "session_id=s1&agent_id=a1"):
        body = (await client.get(f"/v1/suggested?{query}", headers=h)).json()
        assert [i["content"] for i in body["suggested"]] == [HOT], query
    body = (await client.get("/v1/suggested?namespace=team&category=stale", headers=h)).json()
    assert body == _nothing_suggested(fresh=1)
    body = (await client.get("/v1/suggested?namespace=nowhere", headers=h)).json()
    assert body == _nothing_suggested()


async def test_suggested_leaves_out_deleted_and_expired(
    client: AsyncTestClient, wallet, database_url
) -> None:
    hot, fresh, stale, decaying, *_ = await _four_categories(client, database_url, wallet)
    assert (await client.delete(f"/v1/memories/{hot}", headers=auth(wallet))).status_code == 200
    await _set(database_url, wallet, stale, expires_at=_ago(1))
    body = (await client.get("/v1/suggested", headers=auth(wallet))).json()
    assert {i["id"] for i in body["suggested"]} == {fresh, decaying}
    assert body["categories"] == {"stale": 0, "fresh": 1, "hot": 0, "decaying": 1}


async def test_suggested_rules_at_their_edges(
    client: AsyncTestClient, wallet, database_url
) -> None:
    ids = await store_batch(
        client,
        wallet,
        [
            # 4 accesses in the last day: not hot (5 needed); created long ago: not fresh
            {"content": "The release train leaves every second Thursday"},
            # 5 accesses but the last 8 days ago: not hot; importance 0.5: not stale
            {"content": "Grafana dashboards are in the observability folder"},
            # pinned and important, idle 40 days: stale (pinned memories are reviewed too)
            {
                "content": "Never deploy on Fridays without a rollback plan",
                "importance": 0.8,
                "pinned": True,
            },
            # fresh wins over stale for an important memory created 3 days ago
            {"content": "The quarterly planning doc moved to the shared drive", "importance": 0.95},
        ],
    )
    four, eight_days, pinned, recent = ids
    await _set(
        database_url, wallet, four, access_count=4, accessed_at=_ago(0.5), created_at=_ago(50)
    )
    await _set(
        database_url, wallet, eight_days, access_count=5, accessed_at=_ago(8), created_at=_ago(50)
    )
    await _set(database_url, wallet, pinned, accessed_at=_ago(40), created_at=_ago(200))
    await _set(database_url, wallet, recent, accessed_at=_ago(3), created_at=_ago(3))
    body = (await client.get("/v1/suggested", headers=auth(wallet))).json()
    got = {i["id"]: i["category"] for i in body["suggested"]}
    assert got == {pinned: "stale", recent: "fresh"}
    fresh = next(i for i in body["suggested"] if i["id"] == recent)
    assert fresh["review_score"] == pytest.approx(0.95 * math.exp(-3 / 30), abs=1e-3)


async def test_relations_slow_decay_and_count(
    client: AsyncTestClient, wallet, database_url
) -> None:
    contents = [
        "Noticed the build agent ran out of disk space",
        "Noticed the staging database restarted overnight",
        "Kubernetes pods are scheduled on the large node pool",
        "The VPN certificate rotates every ninety days",
        "Terraform state is stored in the ops bucket",
        "Sentry alerts go to the on-call channel",
        "Backups run nightly at two in the morning",
    ]
    ids = await store_batch(
        client,
        wallet,
        [{"content": c, "memory_type": "observation", "importance": 0.3} for c in contents],
    )
    linked, lonely, *others = ids
    for memory_id in ids:
        await _set(database_url, wallet, memory_id, accessed_at=_ago(20), created_at=_ago(20))
    await _relate(database_url, wallet, linked, others)  # 5 relations: half-life 14 d × 1.5
    body = (await client.get("/v1/suggested?limit=50", headers=auth(wallet))).json()
    items = {i["id"]: i for i in body["suggested"]}
    # 20 days idle: 0.5^(20/14) = 0.37 decays; 0.5^(20/21) = 0.52 with 5 relations does not
    assert linked not in items
    assert items[lonely]["category"] == "decaying" and items[lonely]["relation_count"] == 0
    for other in others:
        assert items[other]["relation_count"] == 1
        # effective importance 0.3 + 0.02, half-life 14 × 1.1
        decay = 0.5 ** (20 / (14 * 1.1))
        assert items[other]["review_score"] == pytest.approx(0.32 * (1 - decay), abs=1e-3)
    # a deleted other end no longer counts: 4 relations, half-life 14 d × 1.4, 0.5^(20/19.6)
    r = await client.delete(f"/v1/memories/{others[0]}", headers=auth(wallet))
    assert r.status_code == 200
    body = (await client.get("/v1/suggested?limit=50", headers=auth(wallet))).json()
    items = {i["id"]: i for i in body["suggested"]}
    assert others[0] not in items
    assert items[linked]["category"] == "decaying" and items[linked]["relation_count"] == 4


async def test_suggested_bad_input_is_422(client: AsyncTestClient, wallet) -> None:
    for query in (
        "category=bogus",
        "category=",
        "limit=0",
        "limit=51",
        "limit=x",
        "limit=-1",
        "namespace=a%00b",
    ):
        r = await client.get(f"/v1/suggested?{query}", headers=auth(wallet))
        assert r.status_code == 422, (query, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    assert (await client.get("/v1/suggested?limit=50", headers=auth(wallet))).status_code == 200
    assert (await client.get("/v1/suggested")).status_code == 401


async def test_suggested_is_per_wallet_and_free(
    client: AsyncTestClient, wallet, other_wallet, database_url
) -> None:
    await _four_categories(client, database_url, wallet)
    r = await client.get("/v1/suggested", headers=auth(other_wallet))
    assert r.json() == _nothing_suggested()
    assert r.headers["x-free-tier-remaining"] == "100"
    r = await client.get("/v1/suggested", headers=auth(wallet))
    assert r.headers["x-free-tier-remaining"] == "99"  # the batch store, not this call


# ---- core memories -----------------------------------------------------------------------------

CORE_PATHS = ("/v1/memories/core", "/v1/core-memories", "/v1/core")


async def test_core_lists_pins_and_unpins_on_every_path(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    always, second, third = await store_batch(
        client,
        wallet,
        [
            {"content": "The user's name is Dana and she works in Lisbon", "pinned": True},
            {"content": "Dana's team ships on Wednesdays", "namespace": "work"},
            {"content": "Dana is allergic to peanuts", "memory_type": "correction"},
        ],
    )
    for path in CORE_PATHS:
        body = (await client.get(path, headers=h)).json()
        assert [m["id"] for m in body["memories"]] == [always] and body["total"] == 1, path

    r = await client.post("/v1/memories/core", json={"memory_id": second}, headers=h)
    assert r.status_code == 200 and r.json() == {"pinned": True, "id": second}
    r = await client.post("/v1/core", json={"id": third}, headers=h)
    assert r.json() == {"pinned": True, "id": third}
    r = await client.post("/v1/core-memories", json={"memory_id": third, "id": third}, headers=h)
    assert r.json() == {"pinned": True, "id": third}  # already pinned: a no-op, still 200
    assert r.headers["x-free-tier-remaining"] == "99"  # free: only the batch store counted

    listed = (await client.get("/v1/memories?pinned=true", headers=h)).json()["memories"]
    for path in CORE_PATHS:
        body = (await client.get(path, headers=h)).json()
        assert body["total"] == 3
        assert body["memories"] == listed  # the list's wire shape and order
    body = (await client.get("/v1/memories/core?limit=1&offset=1", headers=h)).json()
    assert body["total"] == 3 and [m["id"] for m in body["memories"]] == [listed[1]["id"]]
    body = (await client.get("/v1/core?namespace=work", headers=h)).json()
    assert [m["id"] for m in body["memories"]] == [second]

    for path, memory_id in (("/v1/memories/core", always), ("/v1/core", second)):
        r = await client.delete(f"{path}/{memory_id}", headers=h)
        assert r.status_code == 200 and r.json() == {"unpinned": True, "id": memory_id}
        memory = (await client.get(f"/v1/memories/{memory_id}", headers=h)).json()
        assert memory["pinned"] is False and "deleted_at" not in memory
    r = await client.delete(f"/v1/core-memories/{third}", headers=h)
    assert r.json() == {"unpinned": True, "id": third}
    r = await client.delete(f"/v1/core-memories/{third}", headers=h)
    assert r.status_code == 200  # already unpinned: a no-op
    assert (await client.get("/v1/core", headers=h)).json()["total"] == 0


async def test_core_immutable_memories_refuse_pin_changes(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    frozen, frozen_pinned = await store_batch(
        client,
        wallet,
        [
            {"content": "Contract signed on 2024-03-01", "immutable": True},
            {"content": "Company founded in 1999", "immutable": True, "pinned": True},
        ],
    )
    r = await client.post("/v1/memories/core", json={"memory_id": frozen}, headers=h)
    assert r.status_code == 409 and r.json()["error"]["code"] == "CONFLICT"
    assert (await client.get(f"/v1/memories/{frozen}", headers=h)).json()["pinned"] is False
    r = await client.delete(f"/v1/memories/core/{frozen_pinned}", headers=h)
    assert r.status_code == 409
    assert (await client.get(f"/v1/memories/{frozen_pinned}", headers=h)).json()["pinned"] is True
    # asking for the state it already has changes nothing, so it is allowed
    r = await client.post("/v1/memories/core", json={"memory_id": frozen_pinned}, headers=h)
    assert r.json() == {"pinned": True, "id": frozen_pinned}
    r = await client.delete(f"/v1/memories/core/{frozen}", headers=h)
    assert r.json() == {"unpinned": True, "id": frozen}


async def test_core_is_per_wallet(client: AsyncTestClient, wallet, other_wallet) -> None:
    mine, pinned = await store_batch(
        client,
        wallet,
        [
            {"content": "My secret recipe uses saffron"},
            {"content": "Pinned: I live in Oslo", "pinned": True},
        ],
    )
    theirs = auth(other_wallet)
    for path in CORE_PATHS:
        r = await client.get(path, headers=theirs)
        assert r.json()["memories"] == [] and r.json()["total"] == 0
    r = await client.post("/v1/memories/core", json={"memory_id": mine}, headers=theirs)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    for path in CORE_PATHS:
        r = await client.delete(f"{path}/{pinned}", headers=theirs)
        assert r.status_code == 404, path
        assert "Oslo" not in r.text
    h = auth(wallet)
    assert (await client.get(f"/v1/memories/{mine}", headers=h)).json()["pinned"] is False
    assert (await client.get(f"/v1/memories/{pinned}", headers=h)).json()["pinned"] is True


async def test_core_bad_input_is_422_and_changes_nothing(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    (memory_id,) = await store_batch(client, wallet, [{"content": "Timezone is Europe/Berlin"}])
    bodies = [
        {},
        {"memory_id": None},
        {"memory_id": ""},
        {"memory_id": "not-a-uuid"},
        {"memory_id": memory_id, "id": MISSING},
        {"memory_id": 42},
        {"memory_id": "x" * 65},
    ]
    for body in bodies:
        r = await client.post("/v1/memories/core", json=body, headers=h)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    r = await client.post("/v1/memories/core", content=b"not json", headers=h)
    assert r.status_code in (400, 422)
    r = await client.post("/v1/memories/core", json={"memory_id": MISSING}, headers=h)
    assert r.status_code == 404
    r = await client.delete("/v1/memories/core/not-a-uuid", headers=h)
    assert r.status_code == 422
    r = await client.delete(f"/v1/memories/core/{MISSING}", headers=h)
    assert r.status_code == 404
    for query in ("limit=0", "limit=1001", "offset=-1", "namespace=%00"):
        r = await client.get(f"/v1/memories/core?{query}", headers=h)
        assert r.status_code == 422, query
    assert (await client.get(f"/v1/memories/{memory_id}", headers=h)).json()["pinned"] is False
    assert (await client.get("/v1/memories/core")).status_code == 401
    # a deleted memory cannot be pinned
    assert (await client.delete(f"/v1/memories/{memory_id}", headers=h)).status_code == 200
    r = await client.post("/v1/memories/core", json={"memory_id": memory_id}, headers=h)
    assert r.status_code == 404


async def test_core_routes_are_matched_before_memory_ids(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    assert (await client.get("/v1/memories/core", headers=h)).status_code == 200
    # other methods on the core path are not mistaken for a memory id either
    r = await client.patch("/v1/memories/core", json={"importance": 1}, headers=h)
    assert r.status_code in (405, 422)


# ---- tags --------------------------------------------------------------------------------------


async def test_tags_counted_per_wallet_and_namespace(
    client: AsyncTestClient, wallet, other_wallet
) -> None:
    h = auth(wallet)
    ids = await store_batch(
        client,
        wallet,
        [
            {"content": "Prefers vim keybindings", "tags": ["editor", "ui"]},
            {"content": "Uses a dark theme", "metadata": {"tags": ["ui"]}},
            {"content": "Deploys with helm", "tags": ["ops"], "namespace": "work"},
            {
                "content": "Zsh is the default shell",
                "tags": ["shell"],
                "session_id": "s9",
                "agent_id": "a9",
            },
            {"content": "No tags on this one"},
        ],
    )
    r = await client.get("/v1/tags", headers=h)
    assert r.status_code == 200
    assert r.json() == {
        # most used first, then by name
        "tags": [
            {"tag": "ui", "count": 2},
            {"tag": "editor", "count": 1},
            {"tag": "ops", "count": 1},
            {"tag": "shell", "count": 1},
        ],
        "counts": {"ui": 2, "editor": 1, "ops": 1, "shell": 1},
        "total": 4,
    }
    assert r.headers["x-free-tier-remaining"] == "99"
    assert (await client.get("/v1/tags?namespace=work", headers=h)).json()["counts"] == {"ops": 1}
    assert (await client.get("/v1/tags?session_id=s9", headers=h)).json()["counts"] == {"shell": 1}
    assert (await client.get("/v1/tags?agent_id=a9", headers=h)).json()["counts"] == {"shell": 1}
    assert (await client.get("/v1/tags?namespace=none", headers=h)).json() == {
        "tags": [],
        "counts": {},
        "total": 0,
    }
    # deleted memories' tags vanish
    assert (await client.delete(f"/v1/memories/{ids[1]}", headers=h)).status_code == 200
    assert (await client.get("/v1/tags", headers=h)).json()["counts"]["ui"] == 1

    assert (await client.get("/v1/tags", headers=auth(other_wallet))).json() == {
        "tags": [],
        "counts": {},
        "total": 0,
    }
    assert (await client.get("/v1/tags")).status_code == 401
    assert (await client.get("/v1/tags?namespace=%00", headers=h)).status_code == 422


# ---- count -------------------------------------------------------------------------------------


async def test_count_supports_the_list_filters(
    client: AsyncTestClient, wallet, other_wallet, database_url
) -> None:
    h = auth(wallet)
    old, middle, new = await store_batch(
        client,
        wallet,
        [
            {
                "content": "Old fact about the billing system",
                "tags": ["billing"],
                "memory_type": "project",
                "namespace": "work",
                "session_id": "s1",
            },
            {
                "content": "Middle fact about the search cluster",
                "tags": ["search", "ops"],
                "agent_id": "a1",
                "pinned": True,
            },
            {"content": "New fact about the mobile app", "tags": ["mobile"], "immutable": True},
        ],
    )
    await _set(database_url, wallet, old, created_at=datetime(2024, 1, 10, tzinfo=UTC))
    await _set(database_url, wallet, middle, created_at=datetime(2024, 6, 10, tzinfo=UTC))

    async def count(query: str = "") -> int:
        r = await client.get(f"/v1/memories/count?{query}", headers=h)
        assert r.status_code == 200, (query, r.text)
        return int(r.json()["count"])

    assert await count() == 3
    cases = {
        "namespace=work": 1,
        "namespace=default": 2,
        "tags=billing": 1,
        "tags=billing,mobile": 2,
        "tags=billing&tags=ops": 2,
        "memory_type=project": 1,
        "memory_type=general": 2,
        "session_id=s1": 1,
        "agent_id=a1": 1,
        "pinned=true": 1,
        "immutable=true": 1,
        "after=2024-03-01": 2,
        "since=2024-03-01": 2,
        "before=2024-03-01": 1,
        "until=2024-03-01": 1,
        "since=2024-03-01&until=2025-01-01": 1,
        "after=2024-01-01T00:00:00Z&before=2024-02-01T00:00:00Z": 1,
        "namespace=default&tags=search&pinned=true": 1,
    }
    for query, expected in cases.items():
        assert await count(query) == expected, query
    assert (await client.delete(f"/v1/memories/{old}", headers=h)).status_code == 200
    assert await count() == 2
    assert await count("include_deleted=true") == 3
    r = await client.get("/v1/memories/count", headers=auth(other_wallet))
    assert r.json() == {"count": 0}
    for query in ("memory_type=bogus", "since=yesterday", "before=2024-13-01", "pinned=maybe"):
        r = await client.get(f"/v1/memories/count?{query}", headers=h)
        assert r.status_code == 422, (query, r.text)
    assert new  # stored and counted above


async def test_new_routes_need_identity(client: AsyncTestClient) -> None:
    stranger = Account.create()
    for path in ("/v1/suggested", "/v1/tags", *CORE_PATHS):
        assert (await client.get(path)).status_code == 401, path
        assert (await client.get(path, headers=auth(stranger))).status_code == 200, path


# ---- MemoClaw's SDK parses every answer --------------------------------------------------------


def test_sdk_reads_suggested_and_core(settings, tmp_path) -> None:
    account = Account.create()
    with (
        served(create_app(settings)) as url,
        MemoClaw(
            private_key=account.key.hex(),
            base_url=url,
            max_retries=0,
            config_path=tmp_path / "no-memoclaw-config.json",
        ) as sdk,
    ):
        stored = sdk.store("The user's standup is at 9:30 every weekday", importance=0.7)
        suggested = sdk.suggested(limit=5)
        assert suggested.total == 1 and suggested.categories["fresh"] == 1
        item = suggested.suggested[0]
        assert item.id == stored.id and item.category == "fresh"
        assert item.review_score == pytest.approx(0.7, abs=1e-3) and item.relation_count == 0
        assert sdk.suggested(category="hot").suggested == []

        pinned = sdk.pin_core_memory(stored.id)
        assert pinned.pinned is True and pinned.id == stored.id
        core = sdk.core_memories(limit=10)
        assert core.total == 1 and core.memories[0].id == stored.id and core.memories[0].pinned
        unpinned = sdk.unpin_core_memory(stored.id)
        assert unpinned.unpinned is True and unpinned.id == stored.id
        assert sdk.core_memories().total == 0
