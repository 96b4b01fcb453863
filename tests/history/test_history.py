"""Memory history: every change through the API leaves one row in the change's own transaction,
GET /v1/memories/{id}/history reads it oldest first, POST /v1/memories/{id}/restore undeletes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import numpy as np
import pytest
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.core.errors import PaymentRequired
from app.history import repository as history_repo
from tests.support.api import auth, store_memory
from tests.support.facts import ALLERGY, ALLERGY_AGAIN, FACTS

CREATE_FIELDS = {
    "content", "importance", "memory_type", "namespace", "tags", "metadata", "pinned",
    "immutable", "session_id", "agent_id", "expires_at",
}  # fmt: skip


async def _history(client: AsyncTestClient, account: Any, memory_id: str) -> list[dict]:
    """The history as recorded: each change's `old`/`new` (the CLI's names, served beside
    `before`/`after`) checked equal to them and set aside."""
    r = await client.get(f"/v1/memories/{memory_id}/history", headers=auth(account))
    assert r.status_code == 200, r.text
    history = list(r.json()["history"])
    for entry in history:
        assert entry["changed_fields"] == list(entry["changes"])
        for value in entry["changes"].values():
            if isinstance(value, dict) and "before" in value and "after" in value:
                assert (value.pop("old"), value.pop("new")) == (value["before"], value["after"])
    return history


def _actions(history: list[dict]) -> list[str]:
    return [h["action"] for h in history]


async def _rows(database_url: str, wallet: str) -> list[asyncpg.Record]:
    """Every history row of a wallet, straight from the table."""
    conn = await asyncpg.connect(database_url)
    try:
        return list(
            await conn.fetch(
                "SELECT memory_id, action FROM memory_history WHERE user_id = $1"
                " ORDER BY created_at",
                wallet.lower(),
            )
        )
    finally:
        await conn.close()


@pytest.fixture
def insert_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many history INSERT statements ran, and how many rows each wrote."""
    calls: list[int] = []
    real = history_repo.insert_many

    async def counting(
        conn: asyncpg.Connection, wallet: str, ids: Sequence[UUID], *rest: Any
    ) -> None:
        calls.append(len(ids))
        await real(conn, wallet, ids, *rest)

    monkeypatch.setattr(history_repo, "insert_many", counting)
    return calls


# ---- create -------------------------------------------------------------------------------------


async def test_store_records_the_fields_it_created(client: AsyncTestClient, wallet) -> None:
    expires = (datetime.now(UTC) + timedelta(days=3)).isoformat().replace("+00:00", "Z")
    stored = await store_memory(
        client, wallet, FACTS[0], importance=0.8, memory_type="preference", namespace="ui",
        tags=["editor"], metadata={"source": "chat"}, pinned=True, session_id="s1",
        agent_id="a1", expires_at=expires,
    )  # fmt: skip
    history = await _history(client, wallet, stored["id"])
    assert len(history) == 1
    entry = history[0]
    assert set(entry) == {"id", "memory_id", "action", "changes", "changed_fields", "created_at"}
    assert entry["memory_id"] == stored["id"] and entry["action"] == "create"
    UUID(entry["id"])
    assert entry["created_at"].endswith("Z")
    changes = entry["changes"]
    assert set(changes) == CREATE_FIELDS
    assert changes["content"] == FACTS[0] and changes["importance"] == 0.8
    assert changes["memory_type"] == "preference" and changes["namespace"] == "ui"
    assert changes["tags"] == ["editor"]
    assert changes["metadata"] == {"source": "chat", "tags": ["editor"]}
    assert changes["pinned"] is True and changes["immutable"] is False
    assert changes["session_id"] == "s1" and changes["agent_id"] == "a1"
    assert changes["expires_at"] == stored["memory"]["expires_at"]


async def test_dedup_merge_records_what_changed_on_the_existing_memory(
    client: AsyncTestClient, wallet
) -> None:
    first = await store_memory(client, wallet, ALLERGY, tags=["health"])
    again = await store_memory(
        client, wallet, ALLERGY_AGAIN, deduplicated=True, importance=0.9, tags=["food"]
    )
    assert again["deduplicated"] is True and again["id"] == first["id"]
    history = await _history(client, wallet, first["id"])
    assert _actions(history) == ["create", "update"]
    update = history[1]["changes"]
    assert set(update) == {"importance", "tags", "metadata"}
    assert update["importance"] == {"before": 0.5, "after": 0.9}
    assert update["tags"] == {"before": ["health"], "after": ["health", "food"]}
    # the same content again changes nothing: no row
    same = await store_memory(client, wallet, ALLERGY, deduplicated=True)
    assert same["deduplicated"] is True
    assert _actions(await _history(client, wallet, first["id"])) == ["create", "update"]


