"""Team memory, part 1: upsert by key, with versions. A store with a key its namespace holds
updates that memory to a new version (re-embedded, in history); concurrent stores of one key
lose nothing; a writer that names the version it read (If-Match, expected_version) meets a
newer one with a 412, or overwrites or merges when it says so; GET by key; batch store and
import take keys; migration 0008 upgrades a database that holds memories."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
from eth_account import Account
from litestar.testing import AsyncTestClient

from alembic import command
from app.config import LOCAL_EMBED_DIMS
from app.db.schema import alembic_config, upgrade_to_head
from tests.support.api import auth, store_memory
from tests.support.db import create_database
from tests.support.openai_wire import OpenAICompatibleServer

KEY = "tikv/compaction-tuning"


async def history_of(client: AsyncTestClient, wallet, memory_id: str) -> list[dict]:
    r = await client.get(f"/v1/memories/{memory_id}/history", headers=auth(wallet))
    assert r.status_code == 200, r.text
    return r.json()["history"]


async def test_a_known_key_updates_its_memory_to_a_new_version(client: AsyncTestClient) -> None:
    wallet = Account.create()
    first = await store_memory(client, wallet, "level0 compaction at 4 files", key=KEY)
    assert (first["memory"]["key"], first["memory"]["version"]) == (KEY, 1)
    second = await store_memory(client, wallet, "level0 compaction at 8 files", key=KEY,
                                importance=0.9)  # fmt: skip
    assert second["id"] == first["id"] and second["deduplicated"] is False
    memory = second["memory"]
    assert (memory["version"], memory["content"], memory["importance"]) == (
        2, "level0 compaction at 8 files", 0.9)  # fmt: skip
    r = await client.post("/v1/recall", json={"query": "compaction at 8 files"},
                          headers=auth(wallet))  # fmt: skip
    assert r.json()["memories"][0]["content"] == "level0 compaction at 8 files"  # re-embedded
    entries = await history_of(client, wallet, first["id"])
    assert len(entries) == 2
    update = next(e for e in entries if e["action"] == "update")
    assert (
        update["changes"]["version"]["before"] == 1 and update["changes"]["version"]["after"] == 2
    )
    assert update["changes"]["content"]["after"] == "level0 compaction at 8 files"
    other_ns = await store_memory(client, wallet, "level0 compaction at 4 files", key=KEY,
                                  namespace="staging")  # fmt: skip
    assert other_ns["id"] != first["id"] and other_ns["memory"]["version"] == 1


async def test_get_by_key(client: AsyncTestClient) -> None:
    wallet, stranger = Account.create(), Account.create()
    stored = await store_memory(client, wallet, "the staging cluster has 3 nodes", key=KEY,
                                namespace="ops")  # fmt: skip
    r = await client.get(f"/v1/memories/by-key/{KEY}", params={"namespace": "ops"},
                         headers=auth(wallet))  # fmt: skip
    assert r.status_code == 200, r.text
    assert (r.json()["id"], r.json()["version"]) == (stored["id"], 1)
    for who, namespace in ((wallet, "default"), (stranger, "ops")):
        r = await client.get(f"/v1/memories/by-key/{KEY}", params={"namespace": namespace},
                             headers=auth(who))  # fmt: skip
        assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"


async def test_twenty_concurrent_upserts_of_a_new_key_lose_nothing(
    client: AsyncTestClient,
) -> None:
    wallet = Account.create()
    contents = [f"build cache size is {n} GB" for n in range(20)]
    answers = await asyncio.gather(*(
        client.post("/v1/store", json={"content": c, "key": KEY}, headers=auth(wallet))
        for c in contents
    ))  # fmt: skip
    assert [a.status_code for a in answers] == [201] * 20, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sorted(a.json()["memory"]["version"] for a in answers) == list(range(1, 21))
    memory_id = answers[0].json()["id"]
    r = await client.get(f"/v1/memories/by-key/{KEY}", headers=auth(wallet))
    assert r.json()["version"] == 20
    assert len(await history_of(client, wallet, memory_id)) == 20
    r = await client.get("/v1/memories", headers=auth(wallet))
    assert r.json()["total"] == 1


async def test_if_match_lets_one_of_twenty_concurrent_writers_win(
    client: AsyncTestClient,
) -> None:
    wallet = Account.create()
    stored = await store_memory(client, wallet, "the deploy window is Tuesday")
    memory_id = stored["id"]
    answers = await asyncio.gather(*(
        client.patch(f"/v1/memories/{memory_id}", json={"content": f"the deploy window is day {n}"},
                     headers={**auth(wallet), "If-Match": '"1"'})
        for n in range(20)
    ))  # fmt: skip
    won = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 412]
    assert len(won) == 1 and len(refused) == 19, [a.status_code for a in answers]
    for a in refused:
        error = a.json()["error"]
        assert error["code"] == "PRECONDITION_FAILED"
        assert error["details"]["current_version"] == 2
    r = await client.get(f"/v1/memories/{memory_id}", headers=auth(wallet))
    assert (r.json()["version"], r.json()["content"]) == (2, won[0].json()["content"])
    assert len(await history_of(client, wallet, memory_id)) == 2  # the store and the one win


async def test_a_patch_names_the_version_in_the_body_or_if_match(client: AsyncTestClient) -> None:
    wallet = Account.create()
    memory_id = (await store_memory(client, wallet, "the on-call rota is weekly"))["id"]
    r = await client.patch(f"/v1/memories/{memory_id}",
                           json={"importance": 0.8, "expected_version": 3}, headers=auth(wallet))  # fmt: skip
    assert r.status_code == 412 and r.json()["error"]["details"]["current_version"] == 1
    r = await client.patch(f"/v1/memories/{memory_id}",
                           json={"importance": 0.8, "expected_version": 1}, headers=auth(wallet))  # fmt: skip
    assert r.status_code == 200 and r.json()["version"] == 2
    r = await client.patch(f"/v1/memories/{memory_id}", json={"importance": 0.7},
                           headers={**auth(wallet), "If-Match": "W/\"2\""})  # fmt: skip
    assert r.status_code == 200 and r.json()["version"] == 3
    r = await client.patch(f"/v1/memories/{memory_id}", json={"importance": 0.6},
                           headers={**auth(wallet), "If-Match": "latest"})  # fmt: skip
    assert r.status_code == 422
    r = await client.patch(f"/v1/memories/{memory_id}", json={"importance": 0.6},
                           headers={**auth(wallet), "If-Match": "*"})  # fmt: skip
    assert r.status_code == 200 and r.json()["version"] == 4


async def test_a_stale_keyed_store_is_rejected_overwritten_or_merged(
    client: AsyncTestClient,
) -> None:
    wallet = Account.create()
    await store_memory(client, wallet, "The build uses Bazel.", key=KEY)
    await store_memory(client, wallet, "The build uses Bazel 7.", key=KEY)  # version 2
    r = await client.post("/v1/store", headers=auth(wallet), json={
        "content": "The build uses Buck.", "key": KEY, "expected_version": 1})  # fmt: skip
    assert r.status_code == 412 and r.json()["error"]["details"]["current_version"] == 2
    r = await client.get(f"/v1/memories/by-key/{KEY}", headers=auth(wallet))
    assert (r.json()["version"], r.json()["content"]) == (2, "The build uses Bazel 7.")
    merged = await store_memory(client, wallet, "Remote caching is on.", key=KEY,
                                expected_version=1, on_conflict="merge")  # fmt: skip
    content = merged["memory"]["content"]
    assert "Bazel 7" in content and "Remote caching is on" in content
    assert merged["memory"]["version"] == 3
    entries = await history_of(client, wallet, merged["id"])
    merge = next(e for e in entries if "merged" in e["changes"])
    assert merge["changes"]["merged"] == {"stored": "The build uses Bazel 7.",
                                          "sent": "Remote caching is on."}  # fmt: skip
    overwritten = await store_memory(client, wallet, "The build uses Buck.", key=KEY,
                                     expected_version=1, on_conflict="overwrite")  # fmt: skip
    assert (overwritten["memory"]["content"], overwritten["memory"]["version"]) == (
        "The build uses Buck.", 4)  # fmt: skip
    r = await client.post("/v1/store", headers=auth(wallet), json={
        "content": "x", "key": KEY, "on_conflict": "sometimes"})  # fmt: skip
    assert r.status_code == 422


async def test_batch_store_and_import_take_keys(client: AsyncTestClient) -> None:
    wallet = Account.create()
    r = await client.post("/v1/store/batch", headers=auth(wallet), json={"memories": [
        {"content": "the cache lives on node a", "key": "cache/home"},
        {"content": "logs rotate daily"},
        {"content": "the cache lives on node b", "key": "cache/home"},
    ]})  # fmt: skip
    assert r.status_code == 201, r.text
    ids = r.json()["ids"]
    assert ids[0] == ids[2] and ids[1] != ids[0]
    r = await client.get("/v1/memories/by-key/cache/home", headers=auth(wallet))
    assert (r.json()["version"], r.json()["content"]) == (2, "the cache lives on node b")
    r = await client.post("/v1/import", headers=auth(wallet), json={"memories": [
        {"content": "the cache lives on node c", "key": "cache/home"},
        {"content": "backups run at 2am", "key": "backups"},
    ]})  # fmt: skip
    assert r.status_code in (200, 201), r.text
    assert r.json()["imported"] == 2
    r = await client.get("/v1/memories/by-key/cache/home", headers=auth(wallet))
    assert (r.json()["id"], r.json()["version"]) == (ids[0], 3)
    r = await client.get("/v1/memories/by-key/backups", headers=auth(wallet))
    assert r.json()["version"] == 1


async def test_migration_0008_upgrades_a_database_that_holds_memories(
    make_app, database_url: str
) -> None:
    url = await create_database(database_url, f"engram_keys_{uuid.uuid4().hex[:8]}")
    config = alembic_config(url, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
    await asyncio.to_thread(command.upgrade, config, "0007")
    wallet = Account.create()
    owner = wallet.address.lower()
    conn = await asyncpg.connect(url)
    try:
        vector = "[" + ",".join(["0.05"] * LOCAL_EMBED_DIMS) + "]"
        memory_id = await conn.fetchval(
            """INSERT INTO memories (user_id, content, content_hash, embedding, embedding_model)
               VALUES ($1, 'the staging cluster has 3 nodes', sha256('x'::bytea), $2::vector,
                       'all-MiniLM-L6-v2') RETURNING id""",
            owner, vector,
        )  # fmt: skip
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, url, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
    async with AsyncTestClient(app=make_app(database={"url": url})) as client:
        r = await client.get(f"/v1/memories/{memory_id}", headers=auth(wallet))
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 1 and "key" not in r.json()
        keyed = await store_memory(client, wallet, "the staging cluster has 5 nodes", key="nodes")
        again = await store_memory(client, wallet, "the staging cluster has 6 nodes", key="nodes")
        assert again["id"] == keyed["id"] and again["memory"]["version"] == 2


async def test_a_key_stays_with_one_live_memory_per_namespace(client: AsyncTestClient) -> None:
    """Moving a keyed memory where its key is held, or restoring one whose key was taken since,
    is a 409 that changes nothing."""
    wallet = Account.create()
    here = await store_memory(client, wallet, "the runner pool has 4 machines", key="runners")
    there = await store_memory(client, wallet, "the runner pool has 9 machines", key="runners",
                               namespace="ci")  # fmt: skip
    r = await client.patch(f"/v1/memories/{here['id']}", json={"namespace": "ci"},
                           headers=auth(wallet))  # fmt: skip
    assert r.status_code == 409 and r.json()["error"]["code"] == "CONFLICT", r.text
    r = await client.delete(f"/v1/memories/{there['id']}", headers=auth(wallet))
    assert r.status_code == 200, r.text
    taken = await store_memory(client, wallet, "the runner pool has 12 machines", key="runners",
                               namespace="ci")  # fmt: skip
    assert taken["id"] != there["id"] and taken["memory"]["version"] == 1
    r = await client.post(f"/v1/memories/{there['id']}/restore", headers=auth(wallet))
    assert r.status_code == 409, r.text
    r = await client.get("/v1/memories/by-key/runners", params={"namespace": "ci"},
                         headers=auth(wallet))  # fmt: skip
    assert r.json()["id"] == taken["id"]
    r = await client.patch(f"/v1/memories/{here['id']}", json={"namespace": "staging"},
                           headers=auth(wallet))  # fmt: skip
    assert r.status_code == 200 and r.json()["namespace"] == "staging"


async def test_merge_is_the_default_where_the_operator_says_and_the_llm_merges(make_app) -> None:
    """ENGRAM_MERGE_NAMESPACES makes merge the default there; with an LLM configured, the LLM
    merges (the local OpenAI-wire server joins the two contents)."""
    wallet = Account.create()
    with OpenAICompatibleServer() as llm:
        app = make_app(limits={"merge_namespaces": ("team",)}, llm={"base_url": llm.base_url})
        async with AsyncTestClient(app=app) as client:
            for namespace in ("team", "default"):
                await store_memory(client, wallet, "Deploys go out on Tuesdays.", key="deploys",
                                   namespace=namespace)  # fmt: skip
                await store_memory(client, wallet, "Deploys go out on Thursdays.", key="deploys",
                                   namespace=namespace)  # fmt: skip
            stale = {"content": "Deploys need a second approver.", "key": "deploys",
                     "expected_version": 1}  # fmt: skip
            r = await client.post("/v1/store", json={**stale, "namespace": "team"},
                                  headers=auth(wallet))  # fmt: skip
            assert r.status_code == 201, r.text
            assert r.json()["memory"]["content"] == (
                "Deploys go out on Thursdays. Deploys need a second approver.")  # fmt: skip
            r = await client.post("/v1/store", json={**stale, "namespace": "default"},
                                  headers=auth(wallet))  # fmt: skip
            assert r.status_code == 412
    merges = [b for b in llm.chat_requests
              if b["response_format"]["json_schema"]["name"] == "engram_merge_memories"]  # fmt: skip
    assert len(merges) == 1
