"""A memory longer than the embedding model's window (MiniLM reads 256 tokens) is embedded in
overlapping windows, its passages (migration 0021), and recall scores its vector_sim as its best
window's (issue 37, point 2; opt-in, ENGRAM_RECALL_PASSAGES=1: it lowered BEAM dev R@10).
Checked against the default (the first window only) on the same memories: it brings in the memory whose tail answers the
question, and leaves a correct top result where it was; passages follow a memory's content
through an update, and `engram reembed` gives them to a memory stored without them."""

from __future__ import annotations

from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.ai.embedders import LocalMiniLMEmbedder
from app.memory.reembed import reembed_all
from tests.support.api import auth

PASSAGES = {"passages": True}

# A long diary entry: its first window is about a garden; past it, a few words about a sister.
GARDEN = " ".join(
    f"Day {i}: watered the tomatoes, pulled weeds between the beans, staked the peppers"
    f" and turned the compost heap behind the shed."
    for i in range(1, 31)
)
TAIL = "My sister Maya moved to Lisbon last spring and teaches violin at a music school there."
LONG = f"{GARDEN} {TAIL}"
SHORT = [
    "I run five kilometres every Saturday morning along the river.",
    "The office moved to the third floor of the new building in March.",
    "Our cat Pixel sleeps on the radiator all winter.",
    "I am reading a history of the Roman empire before bed.",
    "The car needs new winter tyres before November.",
]
QUESTION = "Which city is my sibling living in now?"


async def _store(client: AsyncTestClient, wallet: Any, contents: list[str]) -> list[str]:
    r = await client.post(
        "/v1/store/batch",
        headers=auth(wallet),
        json={"memories": [{"content": c} for c in contents]},
    )
    assert r.status_code == 201, r.text
    return [m["id"] for m in r.json()["memories"]]


async def _recall(client: AsyncTestClient, wallet: Any, query: str) -> list[dict[str, Any]]:
    r = await client.post("/v1/recall", headers=auth(wallet), json={"query": query, "limit": 10})
    assert r.status_code == 200, r.text
    memories: list[dict[str, Any]] = r.json()["memories"]
    return memories


def _vector(memories: list[dict[str, Any]], content: str) -> float:
    return float(next(m["_signals"]["vector"] for m in memories if m["content"] == content))


def _order(memories: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in memories]


async def _passages(database_url: str, wallet: Any) -> dict[str, int]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT m.content, count(p.seq) AS n FROM memories m LEFT JOIN memory_passages p"
            " ON p.user_id = m.user_id AND p.memory_id = m.id WHERE m.user_id = $1"
            " GROUP BY m.content",
            wallet.address.lower(),
        )
    finally:
        await conn.close()
    return {r["content"]: int(r["n"]) for r in rows}


async def test_the_tail_of_a_long_memory_is_recalled_by_its_best_window(
    make_app: Any, wallet: Any, database_url: str
) -> None:
    async with AsyncTestClient(app=make_app(recall=PASSAGES), timeout=60) as client:
        await _store(client, wallet, [LONG, *SHORT])
        now = await _recall(client, wallet, QUESTION)
    stored = await _passages(database_url, wallet)
    assert stored[LONG] >= 1 and all(stored[s] == 0 for s in SHORT)  # only past the window
    tails = await LocalMiniLMEmbedder().tails([LONG])
    assert TAIL in tails[0][-1]  # the last window holds the tail the first one cuts off
    async with AsyncTestClient(app=make_app(), timeout=60) as earlier:
        before = await _recall(earlier, wallet, QUESTION)
    assert _order(now)[0] == LONG
    assert _vector(now, LONG) > max(_vector(now, s) for s in _order(now)[1:])
    # its first window alone (the garden) is below the recall floor: not there at all
    assert LONG not in _order(before)


async def test_a_correct_top_result_stays_first(make_app: Any, wallet: Any) -> None:
    """Short memories that answer their question stay first beside a long memory's windows."""
    async with (
        AsyncTestClient(app=make_app(recall=PASSAGES), timeout=60) as client,
        AsyncTestClient(app=make_app(), timeout=60) as earlier,
    ):
        await _store(client, wallet, [LONG, *SHORT])
        for question, expected in (
            ("How far do I run on weekends?", SHORT[0]),
            ("Where does the cat sleep?", SHORT[2]),
            ("What did I do in the vegetable garden?", LONG),
        ):
            assert _order(await _recall(earlier, wallet, question))[0] == expected
            assert _order(await _recall(client, wallet, question))[0] == expected


async def test_passages_follow_an_update_and_reembed_fills_them(
    client: AsyncTestClient, make_app: Any, wallet: Any, database_url: str
) -> None:
    [windows] = await LocalMiniLMEmbedder().tails([LONG])
    async with AsyncTestClient(app=make_app(recall=PASSAGES), timeout=60) as on:
        [long_id, short_id] = await _store(on, wallet, [LONG, SHORT[0]])
        # a short content replaces the long one: its passages go; a long one replaces a short one
        for memory_id, content in ((long_id, SHORT[1]), (short_id, LONG)):
            r = await on.patch(
                f"/v1/memories/{memory_id}", headers=auth(wallet), json={"content": content}
            )
            assert r.status_code == 200, r.text
    assert (await _passages(database_url, wallet)) == {SHORT[1]: 0, LONG: len(windows)}
    # a memory stored before migration 0021 had none: `engram reembed` gives it its passages
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM memory_passages WHERE user_id = $1", wallet.address.lower())
        await register_vector(conn)
        await reembed_all(conn, LocalMiniLMEmbedder(), 50, passages=True)
    finally:
        await conn.close()
    assert (await _passages(database_url, wallet)) == {SHORT[1]: 0, LONG: len(windows)}
    # the default stores none, and a content changed under it drops the passages it had
    r = await client.patch(
        f"/v1/memories/{short_id}", headers=auth(wallet), json={"content": f"{LONG} Again."}
    )
    assert r.status_code == 200, r.text
    assert (await _passages(database_url, wallet)) == {SHORT[1]: 0, f"{LONG} Again.": 0}
