"""Relations and the memory graph over HTTP: create, list (both directions), delete, graph walk,
recall's include_relations and relation_count; every reject path, wallet isolation, no duplicate
rows under concurrent creates, and relations hidden when a memory at either end goes away."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path
from uuid import UUID

import asyncpg
import httpx
import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient
from memoclaw import MemoClaw
from memoclaw.errors import NotFoundError

from app.config import LOCAL_EMBED_DIMS
from app.db.pool import asyncpg_dsn, create_pool
from app.relations import repository as relations_repo
from tests.support.api import auth, store_memory
from tests.support.facts import FACTS

MISSING = "00000000-0000-4000-8000-000000000000"


async def _relate(
    client: AsyncTestClient, account, source: str, target: str, relation_type="related_to", **kw
):
    return await client.post(
        f"/v1/memories/{source}/relations",
        json={"target_id": target, "relation_type": relation_type, **kw},
        headers=auth(account),
    )


async def _related(client: AsyncTestClient, account, source: str, target: str, **kw) -> str:
    r = await _relate(client, account, source, target, **kw)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def _list(client: AsyncTestClient, account, memory_id: str) -> list[dict]:
    r = await client.get(f"/v1/memories/{memory_id}/relations", headers=auth(account))
    assert r.status_code == 200, r.text
    return list(r.json()["relations"])


async def _graph(client: AsyncTestClient, account, memory_id: str, query: str = "") -> dict:
    r = await client.get(f"/v1/memories/{memory_id}/graph{query}", headers=auth(account))
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _relation_rows(database_url: str, wallet: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM memory_relations WHERE user_id = $1", wallet.lower()
            )
        )
    finally:
        await conn.close()


def _code(r) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


# ---- create / list / delete ---------------------------------------------------------------------


async def test_create_list_delete_round_trip(client: AsyncTestClient, wallet) -> None:
    a = (await store_memory(client, wallet, FACTS[0], importance=0.9, namespace="prefs"))["id"]
    b = (await store_memory(client, wallet, FACTS[1], memory_type="decision"))["id"]
    c = (await store_memory(client, wallet, FACTS[2]))["id"]
    h = auth(wallet)

    r = await _relate(client, wallet, a, b, "supports", metadata={"why": "same topic"})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["source_id"] == a and created["target_id"] == b
    assert created["relation_type"] == "supports" and created["metadata"] == {"why": "same topic"}
    assert UUID(created["id"]) and created["created_at"].endswith("Z")
    # relation calls are free: the free tier stays where the three stores left it
    assert r.headers["x-free-tier-remaining"] == "97"
    from_c = await _related(client, wallet, c, a, relation_type="contradicts")

    listed = await _list(client, wallet, a)
    assert [(x["id"], x["direction"], x["relation_type"]) for x in listed] == [
        (created["id"], "outgoing", "supports"),
        (from_c, "incoming", "contradicts"),
    ]
    assert listed[0]["memory"] == {
        "id": b, "content": FACTS[1], "importance": 0.5, "memory_type": "decision",
        "namespace": "default",
    }  # fmt: skip
    assert listed[0]["metadata"] == {"why": "same topic"} and listed[1]["metadata"] == {}
    assert listed[1]["memory"]["id"] == c and listed[0]["created_at"] == created["created_at"]
    seen_from_b = await _list(client, wallet, b)
    assert [(x["id"], x["direction"]) for x in seen_from_b] == [(created["id"], "incoming")]
    assert seen_from_b[0]["memory"]["id"] == a and seen_from_b[0]["memory"]["namespace"] == "prefs"

    # deleted through either end (here the target's path)
    r = await client.delete(f"/v1/memories/{b}/relations/{created['id']}", headers=h)
    assert r.status_code == 200 and r.json() == {"deleted": True, "id": created["id"]}
    assert r.headers["x-free-tier-remaining"] == "97"
    r = await client.delete(f"/v1/memories/{a}/relations/{created['id']}", headers=h)
    assert _code(r) == (404, "NOT_FOUND")
    assert [x["id"] for x in await _list(client, wallet, a)] == [from_c]
    assert await _list(client, wallet, b) == []
    # and it can be created again after the delete
    await _related(client, wallet, a, b, relation_type="supports")
    status = (await client.get("/v1/free-tier/status", headers=h)).json()
    assert status["free_tier_used"] == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"relation_type": "likes"}, "relation_type"),
        ({"relation_type": "RELATED_TO"}, "relation_type"),
        ({"target_id": "not-a-uuid"}, "target_id"),
        ({"target_id": None}, "target_id"),
        ({"metadata": {f"k{i}": i for i in range(21)}}, "metadata"),
        ({"metadata": {"a": {"b": {"c": {"d": 1}}}}}, "metadata"),
        ({"metadata": {"note": "nul \x00 here"}}, "metadata"),
        ({"metadata": "text"}, "metadata"),
    ],
)
async def test_create_rejects_bad_input(
    client: AsyncTestClient, wallet, database_url, body: dict, field: str
) -> None:
    a = (await store_memory(client, wallet, FACTS[3]))["id"]
    b = (await store_memory(client, wallet, FACTS[4]))["id"]
    payload = {"target_id": b, "relation_type": "related_to", **body}
    r = await client.post(f"/v1/memories/{a}/relations", json=payload, headers=auth(wallet))
    assert _code(r) == (422, "VALIDATION_ERROR"), r.text
    assert field in r.text
    assert await _relation_rows(database_url, wallet.address) == 0


async def test_create_rejects_self_links_bad_ids_and_missing_bodies(
    client: AsyncTestClient, wallet, database_url
) -> None:
    a = (await store_memory(client, wallet, FACTS[5]))["id"]
    h = auth(wallet)
    r = await _relate(client, wallet, a, a)
    assert _code(r) == (422, "VALIDATION_ERROR") and "itself" in r.json()["error"]["message"]
    r = await _relate(client, wallet, a, a.upper())  # the same UUID spelled differently
    assert _code(r) == (422, "VALIDATION_ERROR")
    r = await _relate(client, wallet, "not-a-uuid", a)
    assert _code(r) == (422, "VALIDATION_ERROR")
    r = await client.post(f"/v1/memories/{a}/relations", json={"target_id": a}, headers=h)
    assert _code(r) == (422, "VALIDATION_ERROR")  # relation_type is required
    r = await client.post(f"/v1/memories/{a}/relations", headers=h)
    assert r.status_code in (400, 422)
    for path in (f"/v1/memories/{a}x/relations", "/v1/memories/123/graph"):
        r = await client.get(path, headers=h)
        assert _code(r) == (422, "VALIDATION_ERROR"), path
    r = await client.delete(f"/v1/memories/{a}/relations/nope", headers=h)
    assert _code(r) == (422, "VALIDATION_ERROR")
    assert await _relation_rows(database_url, wallet.address) == 0


async def test_identical_relation_is_a_conflict_and_never_a_second_row(
    client: AsyncTestClient, wallet, database_url
) -> None:
    a = (await store_memory(client, wallet, FACTS[6]))["id"]
    b = (await store_memory(client, wallet, FACTS[7]))["id"]
    first = await _related(client, wallet, a, b, relation_type="supersedes")
    r = await _relate(client, wallet, a, b, "supersedes", metadata={"again": True})
    assert _code(r) == (409, "CONFLICT")
    assert r.json()["error"]["details"] == {"relation_id": first}
    # another type, or the other direction, is another relation
    await _related(client, wallet, a, b, relation_type="supports")
    await _related(client, wallet, b, a, relation_type="supersedes")
    assert await _relation_rows(database_url, wallet.address) == 3
    listed = await _list(client, wallet, a)
    assert next(x for x in listed if x["id"] == first)["metadata"] == {}


async def test_concurrent_identical_creates_make_one_row(
    engram_url: str, wallet, database_url
) -> None:
    """Over a real server (AsyncTestClient runs requests one at a time), 20 identical creates at
    once: one 201, nineteen 409 naming it, one row."""
    async with httpx.AsyncClient(base_url=engram_url, timeout=60) as http:
        a, b = [(await store_memory(http, wallet, fact))["id"] for fact in FACTS[8:10]]
        body = {"target_id": b, "relation_type": "derived_from"}
        responses = await asyncio.gather(
            *(
                http.post(f"/v1/memories/{a}/relations", json=body, headers=auth(wallet))
                for _ in range(20)
            )
        )
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * 19, codes
    created = next(r.json()["id"] for r in responses if r.status_code == 201)
    conflicts = [r.json()["error"] for r in responses if r.status_code == 409]
    assert {e["details"]["relation_id"] for e in conflicts} == {created}
    assert await _relation_rows(database_url, wallet.address) == 1


async def test_overlapping_transactions_insert_one_relation(wallet, database_url) -> None:
    """20 transactions open at once, each inserting the same relation: the unique constraint
    makes all but one wait for the first commit and then insert nothing."""
    pool = await create_pool(asyncpg_dsn(database_url), 1, 21)
    try:
        owner = wallet.address.lower()
        async with pool.acquire() as conn:
            a, b = [
                await conn.fetchval(
                    """INSERT INTO memories (user_id, content, content_hash, embedding,
                           embedding_model)
                       VALUES ($1, $2, sha256(convert_to($2, 'UTF8')),
                           array_fill(0.1::real, ARRAY[$3::int])::vector, 'test')
                       RETURNING id""",
                    owner,
                    content,
                    LOCAL_EMBED_DIMS,
                )
                for content in (FACTS[10], FACTS[11])
            ]
        all_open = asyncio.Barrier(20)

        async def create() -> bool:
            async with pool.acquire() as conn, conn.transaction():
                await all_open.wait()
                row = await relations_repo.insert(conn, owner, a, b, "supports", {"n": 1})
                return row is not None

        assert sorted(await asyncio.gather(*(create() for _ in range(20)))) == [False] * 19 + [True]
    finally:
        await pool.close()
    assert await _relation_rows(database_url, wallet.address) == 1


# ---- isolation and not found ---------------------------------------------------------------------


async def test_other_wallets_memories_and_relations_are_not_found(
    client: AsyncTestClient, wallet, other_wallet, database_url
) -> None:
    mine_a = (await store_memory(client, wallet, FACTS[10]))["id"]
    mine_b = (await store_memory(client, wallet, FACTS[11]))["id"]
    mine_rel = await _related(client, wallet, mine_a, mine_b)
    theirs = (await store_memory(client, other_wallet, FACTS[12]))["id"]
    theirs_b = (await store_memory(client, other_wallet, FACTS[13]))["id"]
    their_rel = await _related(client, other_wallet, theirs, theirs_b)
    h = auth(other_wallet)

    # another wallet's memory at either end, or a memory that does not exist
    for source, target in (
        (theirs, mine_a),
        (mine_a, theirs),
        (theirs, MISSING),
        (MISSING, theirs),
    ):
        r = await _relate(client, other_wallet, source, target)
        assert _code(r) == (404, "NOT_FOUND"), (source, target)
    for path in (
        f"/v1/memories/{mine_a}/relations",
        f"/v1/memories/{mine_a}/graph",
        f"/v1/memories/{MISSING}/relations",
        f"/v1/memories/{MISSING}/graph",
    ):
        r = await client.get(path, headers=h)
        assert _code(r) == (404, "NOT_FOUND"), path
        assert FACTS[10] not in r.text
    # my relation through my memory's path, through their memory's path, an unknown relation id
    for memory_id, relation_id in ((mine_a, mine_rel), (theirs, mine_rel), (theirs, MISSING)):
        r = await client.delete(f"/v1/memories/{memory_id}/relations/{relation_id}", headers=h)
        assert _code(r) == (404, "NOT_FOUND"), (memory_id, relation_id)
    # their own relation, named through a memory of theirs that it does not touch
    theirs_c = (await store_memory(client, other_wallet, FACTS[14]))["id"]
    r = await client.delete(f"/v1/memories/{theirs_c}/relations/{their_rel}", headers=h)
    assert _code(r) == (404, "NOT_FOUND")

    # each wallet sees only its own relation, and mine is untouched
    assert [x["id"] for x in await _list(client, wallet, mine_a)] == [mine_rel]
    assert [x["id"] for x in await _list(client, other_wallet, theirs)] == [their_rel]
    graph = await _graph(client, other_wallet, theirs, "?depth=5")
    assert {n["id"] for n in graph["nodes"]} == {theirs, theirs_b}
    assert await _relation_rows(database_url, wallet.address) == 1
    assert await _relation_rows(database_url, other_wallet.address) == 1


async def test_deleted_or_expired_ends_are_not_found_and_hide_their_relations(
    client: AsyncTestClient, wallet, database_url
) -> None:
    a, b, c, d = [
        (await store_memory(client, wallet, content))["id"]
        for content in (
            "The boiler service is booked for the first of October",
            "The boiler model is a Vaillant ecoTEC plus",
            "The plumber charges ninety euros per hour",
            "The radiator in the hall needs bleeding every winter",
        )
    ]
    await _related(client, wallet, a, b)
    await _related(client, wallet, c, a, relation_type="supports")
    ad = await _related(client, wallet, a, d)
    h = auth(wallet)
    query = {"query": "boiler service booking", "limit": 10}
    counts = {
        m["id"]: m["_signals"]["relation_count"]
        for m in (await client.post("/v1/recall", json=query, headers=h)).json()["memories"]
    }
    assert counts[a] == 3 and counts[b] == 1

    assert (await client.delete(f"/v1/memories/{b}", headers=h)).status_code == 200
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE memories SET expires_at = now() - interval '1 second'"
            " WHERE user_id = $1 AND id = $2",
            wallet.address.lower(),
            UUID(d),
        )
    finally:
        await conn.close()

    listed = await _list(client, wallet, a)
    assert [(x["memory"]["id"], x["direction"]) for x in listed] == [(c, "incoming")]
    graph = await _graph(client, wallet, a, "?depth=3")
    assert {n["id"] for n in graph["nodes"]} == {a, c}
    assert [(e["source_id"], e["target_id"]) for e in graph["edges"]] == [(c, a)]
    recalled = (await client.post("/v1/recall", json=query, headers=h)).json()["memories"]
    assert {m["id"]: m["_signals"]["relation_count"] for m in recalled}[a] == 1
    # the gone memories themselves: not found on every relation path
    for gone in (b, d):
        assert _code(await client.get(f"/v1/memories/{gone}/relations", headers=h))[0] == 404
        assert _code(await client.get(f"/v1/memories/{gone}/graph", headers=h))[0] == 404
        r = await _relate(client, wallet, a, gone)
        assert _code(r) == (404, "NOT_FOUND")
        r = await _relate(client, wallet, gone, a, "supports")
        assert _code(r) == (404, "NOT_FOUND")
    # a hidden relation cannot be deleted either (it is not there for the wallet)
    r = await client.delete(f"/v1/memories/{a}/relations/{ad}", headers=h)
    assert _code(r) == (404, "NOT_FOUND")


# ---- graph ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "?depth=0",
        "?depth=6",
        "?depth=-1",
        "?depth=two",
        "?limit=0",
        "?limit=201",
        "?relation_types=likes",
        "?relation_types=related_to,likes",
    ],
)
async def test_graph_rejects_out_of_range_parameters(
    client: AsyncTestClient, wallet, query: str
) -> None:
    a = (await store_memory(client, wallet, FACTS[15]))["id"]
    r = await client.get(f"/v1/memories/{a}/graph{query}", headers=auth(wallet))
    assert _code(r) == (422, "VALIDATION_ERROR"), r.text


async def test_graph_walks_both_directions_once_with_type_filter(
    client: AsyncTestClient, wallet
) -> None:
    ids = [(await store_memory(client, wallet, fact))["id"] for fact in FACTS[16:22]]
    a, b, c, d, e, f = ids
    # a → b → d, c → a, b → c (a cycle a→b→c→a), d ↔ e with contradicts, f alone
    ab = await _related(client, wallet, a, b)
    bd = await _related(client, wallet, b, d, relation_type="supports")
    ca = await _related(client, wallet, c, a, relation_type="supports")
    bc = await _related(client, wallet, b, c)
    de = await _related(client, wallet, d, e, relation_type="contradicts")
    ed = await _related(client, wallet, e, d, relation_type="contradicts")

    graph = await _graph(client, wallet, a)
    assert graph["depth"] == 2 and graph["root"]["id"] == a and graph["root"]["depth"] == 0
    assert graph["root"]["content"] == FACTS[16] and graph["root"]["memory_type"] == "general"
    depth_of = {n["id"]: n["depth"] for n in graph["nodes"]}
    assert len(graph["nodes"]) == len(depth_of)  # every memory once, at its shortest distance
    assert depth_of == {a: 0, b: 1, c: 1, d: 2}
    assert {x["id"] for x in graph["edges"]} == {ab, bd, ca, bc}  # d–e leaves the node set
    edge = next(x for x in graph["edges"] if x["id"] == ab)
    assert edge == {"id": ab, "source_id": a, "target_id": b, "relation_type": "related_to"}

    full = await _graph(client, wallet, a, "?depth=5&limit=200")
    assert {n["id"]: n["depth"] for n in full["nodes"]} == {a: 0, b: 1, c: 1, d: 2, e: 3}
    assert {x["id"] for x in full["edges"]} == {ab, bd, ca, bc, de, ed}
    assert full["depth"] == 5

    for query in ("?relation_types=supports&depth=5", "?relation_types=supports,supports"):
        only = await _graph(client, wallet, a, query)
        assert {n["id"]: n["depth"] for n in only["nodes"]} == {a: 0, c: 1}, query
        assert [x["id"] for x in only["edges"]] == [ca]
    both = await _graph(
        client, wallet, d, "?depth=5&relation_types=contradicts&relation_types=supports"
    )
    assert {n["id"]: n["depth"] for n in both["nodes"]} == {d: 0, b: 1, e: 1}
    assert {x["id"] for x in both["edges"]} == {bd, de, ed}
    lonely = await _graph(client, wallet, f)
    assert lonely["nodes"] == [lonely["root"]] and lonely["edges"] == []


def _chain_texts(n: int) -> list[str]:
    """n texts of random words: far enough apart that store's near-dedup merges none."""
    words = sorted({w.strip(".,':").lower() for fact in FACTS for w in fact.split() if len(w) > 3})
    rng = random.Random(1000)
    return [f"Note {i}: " + " ".join(rng.sample(words, 9)) for i in range(n)]


