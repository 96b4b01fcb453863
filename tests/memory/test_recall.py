"""Recall: the 4-signal score checked by hand, decay, filters that never starve the top k."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.ai.embedders import LocalMiniLMEmbedder
from app.memory import recall as memory_recall
from app.memory.filters import MemoryFilter
from app.memory.repository import reads as memory_reads
from app.memory.repository import recall as memory_repository
from tests.support.api import auth, store_memory
from tests.support.facts import FACTS


async def _db(database_url: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(database_url)
    await register_vector(conn)
    return conn


async def test_score_matches_the_formula_by_hand(
    client: AsyncTestClient, wallet, database_url
) -> None:
    content = "The planning meeting moved to the large conference room"
    query = "where is the quarterly planning meeting"
    memory_id = (
        await store_memory(client, wallet, content, importance=0.7, memory_type="decision")
    )["id"]
    # a second memory that matches the query's words better: keyword_match is relative to it
    await store_memory(client, wallet, "Agenda of the quarterly planning meeting")
    days_old, days_since_access, accesses = 10.0, 4.0, 3
    conn = await _db(database_url)
    await conn.execute(
        """UPDATE memories SET created_at = now() - make_interval(secs => $2),
                  accessed_at = now() - make_interval(secs => $3), access_count = $4
           WHERE user_id = $5 AND id = $1""",
        memory_id,
        days_old * 86400,
        days_since_access * 86400,
        accesses,
        wallet.address.lower(),
    )
    # keyword_match: the summed IDF of the query's words in this memory (BM25's idf over the
    # wallet's memories), over the best among the candidates
    docs = await conn.fetch(
        "SELECT id, tsvector_to_array(tsv) AS lexemes FROM memories WHERE user_id = $1",
        wallet.address.lower(),
    )
    words = await conn.fetchval("SELECT tsvector_to_array(to_tsvector('english', $1))", query)
    assert sorted(words) == ["meet", "plan", "quarter"]
    n_docs = len(docs)
    idf = {}
    for word in words:
        df = sum(word in d["lexemes"] for d in docs)
        idf[word] = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    raw = {str(d["id"]): sum(idf[w] for w in words if w in d["lexemes"]) for d in docs}
    keyword = raw[memory_id] / max(raw.values())
    await conn.close()
    vectors = (await LocalMiniLMEmbedder().embed([query, content])).vectors
    vector = float(np.dot(vectors[0], vectors[1]))

    r = await client.post("/v1/recall", json={"query": query}, headers=auth(wallet))
    hit = next(m for m in r.json()["memories"] if m["id"] == memory_id)
    signals = hit["_signals"]

    recency = math.exp(-days_old / 30)
    hybrid = vector * 0.55 + keyword * 0.25 + recency * 0.20
    relevance = (vector * 0.55 + keyword * 0.25) / 0.8  # Engram's documented choice
    context_importance = 0.7 * (0.5 + 0.5 * relevance)
    access_boost = min(1 + accesses * 0.1, 2.0)
    type_decay = 0.5 ** (days_since_access / 90)  # decision: 90-day half-life
    expected = hybrid * context_importance * access_boost * type_decay

    assert signals["vector"] == pytest.approx(vector, abs=1e-4)
    assert signals["keyword"] == pytest.approx(keyword, abs=1e-5) and 0 < keyword < 1
    assert signals["recency"] == pytest.approx(recency, abs=1e-4)
    assert signals["base_importance"] == pytest.approx(0.7)
    assert signals["effective_importance"] == pytest.approx(0.7)
    assert signals["context_importance"] == pytest.approx(context_importance, abs=1e-4)
    assert signals["relation_count"] == 0
    assert signals["type_decay"] == pytest.approx(type_decay, abs=1e-4)
    assert hit["score"] == pytest.approx(expected, abs=1e-4)
    assert hit["similarity"] == pytest.approx(vector, abs=1e-4)
    assert hit["access_count"] == accesses  # a recall is not an access (scoring.py)


async def test_decay_per_type_and_pinning(client: AsyncTestClient, wallet, database_url) -> None:
    half_lives = {
        "correction": 180,
        "preference": 180,
        "decision": 90,
        "project": 30,
        "observation": 14,
        "general": 60,
    }
    ids = {}
    for i, memory_type in enumerate(half_lives):
        stored = await store_memory(client, wallet, FACTS[i], memory_type=memory_type)
        ids[memory_type] = stored["id"]
    pinned = (
        await store_memory(client, wallet, FACTS[10], memory_type="observation", pinned=True)
    )["id"]
    conn = await _db(database_url)
    for memory_type, memory_id in ids.items():
        await conn.execute(
            "UPDATE memories SET accessed_at = now() - make_interval(days => $2) WHERE id = $1",
            memory_id,
            half_lives[memory_type],
        )
    await conn.execute(
        "UPDATE memories SET accessed_at = now() - interval '400 days' WHERE id = $1", pinned
    )
    await conn.close()
    r = await client.post(
        "/v1/recall",
        json={"query": "anything at all", "limit": 20, "min_similarity": 0},
        headers=auth(wallet),
    )
    by_id = {m["id"]: m["_signals"]["type_decay"] for m in r.json()["memories"]}
    for memory_type, memory_id in ids.items():
        assert by_id[memory_id] == pytest.approx(0.5, abs=1e-3), memory_type
    assert by_id[pinned] == 1.0
    # a recall is not an access: the timers keep running
    r = await client.post(
        "/v1/recall",
        json={"query": "anything at all", "limit": 20, "min_similarity": 0},
        headers=auth(wallet),
    )
    by_id = {m["id"]: m["_signals"]["type_decay"] for m in r.json()["memories"]}
    assert by_id[ids["general"]] == pytest.approx(0.5, abs=1e-3)
    # reading a memory is: it resets the decay timer
    for memory_id in ids.values():
        assert (await client.get(f"/v1/memories/{memory_id}", headers=auth(wallet))).is_success
    r = await client.post(
        "/v1/recall",
        json={"query": "anything at all", "limit": 20, "min_similarity": 0},
        headers=auth(wallet),
    )
    assert all(m["_signals"]["type_decay"] > 0.99 for m in r.json()["memories"])


async def test_an_access_is_a_use_counted_once_a_day(
    client: AsyncTestClient, wallet, database_url
) -> None:
    memory_id = (await store_memory(client, wallet, FACTS[2]))["id"]
    for _ in range(3):  # recall returns it, but exposure is not use
        r = await client.post(
            "/v1/recall", json={"query": "peanut allergy", "limit": 1}, headers=auth(wallet)
        )
        assert r.json()["memories"][0]["id"] == memory_id
        assert r.json()["memories"][0]["access_count"] == 0
    url = f"/v1/memories/{memory_id}"
    first = (await client.get(url, headers=auth(wallet))).json()
    assert first["access_count"] == 1 and first["accessed_at"] > first["created_at"]
    again = (await client.get(url, headers=auth(wallet))).json()
    assert again["access_count"] == 1 and again["accessed_at"] == first["accessed_at"]
    r = await client.post(f"{url}/feedback", headers=auth(wallet))
    assert r.status_code == 200 and r.json() == {
        "id": memory_id, "counted": False, "access_count": 1, "accessed_at": first["accessed_at"]
    }  # fmt: skip
    # a day later the next use counts again, whether a read or a "this helped"
    conn = await _db(database_url)
    await conn.execute(
        "UPDATE memories SET accessed_at = now() - interval '25 hours' WHERE id = $1", memory_id
    )
    await conn.close()
    r = await client.post(f"{url}/feedback", json={"helpful": True}, headers=auth(wallet))
    assert r.json()["counted"] is True and r.json()["access_count"] == 2
    r = await client.post(f"{url}/feedback", json={"helpful": False}, headers=auth(wallet))
    assert r.json()["counted"] is False and r.json()["access_count"] == 2
    other = Account.create()
    r = await client.post(f"{url}/feedback", headers=auth(other))
    assert r.status_code == 404  # another wallet's memory
    r = await client.post(f"{url}/feedback", json={"helpful": "yes"}, headers=auth(wallet))
    assert r.status_code == 422


async def test_memoclaw_accounting_counts_every_recalled_memory(make_app, wallet) -> None:
    """ENGRAM_RECALL_COUNTS_ACCESS=1: the contract's own accounting, kept as an option."""
    async with AsyncTestClient(app=make_app(recall={"counts_access": True}), timeout=60) as client:
        memory_id = (await store_memory(client, wallet, FACTS[2]))["id"]
        for expected in (1, 2):
            r = await client.post(
                "/v1/recall", json={"query": "peanut allergy", "limit": 1}, headers=auth(wallet)
            )
            assert r.json()["memories"][0]["access_count"] == expected
        r = await client.post(f"/v1/memories/{memory_id}/feedback", headers=auth(wallet))
        assert r.json()["access_count"] == 2  # counted within the day already


