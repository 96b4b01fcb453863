"""GET /v1/export and POST /v1/import over HTTP: formats, filters, streaming, the 10,000-memory
round trip between two wallets, dedup on import, isolation and bad input."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import numpy as np
import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient
from memoclaw.types import ExportResponse, Memory

from app.config import LOCAL_EMBED_DIMS
from app.core.errors import RateLimitExceeded
from app.db.pool import create_pool
from app.memory.fields import KeptState, MemoryFields, NewMemory
from app.memory.filters import MemoryFilter
from app.memory.repository import writes as memory_writes
from app.memory.settled import content_digest
from app.transfer.controller import IMPORTS_PER_MINUTE
from app.transfer.schemas import MAX_IMPORT_ITEMS
from app.transfer.service import ImportLane, Pacer, TransferService
from tests.support.api import auth, store_memory
from tests.support.db import count_memories
from tests.support.server import served

# The fields a caller owns: an export → import round trip keeps every one of them.
USER_FIELDS = (
    "content", "metadata", "tags", "importance", "memory_type", "namespace", "session_id",
    "agent_id", "expires_at", "pinned", "immutable", "created_at", "updated_at", "accessed_at",
    "access_count", "deleted_at", "embedding_model",
)  # fmt: skip
TYPES = ("correction", "preference", "decision", "project", "observation", "general")
TRICKY = (
    'Alice said "ship it, now", then left',
    "Line one of the deploy runbook\nline two, with a comma\n\nline four after a blank",
    "# Not a heading\n- not a list, either; just the user's notes on Kubernetes",
    "Unicode survives: café, naïve, 東京, emoji 🚀, and a tab\there",
)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool of the app's kind (pgvector and jsonb codecs) for setup and service-level tests."""
    p = await create_pool(database_url, min_size=1, max_size=2)
    yield p
    await p.close()


@dataclass
class SourceMemory:
    """A memory as another wallet holds it: what setup inserts and assertions compare."""

    id: uuid.UUID
    content: str
    content_hash: bytes
    metadata: dict[str, Any]
    importance: float
    namespace: str
    memory_type: str
    session_id: str | None
    agent_id: str | None
    expires_at: datetime | None
    pinned: bool
    immutable: bool
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime
    access_count: int
    deleted_at: datetime | None


def _memory(i: int, now: datetime) -> SourceMemory:
    """A varied memory: every user field set to something other than its default somewhere."""
    created = now - timedelta(days=400) + timedelta(seconds=97 * i, microseconds=i)
    content = f'Memory {i}: the user noted, about topic {i % 113}, that "item {i}" matters'
    if i % 3 == 0:
        content += f"\nsecond line {i}, with a comma"
    metadata: dict[str, Any] = (
        {} if i % 5 == 0 else {"tags": [f"t{i % 7}", "common"], "source": {"n": i, "k": "x"}}
    )
    return SourceMemory(
        id=uuid.uuid4(),
        content=content,
        content_hash=content_digest(content),
        metadata=metadata,
        importance=round((i % 101) / 100, 2),
        namespace=("default", "work", "home")[i % 3],
        memory_type=TYPES[i % len(TYPES)],
        session_id=f"s{i % 11}" if i % 2 else None,
        agent_id=f"agent-{i % 4}" if i % 4 else None,
        expires_at=now + timedelta(days=30 + i % 9) if i % 97 == 0 else None,
        pinned=i % 13 == 0,
        immutable=i % 17 == 0,
        created_at=created,
        updated_at=created + timedelta(hours=1),
        accessed_at=created + timedelta(hours=2, microseconds=7),
        access_count=i % 23,
        deleted_at=created + timedelta(days=1) if i % 50 == 0 else None,
    )