async def test_graph_on_a_1000_node_chain_stops_at_the_depth_and_limit_asked(
    client: AsyncTestClient, wallet, database_url
) -> None:
    texts = _chain_texts(1000)
    h = auth(wallet)
    ids: list[str] = []
    for start in range(0, 1000, 100):
        batch = [{"content": t, "namespace": "chain"} for t in texts[start : start + 100]]
        r = await client.post("/v1/store/batch", json={"memories": batch}, headers=h)
        assert r.status_code == 201, r.text
        assert r.json()["deduplicated_count"] == 0
        ids.extend(r.json()["ids"])
    assert len(set(ids)) == 1000
    conn = await asyncpg.connect(database_url)
    try:
        links = [(UUID(ids[i]), UUID(ids[i + 1])) for i in range(999)]
        created = await relations_repo.create_many(conn, wallet.address.lower(), links, "supports")
        assert created == 999
    finally:
        await conn.close()

    graph = await _graph(client, wallet, ids[0], "?depth=5&limit=200")
    assert [(n["id"], n["depth"]) for n in graph["nodes"]] == [(ids[i], i) for i in range(6)]
    # one create_many statement: the same created_at for all, so compare as sets
    assert {(e["source_id"], e["target_id"]) for e in graph["edges"]} == {
        (ids[i], ids[i + 1]) for i in range(5)
    }
    limited = await _graph(client, wallet, ids[0], "?depth=5&limit=3")
    assert [n["id"] for n in limited["nodes"]] == ids[:3] and len(limited["edges"]) == 2
    default = await _graph(client, wallet, ids[0])
    assert [n["id"] for n in default["nodes"]] == ids[:3]

    middle = await _graph(client, wallet, ids[500], "?depth=2")
    depth_of = {n["id"]: n["depth"] for n in middle["nodes"]}
    assert depth_of == {
        ids[498]: 2, ids[499]: 1, ids[500]: 0, ids[501]: 1, ids[502]: 2
    }  # fmt: skip
    deep = await _graph(client, wallet, ids[500], "?depth=5&limit=200")
    assert {n["id"] for n in deep["nodes"]} == set(ids[495:506]) and len(deep["edges"]) == 10
    capped = await _graph(client, wallet, ids[500], "?depth=5&limit=4")
    assert len(capped["nodes"]) == 4 and capped["nodes"][0]["id"] == ids[500]
    assert [n["depth"] for n in capped["nodes"]] == [0, 1, 1, 2]
    assert {n["id"] for n in capped["nodes"][1:3]} == {ids[499], ids[501]}
    end = await _graph(client, wallet, ids[999], "?depth=5")
    assert [n["id"] for n in end["nodes"]] == ids[999:993:-1]
    assert r.headers["x-free-tier-remaining"] == "90"  # ten batches; the graph calls were free
    status = (await client.get("/v1/free-tier/status", headers=h)).json()
    assert status["free_tier_remaining"] == 90