async def test_limit_and_min_similarity(client: AsyncTestClient, wallet) -> None:
    for fact in FACTS[:8]:
        await store_memory(client, wallet, fact)
    h = auth(wallet)
    r = await client.post(
        "/v1/recall", json={"query": "dark mode editor", "min_similarity": 0}, headers=h
    )
    body = r.json()
    assert len(body["memories"]) == 8 and body["query_tokens"] > 0  # default limit 10
    assert body["memories"][0]["content"] == FACTS[0]
    # no floor given: MiniLM's (0.2, app/memory/scoring.py) keeps only what is about the query
    r = await client.post("/v1/recall", json={"query": "dark mode editor"}, headers=h)
    floored = r.json()["memories"]
    assert floored[0]["content"] == FACTS[0] and len(floored) < 8
    assert all(m["similarity"] >= 0.2 for m in floored)
    assert [m["content"] for m in body["memories"] if m["similarity"] >= 0.2] == [
        m["content"] for m in floored
    ]
    scores = [m["score"] for m in body["memories"]]
    assert scores == sorted(scores, reverse=True)
    r = await client.post(
        "/v1/recall", json={"query": "dark mode editor", "min_similarity": 0.5}, headers=h
    )
    assert [m["content"] for m in r.json()["memories"]] == [FACTS[0]]
    for bad in (
        {"query": ""},
        {"query": "x", "limit": 0},
        {"query": "x", "limit": 1001},
        {"query": "x", "min_similarity": 2},
        {"query": "x" * 32_769},
    ):
        assert (await client.post("/v1/recall", json=bad, headers=h)).status_code == 422, bad