async def test_batch_of_100_writes_its_history_in_one_statement(
    client: AsyncTestClient, wallet, database_url, insert_calls
) -> None:
    items = [
        {"content": f"{FACTS[i % len(FACTS)]} (entry {i}, ref {uuid4().hex})"} for i in range(100)
    ]
    r = await client.post("/v1/store/batch", json={"memories": items}, headers=auth(wallet))
    assert r.status_code == 201, r.text
    body = r.json()
    rows = await _rows(database_url, wallet.address)
    assert insert_calls == [len(rows)]  # one INSERT for the whole batch's history
    created = [str(row["memory_id"]) for row in rows if row["action"] == "create"]
    assert sorted(created) == sorted(set(body["ids"]))
    assert all(row["action"] in ("create", "update") for row in rows)
    some = body["ids"][57]
    assert _actions(await _history(client, wallet, some))[0] == "create"


async def test_batch_dedup_within_records_create_then_update(
    client: AsyncTestClient, wallet
) -> None:
    items = [
        {"content": FACTS[1], "tags": ["ops"]},
        {"content": FACTS[2]},
        {"content": FACTS[1], "tags": ["deploy"], "importance": 0.7},
        {"content": FACTS[1], "tags": ["release"]},
    ]
    r = await client.post("/v1/store/batch", json={"memories": items}, headers=auth(wallet))
    body = r.json()
    assert body["ids"][0] == body["ids"][2] == body["ids"][3]
    history = await _history(client, wallet, body["ids"][0])
    assert _actions(history) == ["create", "update", "update"]
    assert history[1]["changes"]["tags"] == {"before": ["ops"], "after": ["ops", "deploy"]}
    assert history[2]["changes"]["tags"] == {
        "before": ["ops", "deploy"],
        "after": ["ops", "deploy", "release"],
    }
    assert [h["created_at"] for h in history] == sorted(h["created_at"] for h in history)
    assert _actions(await _history(client, wallet, body["ids"][1])) == ["create"]


# ---- update -------------------------------------------------------------------------------------


async def test_patch_records_before_and_after_of_changed_fields_only(
    client: AsyncTestClient, wallet
) -> None:
    stored = await store_memory(client, wallet, FACTS[3], tags=["db"], namespace="infra")
    memory_id = stored["id"]
    r = await client.patch(
        f"/v1/memories/{memory_id}",
        json={"content": FACTS[4], "importance": 0.9, "namespace": "infra", "tags": ["db", "pg"],
              "pinned": False},
        headers=auth(wallet),
    )  # fmt: skip
    assert r.status_code == 200, r.text
    history = await _history(client, wallet, memory_id)
    assert _actions(history) == ["create", "update"]
    changes = history[1]["changes"]
    assert set(changes) == {"content", "importance", "tags", "metadata"}  # namespace/pinned same
    assert changes["content"] == {"before": FACTS[3], "after": FACTS[4]}
    assert changes["importance"] == {"before": 0.5, "after": 0.9}
    assert changes["tags"] == {"before": ["db"], "after": ["db", "pg"]}
    assert changes["metadata"] == {"before": {"tags": ["db"]}, "after": {"tags": ["db", "pg"]}}
    assert "embedding" not in json.dumps(changes)
    # a PATCH that changes nothing leaves no row
    r = await client.patch(
        f"/v1/memories/{memory_id}",
        json={"importance": 0.9, "namespace": "infra", "expires_at": None},
        headers=auth(wallet),
    )
    assert r.status_code == 200, r.text
    assert len(await _history(client, wallet, memory_id)) == 2
    r = await client.patch(
        f"/v1/memories/{memory_id}", json={"immutable": True}, headers=auth(wallet)
    )
    last = (await _history(client, wallet, memory_id))[-1]
    assert last["changes"] == {"immutable": {"before": False, "after": True}}