# ---- recall ---------------------------------------------------------------------------------------


async def test_recall_include_relations_lists_each_results_relations(
    client: AsyncTestClient, wallet
) -> None:
    pepper = "The user's dog Pepper is a border collie"
    a = (await store_memory(client, wallet, pepper, importance=0.8))["id"]
    b = (await store_memory(client, wallet, "Pepper the dog needs two long walks a day"))["id"]
    c = (await store_memory(client, wallet, "The vet appointment for Pepper is on Monday"))["id"]
    ab = await _related(client, wallet, a, b, metadata={"source": "chat"})
    ca = await _related(client, wallet, c, a, relation_type="supports")
    h = auth(wallet)
    body = {"query": "Pepper the dog", "limit": 3, "include_relations": True}
    r = await client.post("/v1/recall", json=body, headers=h)
    assert r.status_code == 200, r.text
    by_id = {m["id"]: m for m in r.json()["memories"]}
    assert set(by_id) == {a, b, c}
    assert by_id[a]["relations"] == await _list(client, wallet, a)
    assert [(x["id"], x["direction"]) for x in by_id[a]["relations"]] == [
        (ab, "outgoing"),
        (ca, "incoming"),
    ]
    assert by_id[b]["relations"][0]["memory"]["id"] == a
    assert by_id[b]["relations"][0]["metadata"] == {"source": "chat"}
    assert by_id[b]["relations"][0]["direction"] == "incoming"
    assert [x["id"] for x in by_id[c]["relations"]] == [ca]
    plain = await client.post("/v1/recall", json={**body, "include_relations": False}, headers=h)
    assert all("relations" not in m for m in plain.json()["memories"])