async def _insert_directly(pool: asyncpg.Pool, wallet: str, memories: list[SourceMemory]) -> None:
    """Setup without embedding: random unit vectors (export never reads them)."""
    vectors = np.random.default_rng(7).standard_normal((len(memories), LOCAL_EMBED_DIMS))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    new = [
        NewMemory(
            wallet=wallet,
            fields=MemoryFields(
                content=m.content, metadata=m.metadata, importance=m.importance,
                namespace=m.namespace, memory_type=m.memory_type, session_id=m.session_id,
                agent_id=m.agent_id, expires_at=m.expires_at, pinned=m.pinned,
                immutable=m.immutable,
            ),
            importance=m.importance,
            content_hash=m.content_hash,
            embedding=vector,
            embedding_model="all-MiniLM-L6-v2",
            kept=KeptState(m.created_at, m.updated_at, m.accessed_at, m.access_count, m.deleted_at),
        )
        for m, vector in zip(memories, vectors, strict=True)
    ]  # fmt: skip
    async with pool.acquire() as conn, conn.transaction():
        for start in range(0, len(new), 1000):
            await memory_writes.insert_many(conn, new[start : start + 1000])


async def _export(client: AsyncTestClient, account, **params: Any) -> dict[str, Any]:
    r = await client.get("/v1/export", params=params, headers=auth(account))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    ExportResponse.model_validate(body)  # what MemoClaw's SDK does with it
    return body