async def test_batch_update_records_the_items_that_applied(
    client: AsyncTestClient, wallet, insert_calls
) -> None:
    a = (await store_memory(client, wallet, FACTS[5]))["id"]
    b = (await store_memory(client, wallet, FACTS[6], immutable=True))["id"]
    c = (await store_memory(client, wallet, FACTS[7]))["id"]
    insert_calls.clear()
    r = await client.patch(
        "/v1/memories/batch",
        json={"updates": [
            {"id": a, "importance": 0.2},
            {"id": b, "importance": 0.2},
            {"id": str(uuid4()), "importance": 0.2},
            {"id": c, "pinned": True, "memory_type": "general"},
        ]},
        headers=auth(wallet),
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["updated"] == 2 and r.json()["failed"] == 2
    assert insert_calls == [2]  # one statement for the batch, failed items left out
    assert (await _history(client, wallet, a))[-1]["changes"] == {
        "importance": {"before": 0.5, "after": 0.2}
    }
    assert _actions(await _history(client, wallet, b)) == ["create"]
    assert (await _history(client, wallet, c))[-1]["changes"] == {
        "pinned": {"before": False, "after": True}
    }


# ---- delete / restore ---------------------------------------------------------------------------


async def test_deletes_are_recorded_and_history_outlives_them(
    client: AsyncTestClient, wallet
) -> None:
    h = auth(wallet)
    ids = [(await store_memory(client, wallet, fact))["id"] for fact in FACTS[8:13]]
    assert (await client.delete(f"/v1/memories/{ids[0]}", headers=h)).status_code == 200
    r = await client.post("/v1/memories/bulk-delete", json={"ids": ids[1:3]}, headers=h)
    assert r.json()["deleted"] == 2
    r = await client.post(
        "/v1/memories/batch-delete", json={"ids": [ids[3], ids[3], "nope", str(uuid4())]}, headers=h
    )
    assert r.json()["results"][0]["deleted"] is True
    for memory_id in ids[:4]:
        history = await _history(client, wallet, memory_id)  # deleted, still readable
        assert _actions(history) == ["create", "delete"]
        assert history[1]["changes"] == {"deleted": {"before": False, "after": True}}
    assert _actions(await _history(client, wallet, ids[4])) == ["create"]


async def test_restore_undeletes_and_records(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    memory_id = (await store_memory(client, wallet, FACTS[13]))["id"]
    r = await client.post(f"/v1/memories/{memory_id}/restore", headers=h)
    assert r.status_code == 409 and r.json()["error"]["code"] == "CONFLICT"  # not deleted
    await client.delete(f"/v1/memories/{memory_id}", headers=h)
    assert (await client.get(f"/v1/memories/{memory_id}", headers=h)).status_code == 404
    r = await client.post(f"/v1/memories/{memory_id}/restore", headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["restored"] is True and body["id"] == memory_id
    assert "deleted_at" not in body["memory"] and body["memory"]["content"] == FACTS[13]
    got = await client.get(f"/v1/memories/{memory_id}", headers=h)
    assert got.status_code == 200 and "deleted_at" not in got.json()
    history = await _history(client, wallet, memory_id)
    assert _actions(history) == ["create", "delete", "restore"]
    assert history[2]["changes"] == {"deleted": {"before": True, "after": False}}
    r = await client.post(f"/v1/memories/{memory_id}/restore", headers=h)
    assert r.status_code == 409
    r = await client.post(f"/v1/memories/{uuid4()}/restore", headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = await client.post("/v1/memories/not-a-uuid/restore", headers=h)
    assert r.status_code == 422
    assert len(await _history(client, wallet, memory_id)) == 3


async def test_history_and_restore_refuse_bad_ids(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    r = await client.get(f"/v1/memories/{uuid4()}/history", headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = await client.get("/v1/memories/not-a-uuid/history", headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR"
    r = await client.get(f"/v1/memories/{uuid4()}/history")
    assert r.status_code == 401
    r = await client.post(f"/v1/memories/{uuid4()}/restore")
    assert r.status_code == 401


async def test_history_and_restore_are_per_wallet(
    client: AsyncTestClient, wallet, other_wallet, database_url
) -> None:
    mine, theirs = auth(wallet), auth(other_wallet)
    memory_id = (await store_memory(client, wallet, "The vault code is 7731"))["id"]
    await client.delete(f"/v1/memories/{memory_id}", headers=mine)
    r = await client.get(f"/v1/memories/{memory_id}/history", headers=theirs)
    assert r.status_code == 404 and "7731" not in r.text
    r = await client.post(f"/v1/memories/{memory_id}/restore", headers=theirs)
    assert r.status_code == 404 and "7731" not in r.text
    assert (await client.get(f"/v1/memories/{memory_id}", headers=mine)).status_code == 404
    assert _actions(await _history(client, wallet, memory_id)) == ["create", "delete"]
    assert await _rows(database_url, other_wallet.address) == []


# ---- nothing written when the request fails -----------------------------------------------------


async def test_rejected_requests_write_no_history(
    client: AsyncTestClient, wallet, database_url
) -> None:
    h = auth(wallet)
    bad = [{"content": FACTS[14]}, {"content": "x", "memory_type": "nonsense"}]
    r = await client.post("/v1/store/batch", json={"memories": bad}, headers=h)
    assert r.status_code == 422
    bad_late = [{"content": FACTS[14]}, {"content": FACTS[15], "expires_at": "2001-01-01"}]
    r = await client.post("/v1/store/batch", json={"memories": bad_late}, headers=h)
    assert r.status_code == 422
    assert await _rows(database_url, wallet.address) == []
    memory_id = (await store_memory(client, wallet, FACTS[16], immutable=True))["id"]
    r = await client.patch(f"/v1/memories/{memory_id}", json={"importance": 1}, headers=h)
    assert r.status_code == 409
    assert (await client.delete(f"/v1/memories/{memory_id}", headers=h)).status_code == 409
    r = await client.patch(f"/v1/memories/{memory_id}", json={"importance": "high"}, headers=h)
    assert r.status_code == 422
    assert [row["action"] for row in await _rows(database_url, wallet.address)] == ["create"]


class _SettleFails:
    """The real gate, except that settling a paid call fails (as a refused payment would)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def authorize(self, request: Any, conn: asyncpg.Connection) -> Any:
        return await self.inner.authorize(request, conn)

    async def settle(self, request: Any, conn: asyncpg.Connection, charge: Any) -> None:
        if charge.kind != "none":
            raise PaymentRequired("settlement failed")
        await self.inner.settle(request, conn, charge)

    async def release(self, charge: Any) -> None:
        await self.inner.release(charge)


async def test_a_change_rolled_back_after_the_fact_leaves_no_history(
    client: AsyncTestClient, make_app, wallet, database_url
) -> None:
    """The history row is in the change's transaction: when settlement fails after the handler
    wrote both, both are rolled back."""
    memory_id = (await store_memory(client, wallet, FACTS[17]))["id"]
    app = make_app()
    app.state.payment_gate = _SettleFails(app.state.payment_gate)
    async with AsyncTestClient(app=app, timeout=60) as failing:
        h = auth(wallet)
        r = await failing.patch(f"/v1/memories/{memory_id}", json={"importance": 0.1}, headers=h)
        assert r.status_code == 402, r.text
        r = await failing.post("/v1/store", json={"content": FACTS[18]}, headers=h)
        assert r.status_code == 402, r.text
        batch = {"memories": [{"content": FACTS[19]}]}
        r = await failing.post("/v1/store/batch", json=batch, headers=h)
        assert r.status_code == 402, r.text
    m = (await client.get(f"/v1/memories/{memory_id}", headers=auth(wallet))).json()
    assert m["importance"] == 0.5
    rows = await _rows(database_url, wallet.address)
    assert [(str(row["memory_id"]), row["action"]) for row in rows] == [(memory_id, "create")]


# ---- extract, ingest, migrate (offline) ---------------------------------------------------------


async def test_extract_ingest_and_migrate_record_creates(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    r = await client.post(
        "/v1/memories/extract",
        json={"text": "I prefer tea over coffee. My sister Ana lives in Porto."},
        headers=h,
    )
    assert r.status_code == 200, r.text
    extracted = r.json()["memory_ids"]
    r = await client.post(
        "/v1/ingest", json={"text": "The garage door code changed to 4471."}, headers=h
    )
    assert r.status_code == 201, r.text
    ingested = r.json()["memory_ids"]
    r = await client.post(
        "/v1/migrate",
        json={"files": [{"filename": "notes.md", "content": "# Boat\nThe boat is red."}]},
        headers=h,
    )
    assert r.status_code == 201, r.text
    migrated = r.json()["memory_ids"]
    ids = [*extracted, *ingested, *migrated]
    assert len(ids) >= 3
    for memory_id in ids:
        history = await _history(client, wallet, memory_id)
        assert _actions(history) == ["create"]
        assert history[0]["changes"]["content"]


# ---- consolidate --------------------------------------------------------------------------------


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(384)
    return (v / np.linalg.norm(v)).astype(np.float32)


def _near(base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    v = base + 0.01 * rng.standard_normal(len(base))
    return (v / np.linalg.norm(v)).astype(np.float32)


async def _insert_cluster(database_url: str, wallet: str) -> dict[str, str]:
    """Near-identical memories written straight to the table (their vectors chosen)."""
    rng = np.random.default_rng(7)
    base = _unit(rng)
    items = {
        "keeper": ("Coffee: flat white, oat milk", 0.9, ["coffee"], False),
        "milk": ("Likes oat milk flat whites", 0.4, ["milk"], False),
        "sugar": ("Flat white, no sugar", 0.3, [], False),
        "pinned": ("Flat white with oat milk", 0.2, [], True),
    }
    conn = await asyncpg.connect(database_url)
    await register_vector(conn)
    try:
        ids = {}
        for name, (content, importance, tags, pinned) in items.items():
            memory_id = await conn.fetchval(
                """INSERT INTO memories (user_id, content, content_hash, embedding,
                       embedding_model, metadata, importance, pinned)
                   VALUES ($1, $2, $3, $4, 'all-MiniLM-L6-v2', $5, $6, $7) RETURNING id""",
                wallet.lower(), content, hashlib.sha256(content.encode()).digest(),
                _near(base, rng), json.dumps({"tags": tags}), importance, pinned,
            )  # fmt: skip
            ids[name] = str(memory_id)
        return ids
    finally:
        await conn.close()


async def test_consolidate_rule_mode_records_the_merge(
    client: AsyncTestClient, wallet, database_url
) -> None:
    ids = await _insert_cluster(database_url, wallet.address)
    h = auth(wallet)
    r = await client.post("/v1/memories/consolidate", json={"dry_run": True}, headers=h)
    assert r.status_code == 200 and r.json()["memories_merged"] == 2
    assert await _rows(database_url, wallet.address) == []  # a dry run records nothing
    r = await client.post("/v1/memories/consolidate", json={}, headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["clusters"][0]["merged_into"] == ids["keeper"]
    for name in ("milk", "sugar"):
        history = await _history(client, wallet, ids[name])
        assert _actions(history) == ["consolidate"]
        assert history[0]["changes"] == {
            "merged_into": ids["keeper"],
            "deleted": {"before": False, "after": True},
        }
    kept = await _history(client, wallet, ids["keeper"])
    assert _actions(kept) == ["consolidate"]
    changes = kept[0]["changes"]
    assert changes["tags"] == {"before": ["coffee"], "after": ["coffee", "milk"]}
    assert changes["metadata"] == {
        "before": {"tags": ["coffee"]},
        "after": {"tags": ["coffee", "milk"]},
    }
    assert sorted(changes["merged_from"]) == sorted([ids["milk"], ids["sugar"]])
    assert await _history(client, wallet, ids["pinned"]) == []  # untouched, still readable


async def test_consolidate_llm_mode_records_the_new_memory(
    client: AsyncTestClient, wallet, database_url
) -> None:
    ids = await _insert_cluster(database_url, wallet.address)
    r = await client.post("/v1/memories/consolidate", json={"mode": "llm"}, headers=auth(wallet))
    assert r.status_code == 200, r.text
    new_id = r.json()["clusters"][0]["merged_into"]
    created = await _history(client, wallet, new_id)
    assert _actions(created) == ["create"]
    assert created[0]["changes"]["tags"] == ["coffee", "milk"]
    for name in ("keeper", "milk", "sugar"):
        history = await _history(client, wallet, ids[name])
        assert history[0]["action"] == "consolidate"
        assert history[0]["changes"]["merged_into"] == new_id
    assert await _history(client, wallet, ids["pinned"]) == []