async def test_a_related_memory_decays_slower_than_an_identical_unrelated_one(
    client: AsyncTestClient, wallet, database_url
) -> None:
    content = "The quarterly board meeting is held in the Oslo office"
    related = (await store_memory(client, wallet, content, namespace="with-links"))["id"]
    alone = (await store_memory(client, wallet, content, namespace="without-links"))["id"]
    lunch = "Lunch orders are placed with the canteen by ten"
    other = (await store_memory(client, wallet, lunch))["id"]
    await _related(client, wallet, other, related, relation_type="supports")
    conn = await asyncpg.connect(database_url)
    try:
        # the same age and the same last access for both: only the relation tells them apart
        await conn.execute(
            """UPDATE memories SET created_at = now() - interval '60 days',
                      accessed_at = now() - interval '60 days'
               WHERE user_id = $1 AND id = ANY($2::uuid[])""",
            wallet.address.lower(),
            [UUID(related), UUID(alone)],
        )
    finally:
        await conn.close()
    r = await client.post(
        "/v1/recall", json={"query": "board meeting in Oslo", "limit": 2}, headers=auth(wallet)
    )
    assert r.status_code == 200, r.text
    first, second = r.json()["memories"]
    assert (first["id"], second["id"]) == (related, alone)
    s_rel, s_alone = first["_signals"], second["_signals"]
    assert s_rel["relation_count"] == 1 and s_alone["relation_count"] == 0
    assert s_rel["vector"] == pytest.approx(s_alone["vector"])
    assert s_alone["type_decay"] == pytest.approx(0.5, abs=1e-3)  # one general half-life
    assert s_rel["type_decay"] == pytest.approx(0.5 ** (60 / 66), abs=1e-3)  # half-life × 1.1
    assert first["score"] > second["score"]