async def _import(client: AsyncTestClient, account, body: Any) -> dict[str, Any]:
    r = await client.post("/v1/import", json=body, headers=auth(account))
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def _user_fields(memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [{f: m.get(f) for f in USER_FIELDS} for m in memories]
    return sorted(rows, key=lambda m: (m["namespace"], m["content"], m["deleted_at"] or ""))


# ---- the round trip ----------------------------------------------------------------------------


@pytest.fixture
async def flat_out(make_app) -> AsyncIterator[tuple[Any, AsyncTestClient]]:
    """An app whose imports run flat out (ENGRAM_IMPORT_DUTY_PERCENT=100): the round trip checks
    what an import writes, not its pace (the lane and pacer tests below check that), and
    at the default 30 % its 10,000 memories would rest for minutes."""
    app = make_app(limits={"import_duty_percent": 100})
    async with AsyncTestClient(app=app, timeout=120) as client:
        yield app, client


async def test_ten_thousand_memories_round_trip_between_wallets(
    flat_out: tuple[Any, AsyncTestClient], pool: asyncpg.Pool, database_url: str
) -> None:
    app, client = flat_out
    a, b = Account.create(), Account.create()
    now = datetime.now(UTC)
    await _insert_directly(pool, a.address.lower(), [_memory(i, now) for i in range(10_000)])

    exported = await _export(client, a, format="json", include_deleted="true")
    assert exported["format"] == "json" and exported["count"] == 10_000
    assert len(exported["memories"]) == 10_000
    Memory.model_validate(exported["memories"][0])
    assert sum(m.get("deleted_at") is not None for m in exported["memories"]) == 200

    # far above the 64 KB limit of other endpoints: the import route has its own
    assert len(json.dumps(exported)) > 1_000_000
    assert await _import(client, b, exported) == {"imported": 10_000, "skipped": 0}

    again = await _export(client, b, include_deleted="true")
    assert again["count"] == 10_000
    assert _user_fields(again["memories"]) == _user_fields(exported["memories"])
    # new ids, owned by the importer
    assert {m["user_id"] for m in again["memories"]} == {b.address.lower()}
    assert not {m["id"] for m in again["memories"]} & {m["id"] for m in exported["memories"]}
    # live memories only by default: the 200 soft-deleted ones are left out
    assert (await _export(client, b))["count"] == 9_800

    assert await _import(client, b, exported) == {"imported": 0, "skipped": 10_000}
    assert await count_memories(database_url, b.address) == 10_000
    # and A is untouched
    assert await count_memories(database_url, a.address) == 10_000

    # imported memories were embedded again, from their content
    probe = next(m for m in again["memories"] if m["content"].startswith("Memory 4242:"))
    async with pool.acquire() as conn:
        stored = await conn.fetchval(
            "SELECT embedding FROM memories WHERE user_id = $1 AND id = $2",
            b.address.lower(), uuid.UUID(probe["id"]),
        )  # fmt: skip
    expected = (await app.state.embedder.embed([probe["content"]])).vectors[0]
    assert float(np.dot(stored.to_numpy(), expected)) > 0.999


# ---- streaming ---------------------------------------------------------------------------------


async def test_export_streams_from_a_cursor_in_batches(
    app, pool: asyncpg.Pool, database_url: str
) -> None:
    wallet = Account.create().address.lower()
    now = datetime.now(UTC)
    memories = [_memory(i, now) for i in range(1, 1051) if i % 50]  # no deleted ones
    await _insert_directly(pool, wallet, memories)
    service = TransferService(app.state.memory_service, export_batch_rows=100)

    chunks = [c async for c in service.export(pool, MemoryFilter(wallet=wallet), "json")]
    # the head, one piece per cursor batch of at most 100 rows, the tail with the count
    assert len(chunks) == 2 + (len(memories) + 99) // 100
    document = json.loads(b"".join(chunks))
    assert document["count"] == len(memories) == len(document["memories"])
    assert chunks[1].count(b'"user_id"') == 100
    # grouped by namespace, oldest first within one
    keys = [(m["namespace"], m["created_at"]) for m in document["memories"]]
    assert keys == sorted(keys)

    # a reader that goes away mid-document gives its connection back
    small = await create_pool(database_url, min_size=1, max_size=1)
    try:
        stream = service.export(small, MemoryFilter(wallet=wallet), "csv")
        assert (await anext(stream)).startswith(b'{"format":"csv","memories":["id,content,')
        assert await anext(stream)  # the first batch: a connection is now held
        await stream.aclose()
        async with small.acquire(timeout=5) as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await small.close()


# ---- formats -----------------------------------------------------------------------------------


async def test_export_csv_round_trips_awkward_content(client: AsyncTestClient, wallet) -> None:
    answers = [
        await store_memory(client, wallet, TRICKY[0], tags=["quotes, commas"], importance=0.9),
        await store_memory(client, wallet, TRICKY[1], namespace="ops", memory_type="project"),
        await store_memory(client, wallet, TRICKY[2], metadata={"k": {"deep": [1, "two"]}}),
        await store_memory(client, wallet, TRICKY[3], session_id="s,1", pinned=True),
    ]
    stored = [answer["memory"] for answer in answers]
    body = await _export(client, wallet, format="csv")
    assert body["format"] == "csv" and body["count"] == 4
    assert len(body["memories"]) == 1 and isinstance(body["memories"][0], str)
    rows = list(csv.DictReader(io.StringIO(body["memories"][0], newline="")))
    assert len(rows) == 4
    by_id = {r["id"]: r for r in rows}
    for m in stored:
        row = by_id[m["id"]]
        assert row["content"] == m["content"]
        assert json.loads(row["tags"]) == m["tags"]
        assert json.loads(row["metadata"]) == m["metadata"]
        assert float(row["importance"]) == m["importance"]
        assert row["namespace"] == m["namespace"] and row["memory_type"] == m["memory_type"]
        assert row["pinned"] == ("true" if m["pinned"] else "false")
        assert row["session_id"] == m.get("session_id", "")
        assert row["created_at"] == m["created_at"] and row["deleted_at"] == ""


async def test_export_markdown_has_a_section_per_memory(client: AsyncTestClient, wallet) -> None:
    for content, namespace in zip(TRICKY, ("default", "ops", "default", "ops"), strict=True):
        await store_memory(client, wallet, content, namespace=namespace, tags=["t1"])
    body = await _export(client, wallet, format="markdown")
    assert body["format"] == "markdown" and body["count"] == 4
    document = body["memories"][0]
    assert document.startswith("# Memories\n")
    assert document.count("\n## Namespace: default\n") == 1
    assert document.count("\n## Namespace: ops\n") == 1
    sections = document.split("\n### ")[1:]
    assert len(sections) == 4
    quoted = set()
    for section in sections:
        lines = section.split("\n")
        quote = [ln[2:] if ln.startswith("> ") else "" for ln in lines if ln.startswith(">")]
        quoted.add("\n".join(quote))
        assert "- **memory_type**: general" in lines and '- **tags**: ["t1"]' in lines
        assert any(ln.startswith("- **id**: ") for ln in lines)
    assert quoted == set(TRICKY)
    # content never escapes its section: a line of content is never a heading of the document
    assert "\n# Not a heading" not in document


async def test_export_empty_wallet_and_default_format(client: AsyncTestClient, wallet) -> None:
    assert await _export(client, wallet) == {"format": "json", "memories": [], "count": 0}
    csv_body = await _export(client, wallet, format="csv")
    assert csv_body["count"] == 0
    assert list(csv.DictReader(io.StringIO(csv_body["memories"][0]))) == []
    md = await _export(client, wallet, format="markdown")
    assert md["count"] == 0 and md["memories"] == ["# Memories\n\n"]


# ---- filters -----------------------------------------------------------------------------------


async def test_export_filters_and_include_deleted(
    client: AsyncTestClient, wallet, pool: asyncpg.Pool
) -> None:
    address = wallet.address.lower()
    now = datetime.now(UTC)
    memories = [_memory(i, now) for i in range(1, 61)]  # i == 50 is soft-deleted
    await _insert_directly(pool, address, memories)
    live = [m for m in memories if m.deleted_at is None]

    def contents(body: dict[str, Any]) -> set[str]:
        return {m["content"] for m in body["memories"]}

    assert contents(await _export(client, wallet)) == {m.content for m in live}
    everything = await _export(client, wallet, include_deleted="true")
    assert contents(everything) == {m.content for m in memories}
    assert contents(await _export(client, wallet, namespace="work")) == {
        m.content for m in live if m.namespace == "work"
    }
    assert contents(await _export(client, wallet, memory_type="decision")) == {
        m.content for m in live if m.memory_type == "decision"
    }
    assert contents(await _export(client, wallet, tags="t1,t2")) == {
        m.content for m in live if set(m.metadata.get("tags", [])) & {"t1", "t2"}
    }
    assert contents(await _export(client, wallet, session_id="s3")) == {
        m.content for m in live if m.session_id == "s3"
    }
    cut = memories[29].created_at
    after = await _export(client, wallet, after=cut.isoformat())
    before = await _export(client, wallet, before=cut.isoformat(), format="csv")
    assert contents(after) == {m.content for m in live if m.created_at >= cut}
    assert before["count"] == len([m for m in live if m.created_at < cut])
    assert (await _export(client, wallet, namespace="nowhere"))["count"] == 0


async def test_export_bad_input_is_422(client: AsyncTestClient, wallet) -> None:
    for params in (
        {"format": "xml"},
        {"format": ""},
        {"after": "yesterday"},
        {"before": "2026-13-45"},
        {"memory_type": "bogus"},
        {"include_deleted": "perhaps"},
    ):
        r = await client.get("/v1/export", params=params, headers=auth(wallet))
        assert r.status_code == 422, (params, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    r = await client.get("/v1/export")
    assert r.status_code == 401


# ---- import ------------------------------------------------------------------------------------


async def test_import_keeps_fields_and_records_history(client: AsyncTestClient, wallet) -> None:
    item = {
        "id": str(uuid.uuid4()),
        "user_id": "0x" + "ab" * 20,
        "embedding_model": "text-embedding-3-small",
        "content": "The staging database is rebuilt every Sunday night",
        "metadata": {"tags": ["ops"], "origin": "memoclaw"},
        "tags": ["ops"],
        "importance": 0.8,
        "namespace": "infra",
        "memory_type": "decision",
        "session_id": "sess-1",
        "agent_id": "agent-7",
        "pinned": True,
        "immutable": True,
        "created_at": "2025-01-02T03:04:05.123456Z",
        "updated_at": "2025-02-02T03:04:05Z",
        "accessed_at": "2025-03-02T03:04:05Z",
        "access_count": 12,
        "deleted_at": None,
        "expires_at": None,
    }
    assert await _import(client, wallet, [item]) == {"imported": 1, "skipped": 0}
    [m] = (await _export(client, wallet))["memories"]
    assert m["id"] != item["id"] and m["user_id"] == wallet.address.lower()
    assert m["embedding_model"] == "all-MiniLM-L6-v2"
    for name in USER_FIELDS[:-1]:
        assert m.get(name) == item[name], name
    r = await client.get(f"/v1/memories/{m['id']}/history", headers=auth(wallet))
    assert r.status_code == 200, r.text
    [entry] = r.json()["history"]
    assert entry["action"] == "import" and entry["changes"]["content"] == item["content"]


async def test_import_defaults_and_envelope_forms(client: AsyncTestClient, wallet) -> None:
    r = await _import(client, wallet, {"memories": [{"content": "Bob's birthday is in May"}]})
    assert r == {"imported": 1, "skipped": 0}
    r = await _import(
        client, wallet, {"format": "json", "count": 1, "memories": [{"content": "Tea, no sugar"}]}
    )
    assert r == {"imported": 1, "skipped": 0}
    assert await _import(client, wallet, []) == {"imported": 0, "skipped": 0}
    body = await _export(client, wallet)
    m = next(m for m in body["memories"] if m["content"] == "Tea, no sugar")
    assert m["namespace"] == "default" and m["memory_type"] == "general"
    assert m["importance"] == 0.5 and m["metadata"] == {} and m["access_count"] == 0
    assert m["pinned"] is False and m["immutable"] is False and "deleted_at" not in m
    assert m["created_at"] == m["updated_at"] == m["accessed_at"]


async def test_import_skips_what_the_wallet_already_holds(
    client: AsyncTestClient, wallet, database_url: str
) -> None:
    await store_memory(client, wallet, "Carol prefers morning meetings", namespace="team")
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    future = (datetime.now(UTC) + timedelta(days=10)).isoformat()
    deleted_at = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    items = [
        {"content": "Carol prefers morning meetings", "namespace": "team"},  # held: skipped
        {"content": "Carol prefers morning meetings", "namespace": "other"},  # other namespace
        {"content": "Dave uses a standing desk"},
        {"content": "Dave uses a standing desk"},  # twice in the import: once
        {"content": "This offer expired yesterday", "expires_at": past},  # expired: skipped
        {"content": "This offer runs ten more days", "expires_at": future},
        # a soft-deleted copy of held content is its own memory (another state)...
        {
            "content": "Carol prefers morning meetings",
            "namespace": "team",
            "deleted_at": deleted_at,
        },
        # ...but only once
        {
            "content": "Carol prefers morning meetings",
            "namespace": "team",
            "deleted_at": deleted_at,
        },
    ]
    assert await _import(client, wallet, {"memories": items}) == {"imported": 4, "skipped": 4}
    assert await count_memories(database_url, wallet.address) == 5
    assert await _import(client, wallet, {"memories": items}) == {"imported": 0, "skipped": 8}
    assert await count_memories(database_url, wallet.address) == 5
    live = await _export(client, wallet)
    assert live["count"] == 4
    deleted = [
        m
        for m in (await _export(client, wallet, include_deleted="true"))["memories"]
        if m.get("deleted_at")
    ]
    assert [m["content"] for m in deleted] == ["Carol prefers morning meetings"]


async def test_import_is_isolated_between_wallets(
    client: AsyncTestClient, wallet, other_wallet, database_url: str
) -> None:
    secret = await store_memory(client, wallet, "The vault code for project Heron is 7-7-1")
    exported = await _export(client, wallet)
    # another wallet importing the first one's export gets its own copies, never the originals
    assert await _import(client, other_wallet, exported) == {"imported": 1, "skipped": 0}
    theirs = await _export(client, other_wallet)
    assert theirs["memories"][0]["id"] != secret["id"]
    r = await client.get(f"/v1/memories/{secret['id']}", headers=auth(other_wallet))
    assert r.status_code == 404
    # the same content in the other wallet does not make the first one's import skip anything
    fresh = Account.create()
    assert await _import(client, fresh, exported) == {"imported": 1, "skipped": 0}
    # and the first wallet's export still holds only its own memory
    mine = await _export(client, wallet)
    assert [m["id"] for m in mine["memories"]] == [secret["id"]]
    assert await count_memories(database_url, wallet.address) == 1


@pytest.mark.parametrize(
    ("memories", "where"),
    [
        ([{"content": "ok"}, {"content": "x", "memory_type": "nonsense"}], "memories[1]"),
        ([{"content": "ok"}, {"content": ""}], "memories[1]"),
        ([{"content": "ok"}, {"content": "   "}], "memories[1]"),
        ([{"content": "ok"}, {"content": "a\x00b"}], "memories[1]"),
        ([{"content": "ok"}, {"content": "x", "importance": 1.5}], "memories[1]"),
        ([{"content": "ok"}, {"content": "x", "tags": ["t"] * 11}], "memories[1]"),
        ([{"content": "ok"}, {"content": "x", "created_at": "last week"}], "memories[1]"),
        ([{"content": "ok"}, {"content": "x", "access_count": -1}], "memories[1]"),
        ([{"content": "ok"}, {"content": "x" * 8193}], "memories[1]"),
        ([{"content": "ok"}, {"content": "x", "metadata": {"k": "v" * 5000}}], "memories[1]"),
        ([{"content": "ok"}, {"content": "x", "metadata": {"a": {"b": {"c": {"d": 1}}}}}], "[1]"),
        ([{"content": "ok"}, "just a string"], "memories[1]"),
    ],
)
async def test_import_refuses_a_bad_item_and_writes_nothing(
    client: AsyncTestClient, database_url: str, memories: list[Any], where: str
) -> None:
    account = Account.create()
    r = await client.post("/v1/import", json={"memories": memories}, headers=auth(account))
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert where in json.dumps(error), error
    assert await count_memories(database_url, account.address) == 0


async def test_import_refuses_bad_envelopes(client: AsyncTestClient, database_url: str) -> None:
    account = Account.create()
    for body in (
        {"format": "csv", "memories": [{"content": "ok"}]},
        {"format": "csv", "memories": "id,content\n1,ok\n", "count": 1},
        {"items": [{"content": "ok"}]},
        "just text",
        42,
    ):
        r = await client.post("/v1/import", json=body, headers=auth(account))
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    r = await client.post(
        "/v1/import",
        content=b"{not json",
        headers={**auth(account), "content-type": "application/json"},
    )
    assert r.status_code in (400, 422) and "error" in r.json()
    assert await count_memories(database_url, account.address) == 0
    r = await client.post("/v1/import", json=[{"content": "ok"}])
    assert r.status_code == 401


async def test_other_endpoints_keep_the_64_kb_body_limit(client: AsyncTestClient, wallet) -> None:
    big = [{"content": f"memory {i} " + "x" * 800} for i in range(200)]  # ~165 KB
    r = await client.post("/v1/store/batch", json={"memories": big[:100]}, headers=auth(wallet))
    assert r.status_code == 413, r.text
    assert await _import(client, wallet, big) == {"imported": 200, "skipped": 0}


# ---- the import lane (issue 11, item 2) ---------------------------------------------------------


@pytest.mark.parametrize("form", ["bare list", "envelope"])
async def test_the_import_cap_holds_for_both_body_forms(
    client: AsyncTestClient, database_url: str, form: str
) -> None:
    account = Account.create()
    items = [{"content": f"m{i}"} for i in range(MAX_IMPORT_ITEMS + 1)]
    body = items if form == "bare list" else {"format": "json", "memories": items}
    r = await client.post("/v1/import", json=body, headers=auth(account))
    assert r.status_code == 422, r.text[:300]
    assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    assert str(MAX_IMPORT_ITEMS) in json.dumps(r.json()["error"])  # the message or the details
    assert await count_memories(database_url, account.address) == 0


# ---- every import takes the lane (issue 23, point 5) ---------------------------------------------


def work(seconds: float) -> None:
    """Work as CPU work is: the event loop does nothing else meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def test_the_lane_queues_imports_in_order_and_refuses_past_its_queue() -> None:
    lane = ImportLane(queue=2, wait_seconds=30)
    order: list[int] = []

    async def importer(i: int) -> None:
        async with lane.turn():
            order.append(i)

    async with lane.turn():  # an import runs
        waiting = [asyncio.create_task(importer(i)) for i in range(2)]
        await asyncio.sleep(0)  # each runs until it waits for the turn
        assert lane.waiting == 2
        with pytest.raises(RateLimitExceeded) as refused:  # the queue is full: at once
            async with lane.turn():
                pass
        assert refused.value.details == {"reason": "import_in_progress"}
        assert int(refused.value.headers["Retry-After"]) > 0
    await asyncio.gather(*waiting)
    assert order == [0, 1] and lane.waiting == 0


async def test_a_wait_for_a_turn_is_bounded() -> None:
    lane = ImportLane(queue=8, wait_seconds=0.05)
    async with lane.turn():
        with pytest.raises(RateLimitExceeded) as refused:
            async with lane.turn():
                pass
    assert "Retry-After" in refused.value.headers and lane.waiting == 0
    async with lane.turn():  # the lane is free again; the timed-out wait left nothing behind
        pass


async def test_a_failed_import_ends_its_turn_at_once() -> None:
    lane = ImportLane(queue=0, duty=0.01)  # a rest would be 99 times the work
    with pytest.raises(ValueError):
        async with lane.turn():
            work(0.02)  # then a failure: no rest before the next turn
            raise ValueError("bad item")
    began = time.monotonic()
    async with lane.turn():
        pass
    assert time.monotonic() - began < 1


async def test_the_pacer_rests_for_work_not_for_waiting() -> None:
    with pytest.raises(ValueError):
        ImportLane(duty=0)
    pacer = Pacer(duty=0.25)  # three times the work in rest
    work(0.05)
    began = time.monotonic()
    await pacer.rest()
    assert time.monotonic() - began >= 0.9 * 3 * 0.05
    await asyncio.sleep(0.2)  # waiting, e.g. for the embedding of the next chunk
    pacer.resume()
    began = time.monotonic()
    await pacer.rest()
    assert time.monotonic() - began < 0.1


@pytest.fixture
def one_turn_lane(app, monkeypatch: pytest.MonkeyPatch) -> ImportLane:
    """The app's import lane replaced by one with no queue: a second import is refused at once."""
    lane = ImportLane(queue=0)
    monkeypatch.setattr(app.state.transfer_service, "lane", lane)
    return lane


async def test_an_import_of_any_size_takes_the_lane(
    client: AsyncTestClient, database_url: str, one_turn_lane: ImportLane
) -> None:
    account = Account.create()
    # a turn held in the app's own event loop (the test client serves from a thread of its own)
    with client.blocking_portal.wrap_async_context_manager(one_turn_lane.turn()):
        r = await client.post("/v1/import", json=[{"content": "one"}], headers=auth(account))
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "RATE_LIMIT_EXCEEDED"
        assert r.json()["error"]["details"]["reason"] == "import_in_progress"
        assert int(r.headers["retry-after"]) > 0
    assert await count_memories(database_url, account.address) == 0
    r = await client.post("/v1/import", json=[{"content": "one"}], headers=auth(account))
    assert r.json() == {"imported": 1, "skipped": 0}


async def test_a_client_is_never_refused_by_its_own_previous_import(
    client: AsyncTestClient, one_turn_lane: ImportLane
) -> None:
    account = Account.create()
    for i in range(5):  # back to back, on a lane that refuses any import it cannot run now
        r = await client.post("/v1/import", json=[{"content": f"n{i}"}], headers=auth(account))
        assert r.json() == {"imported": 1, "skipped": 0}, r.text


def test_an_import_waiting_for_its_turn_holds_no_database_connection(make_app) -> None:
    """With a pool of 2: one import runs (one connection), another waits for its turn; a store
    still gets the other connection and answers while the first import is still running."""
    app = make_app(database={"pool_min": 1, "pool_max": 2})
    # the wait's 10 s bound has its own test: here the first import may take longer than that
    # on a busy machine (the suite's parallel workers), and the second must still get its turn
    app.state.transfer_service.lane.wait_seconds = 120
    importers = [Account.create() for _ in range(2)]
    big = [{"content": f"waiting lane item {i} {uuid.uuid4()}"} for i in range(150)]
    answered: dict[str, float] = {}

    def run_import(who: int, items: list[dict[str, str]]) -> None:
        r = httpx.post(f"{url}/v1/import", json=items, headers=auth(importers[who]), timeout=180)
        assert r.status_code == 200, r.text
        answered[f"import {who}"] = time.monotonic()

    with served(app) as url:
        first = threading.Thread(target=run_import, args=(0, big))
        first.start()
        lane: ImportLane = app.state.transfer_service.lane
        while not lane.busy:
            time.sleep(0.01)
        second = threading.Thread(target=run_import, args=(1, [{"content": "queued"}]))
        second.start()
        while lane.waiting < 1:
            time.sleep(0.01)
        r = httpx.post(f"{url}/v1/store", json={"content": "meanwhile"},
                       headers=auth(Account.create()), timeout=60)  # fmt: skip
        assert r.status_code == 201, r.text
        stored = time.monotonic()
        first.join()
        second.join()
    assert stored < answered["import 0"] < answered["import 1"]


async def test_imports_have_a_per_wallet_rate_limit(make_app) -> None:
    """The windows are fixed minutes, and paced imports take seconds: a run whose requests
    straddle a minute's end (their X-RateLimit-Reset differ) is run again with a fresh wallet,
    which two runs in a row cannot both do."""
    async with AsyncTestClient(app=make_app(limits={"rate_limit_per_minute": 0})) as c:
        for _ in range(2):
            account, resets = Account.create(), set()
            for i in range(IMPORTS_PER_MINUTE):
                r = await c.post("/v1/import", json=[{"content": f"r{i}"}], headers=auth(account))
                assert r.status_code == 200, r.text
                resets.add(r.headers["x-ratelimit-reset"])
            r = await c.post("/v1/import", json=[{"content": "one more"}], headers=auth(account))
            resets.add(r.headers["x-ratelimit-reset"])
            if len(resets) == 1:  # all in one window
                break
        assert r.status_code == 429, r.text
        r = await c.post("/v1/import", json=[{"content": "another wallet"}],
                         headers=auth(Account.create()))  # fmt: skip
        assert r.status_code == 200, r.text


def test_the_import_duty_is_the_operators_setting(make_app) -> None:
    """ENGRAM_IMPORT_DUTY_PERCENT sets the lane's duty cycle: 30 % unless told."""
    assert make_app().state.transfer_service.lane.duty == 0.3
    assert make_app(limits={"import_duty_percent": 100}).state.transfer_service.lane.duty == 1.0