async def test_filters(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    await store_memory(
        client, wallet, FACTS[0], namespace="ui", tags=["prefs"], memory_type="preference"
    )
    await store_memory(
        client, wallet, FACTS[1], namespace="ops", tags=["deploy"], session_id="s1", agent_id="bot"
    )
    await store_memory(
        client, wallet, FACTS[2], tags=["health", "prefs"], memory_type="observation"
    )

    async def contents(**body) -> set[str]:
        r = await client.post(
            "/v1/recall",
            json={"query": "user facts", "limit": 10, "min_similarity": 0, **body},
            headers=h,
        )
        assert r.status_code == 200, r.text
        return {m["content"] for m in r.json()["memories"]}

    assert await contents(namespace="ui") == {FACTS[0]}
    assert await contents(filters={"tags": ["prefs"]}) == {FACTS[0], FACTS[2]}
    assert await contents(filters={"tags": "deploy,health"}) == {FACTS[1], FACTS[2]}
    assert await contents(filters={"memory_type": "observation"}) == {FACTS[2]}
    assert await contents(filters={"memory_type": ["observation", "preference"]}) == {
        FACTS[0],
        FACTS[2],
    }
    assert await contents(session_id="s1") == {FACTS[1]}
    assert await contents(agent_id="bot") == {FACTS[1]}
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert await contents(filters={"after": tomorrow}) == set()
    assert len(await contents(filters={"before": tomorrow})) == 3


def _unit(rng: np.random.Generator, dims: int = 384) -> np.ndarray:
    v = rng.standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("path", ["exact scan", "index scan"])
async def test_filters_never_starve_the_top_k_among_many_wallets(
    client: AsyncTestClient, database_url, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """4,000 memories of other wallets around the query; the caller's few must still fill k.

    Small wallets are scanned exactly; with the threshold at 0 the HNSW path runs, and its
    fallback must still return the full k when filters starve the graph walk.
    """
    if path == "index scan":
        monkeypatch.setattr(memory_recall, "EXACT_SCAN_MAX_ROWS", 0)
    rng = np.random.default_rng(7)
    target = Account.create()
    query = "notes about the garden and the tomatoes"
    anchor = (await LocalMiniLMEmbedder().embed([query])).vectors[0]
    conn = await _db(database_url)
    rows = []
    for i in range(4000):
        # other wallets' memories sit right next to the query: the index scan meets them first
        vector = anchor + 0.05 * _unit(rng)
        rows.append(
            (
                f"0x{i:040x}",
                "default",
                f"noise {i}",
                hashlib.sha256(str(i).encode()).digest(),
                vector / np.linalg.norm(vector),
                "test",
                '{"tags": ["garden"]}',
            )
        )
    await conn.copy_records_to_table(
        "memories",
        records=rows,
        columns=[
            "user_id",
            "namespace",
            "content",
            "content_hash",
            "embedding",
            "embedding_model",
            "metadata",
        ],
    )
    await conn.close()
    for i, fact in enumerate(FACTS[:14]):
        await store_memory(
            client, target, fact, tags=["garden"] if i % 2 == 0 else ["other"], namespace="home"
        )
    r = await client.post(
        "/v1/recall",
        json={
            "query": query,
            "limit": 7,
            "namespace": "home",
            "filters": {"tags": ["garden"]},
            "min_similarity": 0,
        },
        headers=auth(target),
    )
    got = r.json()["memories"]
    assert len(got) == 7  # exactly the 7 memories that match, none lost to the filter
    assert all("garden" in m["metadata"]["tags"] for m in got)
    r = await client.post(
        "/v1/recall", json={"query": query, "limit": 10, "min_similarity": 0}, headers=auth(target)
    )
    assert len(r.json()["memories"]) == 10


async def test_small_wallet_is_scanned_exactly_in_one_query(
    client: AsyncTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the threshold recall scans exactly in one statement, which counts as it scans: no
    count before it. Above, the scan stops at the cap and the index walk takes over."""
    calls: list[str] = []
    real_within = memory_repository.exact_candidates_within
    real_candidates = memory_repository.recall_candidates
    real_count = memory_reads.count_up_to

    async def within(*args: object, **kwargs: object) -> object:
        found = await real_within(*args, **kwargs)  # type: ignore[arg-type]
        calls.append("exact within" if found else "exact, over the cap")
        return found

    async def candidates(*args: object, **kwargs: object) -> object:
        calls.append("exact" if args[5] else "index")  # (conn, f, vector, query, n, exact, …)
        return await real_candidates(*args, **kwargs)  # type: ignore[arg-type]

    async def count(*args: object, **kwargs: object) -> object:
        calls.append("count")
        return await real_count(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(memory_repository, "exact_candidates_within", within)
    monkeypatch.setattr(memory_repository, "recall_candidates", candidates)
    monkeypatch.setattr(memory_reads, "count_up_to", count)
    wallet = Account.create()
    for fact in FACTS[:5]:
        await store_memory(client, wallet, fact)
    calls.clear()
    body = {"query": "garden", "limit": 3, "min_similarity": 0}
    r = await client.post("/v1/recall", json=body, headers=auth(wallet))
    assert r.status_code == 200 and len(r.json()["memories"]) == 3
    assert calls == ["exact within"]
    calls.clear()
    monkeypatch.setattr(memory_recall, "EXACT_SCAN_MAX_ROWS", 2)
    r = await client.post("/v1/recall", json=body, headers=auth(wallet))
    assert len(r.json()["memories"]) == 3
    # the scan stopped at 3 rows; the index walk came back short; the exact scan
    assert calls == ["exact, over the cap", "index", "exact"]
    calls.clear()
    r = await client.post("/v1/recall", json=body, headers=auth(wallet))
    assert calls == ["index", "exact"]  # the memo knows the filter is over the cap


@pytest.fixture
async def six_memories(client: AsyncTestClient, database_url: str):
    """A connection and a filter that matches six memories (namespace "capped")."""
    wallet = Account.create()
    for fact in FACTS[:6]:
        await store_memory(client, wallet, fact, namespace="capped")
    conn = await _db(database_url)
    yield conn, MemoryFilter(wallet=wallet.address.lower(), namespace="capped")
    await conn.close()


async def test_the_exact_scan_within_a_cap_is_the_exact_scan(six_memories) -> None:
    conn, f = six_memories
    vector = (await LocalMiniLMEmbedder().embed(["garden"])).vectors[0]
    rows, hits = await memory_repository.recall_candidates(conn, f, vector, "garden", 4, True, 7)
    found = await memory_repository.exact_candidates_within(conn, f, vector, "garden", 4, 6)
    assert found is not None and found.matching == 6 and found.vector_hits == hits == 4
    assert [dict(r) | {"scoped": 6} for r in rows] == [dict(r) for r in found.rows]
    assert await memory_repository.exact_candidates_within(conn, f, vector, "garden", 4, 5) is None
    f.namespace = "none"
    nothing = await memory_repository.exact_candidates_within(conn, f, vector, "x", 4, 5)
    assert nothing is not None and nothing.rows == [] and nothing.matching == 0


async def test_count_up_to_stops_at_the_cap(six_memories) -> None:
    conn, f = six_memories
    assert await memory_reads.count_up_to(conn, f, 4) == 4
    assert await memory_reads.count_up_to(conn, f, 100) == 6
    f.namespace = "other"
    assert await memory_reads.count_up_to(conn, f, 100) == 0


async def test_recall_commits_without_waiting_for_the_wal_unless_paid_by_x402(
    client: AsyncTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.http.transaction import commit_may_be_relaxed

    assert commit_may_be_relaxed(True, "free_call")
    assert commit_may_be_relaxed(True, "none")
    assert not commit_may_be_relaxed(True, "x402")
    assert not commit_may_be_relaxed(False, "free_call")

    statements: list[str] = []
    original = asyncpg.Connection.execute

    async def spy(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        statements.append(query)
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "execute", spy)
    wallet = Account.create()
    await store_memory(client, wallet, FACTS[0])
    assert not any("synchronous_commit" in q for q in statements)  # a store is durable
    r = await client.post("/v1/recall", json={"query": "garden"}, headers=auth(wallet))
    assert r.status_code == 200
    assert any("synchronous_commit = off" in q for q in statements)


async def test_memory_partitions_leave_room_for_hot_access_updates(database_url) -> None:
    """Recall's access-count updates touch no indexed column: with free space on the page they
    are heap-only, instead of re-inserting the row into the HNSW, GIN and btree indexes."""
    conn = await _db(database_url)
    try:
        rows = await conn.fetch(
            "SELECT c.relname, c.reloptions FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'memories'::regclass"
        )
        assert len(rows) == 16
        assert all("fillfactor=80" in (r["reloptions"] or []) for r in rows)
        indexed = await conn.fetchval(
            "SELECT string_agg(pg_get_indexdef(indexrelid), ' ') FROM pg_index"
            " WHERE indrelid = 'memories'::regclass"
        )
        assert "access_count" not in indexed and "accessed_at" not in indexed
    finally:
        await conn.close()


def _ctes_reading_memories(plan: dict[str, object], cte: str = "") -> set[str]:
    """The CTEs of a plan whose subtrees scan `memories` (a partition of it)."""
    name = str(plan.get("Subplan Name", ""))
    cte = name.removeprefix("CTE ") if name.startswith("CTE ") else cte
    found = {cte} if cte and str(plan.get("Relation Name", "")).startswith("memories") else set()
    for child in plan.get("Plans", []):  # type: ignore[attr-defined]
        found |= _ctes_reading_memories(child, cte)
    return found


async def test_the_exact_scan_reads_the_filtered_rows_once(
    client: AsyncTestClient, database_url: str
) -> None:
    """The IDF sample, the vector side and the keyword side of an exact recall share one read of
    the rows the filter matches (three reads of a big filtered wallet cost three heap scans)."""
    wallet = Account.create()
    for fact in FACTS[:6]:
        await store_memory(client, wallet, fact, namespace="once")
    conn = await _db(database_url)
    seen: list[tuple[str, tuple[object, ...]]] = []

    class Recording:
        async def fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
            seen.append((sql, args))
            return await conn.fetch(sql, *args)

    try:
        f = MemoryFilter(wallet=wallet.address.lower(), namespace="once")
        vector = (await LocalMiniLMEmbedder().embed(["garden"])).vectors[0]
        for exact in (True, False):
            rows, hits = await memory_repository.recall_candidates(
                Recording(),
                f,
                vector,
                "garden",
                10,
                exact,
                100,  # type: ignore[arg-type]
            )
            assert hits == 6 and len(rows) == 6
        plans = []
        for sql, args in seen:
            explained = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
            plans.append(_ctes_reading_memories(json.loads(explained)[0]["Plan"]))
    finally:
        await conn.close()
    exact, index_path = plans
    assert exact == {"scope"}  # the sample and both sides read the scope, not the table
    assert index_path == {"sample", "vec"}  # each its own read (the keyword side is inlined)