# ---- the official SDK ------------------------------------------------------------------------------


def test_the_sdk_parses_every_relation_answer(engram_url: str, tmp_path: Path) -> None:
    account = Account.create()
    with MemoClaw(
        private_key=account.key.hex(), base_url=engram_url, max_retries=0,
        config_path=tmp_path / "no-memoclaw-config.json",
    ) as sdk:  # fmt: skip
        a = sdk.store("The user's favourite tea is genmaicha").id
        b = sdk.store("The user buys tea from a shop in Kyoto").id
        relation = sdk.create_relation(a, b, "related_to", metadata={"k": "v"})
        assert (
            relation.source_id == a and relation.target_id == b and relation.metadata == {"k": "v"}
        )
        listed = sdk.list_relations(b)
        assert [(x.id, x.direction, x.memory.id) for x in listed] == [(relation.id, "incoming", a)]
        graph = sdk.get_memory_graph(a, depth=3, relation_types=["related_to", "supports"])
        assert graph.root.id == a and {n.id for n in graph.nodes} == {a, b}
        assert [(e.source_id, e.target_id) for e in graph.edges] == [(a, b)] and graph.depth == 3
        recalled = sdk.recall("genmaicha tea", include_relations=True, limit=1).memories
        assert recalled[0].relations is not None and recalled[0].relations[0].id == relation.id
        assert sdk.delete_relation(a, relation.id).deleted is True
        with pytest.raises(NotFoundError):
            sdk.delete_relation(a, relation.id)
        with pytest.raises(NotFoundError):
            sdk.list_relations(str(uuid.uuid4()))
