"""Every memory endpoint over HTTP with the contract's paths, defaults and shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.memory import dedup
from tests.support.api import auth, store_memory
from tests.support.facts import ALLERGY, ALLERGY_AGAIN, FACTS


async def test_store_applies_contract_defaults(client: AsyncTestClient, wallet) -> None:
    stored = await store_memory(client, wallet, FACTS[0])
    assert stored["memory"]["content"] == FACTS[0] and "content" not in stored
    m = (await client.get(f"/v1/memories/{stored['id']}", headers=auth(wallet))).json()
    assert m["id"] == stored["id"] and m["user_id"] == wallet.address.lower()
    assert m["namespace"] == "default" and m["importance"] == 0.5 and m["memory_type"] == "general"
    assert m["metadata"] == {} and m["pinned"] is False and m["immutable"] is False
    # reading it is its first use (app/memory/scoring.py: an access is a use)
    assert m["accessed_at"] and m["access_count"] == 1 and "deleted_at" not in m
    assert m["embedding_model"] == "all-MiniLM-L6-v2"
    # read again within the counting period: the same memory, not counted again
    again = (await client.get(f"/v1/memories/{stored['id']}", headers=auth(wallet))).json()
    assert again["access_count"] == 1 and again["accessed_at"] == m["accessed_at"]
    assert again == m
    other = Account.create()  # another wallet's read: no such memory, and nothing counted
    r = await client.get(f"/v1/memories/{stored['id']}", headers=auth(other))
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    await client.delete(f"/v1/memories/{stored['id']}", headers=auth(wallet))
    r = await client.get(f"/v1/memories/{stored['id']}", headers=auth(wallet))
    assert r.status_code == 404


async def test_store_accepts_top_level_tags_and_metadata_tags(
    client: AsyncTestClient, wallet
) -> None:
    stored = await store_memory(
        client, wallet, FACTS[1], tags=["ops"], metadata={"tags": ["deploy"], "k": 1}
    )
    m = (await client.get(f"/v1/memories/{stored['id']}", headers=auth(wallet))).json()
    assert m["metadata"] == {"tags": ["deploy", "ops"], "k": 1}


async def test_store_dedups_near_identical_content(client: AsyncTestClient, wallet) -> None:
    first = await store_memory(client, wallet, ALLERGY, tags=["health"])
    again = await store_memory(
        client, wallet, ALLERGY_AGAIN, deduplicated=True, importance=0.9, tags=["food"]
    )
    assert again["deduplicated"] is True and again["id"] == first["id"]
    m = (await client.get(f"/v1/memories/{first['id']}", headers=auth(wallet))).json()
    assert m["importance"] == 0.9 and m["metadata"]["tags"] == ["health", "food"]
    other_ns = await store_memory(client, wallet, ALLERGY, namespace="work")
    assert other_ns["deduplicated"] is False and other_ns["id"] != first["id"]
    unrelated = await store_memory(client, wallet, FACTS[3])
    assert unrelated["deduplicated"] is False


async def test_store_batch_is_one_transaction_and_dedups_within(
    client: AsyncTestClient, wallet
) -> None:
    items = [{"content": f} for f in FACTS[:5]] + [{"content": FACTS[0]}]
    r = await client.post("/v1/store/batch", json={"memories": items}, headers=auth(wallet))
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["count"] == 6 and body["stored"] is True and body["deduplicated_count"] == 1
    assert body["ids"][5] == body["ids"][0] and len(set(body["ids"])) == 5
    assert r.headers["x-free-tier-remaining"] == "99"  # one call, whatever the batch size
    bad = [*items[:2], {"content": "x", "memory_type": "nonsense"}]
    r = await client.post("/v1/store/batch", json={"memories": bad}, headers=auth(wallet))
    assert r.status_code == 422
    count = (await client.get("/v1/memories/count", headers=auth(wallet))).json()["count"]
    assert count == 5


@pytest.mark.parametrize("lookup", ["scan", "index"])
async def test_store_batch_dedups_like_one_by_one_in_a_few_statements(
    client: AsyncTestClient, wallet, monkeypatch: pytest.MonkeyPatch, lookup: str
) -> None:
    """Within the batch and against stored memories, exact and near duplicates merge into the
    right memory, in order, and the batch costs a fixed number of statements (merges aside)."""
    if lookup == "index":  # the near-duplicate lookup walks the HNSW graph, as for big wallets
        monkeypatch.setattr(dedup, "DEDUP_SCAN_MAX_ROWS", 0)
    stored = await store_memory(client, wallet, "Bob drives a red bicycle to work", tags=["stored"])
    statements: list[str] = []
    original = asyncpg.Connection._execute

    async def counting(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        statements.append(query)
        return await original(self, query, *args, **kwargs)

    items = [
        {"content": "Alice is allergic to peanuts", "importance": 0.3},  # 0 new
        {"content": FACTS[3]},  # 1 new
        {"content": "Alice is allergic to peanuts.", "importance": 0.8, "tags": ["b"]},  # 2 ~0
        {"content": "Bob drives a red bicycle to work."},  # 3 ~stored
        {"content": "Alice is allergic to peanuts", "namespace": "work"},  # 4 new: other ns
        {"content": FACTS[3], "pinned": True},  # 5 exact 1
    ]
    monkeypatch.setattr(asyncpg.Connection, "_execute", counting)
    r = await client.post("/v1/store/batch", json={"memories": items}, headers=auth(wallet))
    monkeypatch.setattr(asyncpg.Connection, "_execute", original)
    assert r.status_code == 201, r.text
    ids = r.json()["ids"]
    assert r.json()["deduplicated_count"] == 3
    assert ids[2] == ids[0] and ids[3] == stored["id"] and ids[5] == ids[1]
    assert len({ids[0], ids[1], ids[4], stored["id"]}) == 4
    merged = (await client.get(f"/v1/memories/{ids[0]}", headers=auth(wallet))).json()
    assert merged["importance"] == 0.8 and merged["metadata"]["tags"] == ["b"]
    assert (await client.get(f"/v1/memories/{ids[1]}", headers=auth(wallet))).json()["pinned"]
    memory_statements = [q for q in statements if "memories" in q]
    # lock, exact lookup, nearest lookup, one insert, three merges (plus history and the like)
    assert sum("INSERT INTO memories" in q for q in memory_statements) == 1
    assert sum("pg_advisory_xact_lock" in q for q in statements) == 1


async def test_store_batch_limits(client: AsyncTestClient, wallet) -> None:
    for memories in ([], [{"content": f"m {i}"} for i in range(101)]):
        r = await client.post("/v1/store/batch", json={"memories": memories}, headers=auth(wallet))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"


async def test_list_filters_paginates_and_totals(client: AsyncTestClient, wallet) -> None:
    for i, fact in enumerate(FACTS[:12]):
        await store_memory(
            client,
            wallet,
            fact,
            namespace="a" if i % 2 else "b",
            memory_type="decision" if i % 3 == 0 else "general",
            tags=["t1"] if i < 4 else ["t2"],
            session_id="s1" if i < 6 else "s2",
            agent_id="agent-x",
            pinned=i == 0,
        )
    h = auth(wallet)
    page = (await client.get("/v1/memories?limit=5&offset=0", headers=h)).json()
    assert page["total"] == 12 and len(page["memories"]) == 5 and page["limit"] == 5
    page3 = (await client.get("/v1/memories?limit=5&offset=10", headers=h)).json()
    assert len(page3["memories"]) == 2 and page3["offset"] == 10
    past = (await client.get("/v1/memories?limit=5&offset=40", headers=h)).json()
    assert past["memories"] == [] and past["total"] == 12  # past the end: still the total
    empty = (await client.get("/v1/memories?namespace=none-here", headers=h)).json()
    assert empty["memories"] == [] and empty["total"] == 0
    ids = [m["id"] for m in page["memories"]]
    assert len(set(ids)) == 5
    created = [m["created_at"] for m in page["memories"]]
    assert created == sorted(created, reverse=True)

    async def total(query: str) -> int:
        r = await client.get(f"/v1/memories?{query}", headers=h)
        assert r.status_code == 200, r.text
        return int(r.json()["total"])

    assert await total("namespace=a") == 6
    assert await total("memory_type=decision") == 4
    assert await total("tags=t1") == 4
    assert await total("tags=t1,t2") == 12
    assert await total("tags=t1&tags=nope") == 4
    assert await total("session_id=s2&namespace=b") == 3
    assert await total("pinned=true") == 1
    assert await total("agent_id=agent-x") == 12
    future = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert await total(f"before={future}") == 12 and await total(f"since={future}") == 0
    assert (await client.get("/v1/memories/count?namespace=b", headers=h)).json() == {"count": 6}
    r = await client.get("/v1/memories?limit=1001", headers=h)
    assert r.status_code == 422


async def test_patch_updates_fields_and_reembeds_only_on_content_change(
    client: AsyncTestClient, wallet, database_url
) -> None:
    stored = await store_memory(client, wallet, FACTS[8])
    h = auth(wallet)

    async def embedding() -> str:
        conn = await asyncpg.connect(database_url)
        try:
            return str(
                await conn.fetchval(
                    "SELECT embedding::text FROM memories WHERE id = $1", stored["id"]
                )
            )
        finally:
            await conn.close()

    before = await embedding()
    r = await client.patch(
        f"/v1/memories/{stored['id']}",
        json={"importance": 0.9, "pinned": True, "metadata": {"a": 1}},
        headers=h,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["importance"] == 0.9 and body["pinned"] is True and body["metadata"] == {"a": 1}
    assert body["tokens_used"] == 0 and await embedding() == before
    new_content = f"{FACTS[9]} ({wallet.address})"  # unique: the embedding cache cannot answer
    r = await client.patch(f"/v1/memories/{stored['id']}", json={"content": new_content}, headers=h)
    assert r.json()["content"] == new_content and r.json()["tokens_used"] > 0
    assert await embedding() != before
    recall = await client.post(
        "/v1/recall", json={"query": "tabs or spaces in the Makefile"}, headers=h
    )
    assert recall.json()["memories"][0]["id"] == stored["id"]


async def test_expires_at_set_clear_and_vanish(
    client: AsyncTestClient, wallet, database_url
) -> None:
    h = auth(wallet)
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    stored = await store_memory(client, wallet, FACTS[10], expires_at=soon)
    m = (await client.get(f"/v1/memories/{stored['id']}", headers=h)).json()
    assert m["expires_at"] is not None
    r = await client.patch(f"/v1/memories/{stored['id']}", json={"expires_at": None}, headers=h)
    assert "expires_at" not in r.json()
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    r = await client.post("/v1/store", json={"content": FACTS[11], "expires_at": past}, headers=h)
    assert r.status_code == 422
    # a memory whose time has come vanishes from every read
    gone = await store_memory(client, wallet, FACTS[12], expires_at=soon)
    conn = await asyncpg.connect(database_url)
    await conn.execute(
        "UPDATE memories SET expires_at = now() - interval '1 s' WHERE id = $1", gone["id"]
    )
    await conn.close()
    assert (await client.get(f"/v1/memories/{gone['id']}", headers=h)).status_code == 404
    listed = (await client.get("/v1/memories", headers=h)).json()
    assert gone["id"] not in [m["id"] for m in listed["memories"]] and listed["total"] == 1
    recall = (await client.post("/v1/recall", json={"query": FACTS[12]}, headers=h)).json()
    assert gone["id"] not in [m["id"] for m in recall["memories"]]
    search = (await client.post("/v1/search", json={"query": "lasagna"}, headers=h)).json()
    assert search["total"] == 0
    stats = (await client.get("/v1/stats", headers=h)).json()
    assert stats["total_memories"] == 1


async def test_immutable_memories_refuse_update_and_delete(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    stored = await store_memory(client, wallet, FACTS[13], immutable=True)
    for method, kwargs in (("PATCH", {"json": {"importance": 1}}), ("DELETE", {})):
        r = await client.request(method, f"/v1/memories/{stored['id']}", headers=h, **kwargs)
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "CONFLICT"
    mutable = await store_memory(client, wallet, FACTS[14])
    r = await client.patch(f"/v1/memories/{mutable['id']}", json={"immutable": True}, headers=h)
    assert r.json()["immutable"] is True
    r = await client.patch(f"/v1/memories/{mutable['id']}", json={"immutable": False}, headers=h)
    assert r.status_code == 409


async def test_delete_is_soft(client: AsyncTestClient, wallet, database_url) -> None:
    h = auth(wallet)
    stored = await store_memory(client, wallet, FACTS[15])
    r = await client.delete(f"/v1/memories/{stored['id']}", headers=h)
    assert r.status_code == 200 and r.json() == {"deleted": True, "id": stored["id"]}
    assert (await client.get(f"/v1/memories/{stored['id']}", headers=h)).status_code == 404
    assert (await client.delete(f"/v1/memories/{stored['id']}", headers=h)).status_code == 404
    conn = await asyncpg.connect(database_url)
    deleted_at = await conn.fetchval("SELECT deleted_at FROM memories WHERE id = $1", stored["id"])
    await conn.close()
    assert deleted_at is not None
    listed = (await client.get("/v1/memories?include_deleted=true", headers=h)).json()
    assert listed["memories"][0]["deleted_at"] is not None


async def test_bulk_delete_both_paths(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    ids = [(await store_memory(client, wallet, f))["id"] for f in FACTS[16:20]]
    keep = (await store_memory(client, wallet, FACTS[20], immutable=True))["id"]
    r = await client.post("/v1/memories/bulk-delete", json={"ids": ids[:2]}, headers=h)
    assert r.status_code == 200 and r.json()["deleted"] == 2
    missing = "00000000-0000-0000-0000-000000000000"
    r = await client.post(
        "/v1/memories/batch-delete",
        json={"ids": [ids[2], ids[3], keep, missing, "not-a-uuid"]},
        headers=h,
    )
    body = r.json()
    assert body["deleted"] == 2
    assert [x["deleted"] for x in body["results"]] == [True, True, False, False, False]
    assert "immutable" in body["results"][2]["error"]
    assert (await client.get("/v1/memories/count", headers=h)).json()["count"] == 1


async def test_batch_update_both_paths(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    a = (await store_memory(client, wallet, FACTS[21]))["id"]
    b = (await store_memory(client, wallet, FACTS[22]))["id"]
    frozen = (await store_memory(client, wallet, FACTS[23], immutable=True))["id"]
    missing = "00000000-0000-0000-0000-000000000000"
    new_content = f"{FACTS[24]} ({wallet.address})"  # unique: no embedding-cache hit
    updates = [
        {"id": a, "importance": 0.1},
        {"id": b, "content": new_content},
        {"id": frozen, "pinned": True},
        {"id": missing, "pinned": True},
    ]
    r = await client.patch("/v1/memories/batch", json={"updates": updates}, headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["updated"] == 2 and body["failed"] == 2 and body["tokens_used"] > 0
    assert [x["updated"] for x in body["results"]] == [True, True, False, False]
    assert {e["status"] for e in body["errors"]} == {409, 404}
    assert (await client.get(f"/v1/memories/{b}", headers=h)).json()["content"] == new_content
    r = await client.post(
        "/v1/memories/batch-update", json={"updates": [{"id": a, "importance": 0.7}]}, headers=h
    )
    assert r.json()["updated"] == 1
    assert (await client.get(f"/v1/memories/{a}", headers=h)).json()["importance"] == 0.7
    assert r.headers["x-free-tier-remaining"] == "95"  # 3 stores + 2 batch calls


async def test_search_keyword_both_forms(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    await store_memory(client, wallet, "The VPN disconnects when the laptop sleeps", tags=["it"])
    await store_memory(
        client, wallet, "Backups are encrypted with age and stored in object storage"
    )
    await store_memory(
        client, wallet, "Error code ERR_42_X appears on the checkout page", namespace="shop"
    )
    r = await client.post("/v1/search", json={"query": "laptop VPN"}, headers=h)
    body = r.json()
    assert r.status_code == 200 and body["total"] == 1 and body["query"] == "laptop VPN"
    assert body["memories"][0]["user_id"] == wallet.address.lower()
    r = await client.get("/v1/memories/search?q=encrypted", headers=h)
    assert r.json()["total"] == 1
    r = await client.get("/v1/memories/search?q=ERR_42_X&namespace=shop", headers=h)
    assert r.json()["total"] == 1  # literal identifiers match too
    r = await client.post("/v1/search", json={"query": "laptop", "tags": ["nope"]}, headers=h)
    assert r.json()["total"] == 0
    r = await client.get("/v1/memories/search?q=laptop&tags=it", headers=h)
    assert r.json()["total"] == 1
    r = await client.post("/v1/search", json={"query": "x" * 1001}, headers=h)
    assert r.status_code == 422
    free = (await client.get("/v1/free-tier/status", headers=h)).json()
    assert free["free_tier_used"] == 3  # searches are free


async def test_namespaces_and_stats(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    empty = (await client.get("/v1/stats", headers=h)).json()
    assert empty["total_memories"] == 0 and empty["avg_importance"] == 0
    assert empty["by_type"] == [] and "oldest_memory" not in empty
    await store_memory(client, wallet, FACTS[25], namespace="home", importance=0.2, pinned=True)
    await store_memory(
        client, wallet, FACTS[26], namespace="home", importance=0.4, memory_type="decision"
    )
    third = await store_memory(client, wallet, FACTS[27], importance=0.6)
    ns = (await client.get("/v1/namespaces", headers=h)).json()
    assert ns["total"] == 2
    assert ns["namespaces"][0]["name"] == "home" and ns["namespaces"][0]["count"] == 2
    assert ns["namespaces"][0]["last_memory_at"]
    stats = (await client.get("/v1/stats", headers=h)).json()
    assert stats["total_memories"] == 3 and stats["pinned_count"] == 1
    assert stats["never_accessed"] == 3 and stats["total_accesses"] == 0
    assert abs(stats["avg_importance"] - 0.4) < 1e-6
    assert {"memory_type": "decision", "count": 1} in stats["by_type"]
    assert {"namespace": "home", "count": 2} in stats["by_namespace"]
    await client.post("/v1/recall", json={"query": FACTS[27], "limit": 1}, headers=h)
    stats = (await client.get("/v1/stats", headers=h)).json()
    assert stats["never_accessed"] == 3  # a recall is not an access
    await client.get(f"/v1/memories/{third['id']}", headers=h)  # a read is
    stats = (await client.get("/v1/stats", headers=h)).json()
    assert stats["never_accessed"] == 2 and stats["total_accesses"] == 1


async def test_static_routes_win_over_memory_id(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    for path in ("/v1/memories/count", "/v1/memories/search?q=x"):
        assert (await client.get(path, headers=h)).status_code == 200, path
    r = await client.get("/v1/memories/not-a-uuid", headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR"


async def test_a_batch_stores_each_memory_with_its_own_vector_exactly(
    client: AsyncTestClient, app, wallet, database_url
) -> None:
    contents = [FACTS[1], FACTS[2], FACTS[3]]
    r = await client.post(
        "/v1/store/batch",
        json={"memories": [{"content": c} for c in contents]},
        headers=auth(wallet),
    )
    assert r.status_code == 201, r.text
    ids = r.json()["ids"]
    expected = (await app.state.embedder.embed(contents)).vectors
    conn = await asyncpg.connect(database_url)
    try:
        await register_vector(conn)
        for memory_id, vector in zip(ids, expected, strict=True):
            stored = await conn.fetchval("SELECT embedding FROM memories WHERE id = $1", memory_id)
            assert np.array_equal(stored.to_numpy(), vector.astype(np.float32)), memory_id
    finally:
        await conn.close()
