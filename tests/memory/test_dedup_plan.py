"""Store's dedup: `_BatchPlan` decides what each item of a batch becomes (new, or merged into a
stored memory or an earlier item of the batch), `merged_metadata` what a merge leaves in the
metadata; then both against real rows, through `MemoryService.store_batch` on the session's
PostgreSQL, with vectors the test chooses."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import numpy as np
import pytest
from eth_account import Account

from app.ai.embedders import EmbedResult
from app.config import LOCAL_EMBED_DIMS
from app.db.pool import asyncpg_dsn, create_pool
from app.memory.dedup import DEDUP_SIMILARITY, _BatchPlan, merged_metadata
from app.memory.fields import MemoryFields
from app.memory.schemas import MAX_METADATA_KEYS, MAX_TAGS, StoreIn
from app.memory.service import MemoryService
from app.memory.settled import content_digest

# Stand-ins for the stored memories the repository's lookups return: the plan only passes them on.
STORED: Any = object()
OTHER_STORED: Any = object()


def at(degrees: float, dims: int = 3) -> np.ndarray:
    """A unit vector in the plane of the first two axes: two of them have the cosine of the angle
    between them (float64, so a cosine can sit exactly on DEDUP_SIMILARITY)."""
    vector = np.zeros(dims)
    vector[0], vector[1] = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return vector


def at_cosine(cosine: float) -> np.ndarray:
    return np.array([cosine, math.sqrt(1 - cosine * cosine), 0.0])


def fields(content: str, namespace: str = "default") -> MemoryFields:
    return MemoryFields(
        content=content, metadata={}, importance=None, namespace=namespace,
        memory_type="general", session_id=None, agent_id=None, expires_at=None, pinned=False,
        immutable=False,
    )  # fmt: skip


def plan(
    items: Sequence[tuple[MemoryFields, np.ndarray]],
    same: dict[int, Any] | None = None,
    near: dict[int, tuple[Any, float]] | None = None,
) -> _BatchPlan:
    """The plan for `items` (fields, vector), given what the lookups found among stored memories
    for item i: `same` (the same content in its namespace), `near` (the closest and its cosine)."""
    keys = [(f.namespace, content_digest(f.content)) for f, _ in items]
    batch = _BatchPlan([f for f, _ in items], [v for _, v in items], keys)
    for i in range(len(items)):
        batch.decide(i, (same or {}).get(i), (near or {}).get(i))
    return batch


# ---- _BatchPlan: duplicates within a batch ----------------------------------------------------


def test_unrelated_items_are_all_new() -> None:
    batch = plan([(fields("a"), at(0)), (fields("b"), at(90)), (fields("c"), at(45))])
    assert batch.fresh == [0, 1, 2]
    assert batch.targets == [None, None, None]


def test_the_same_content_again_merges_into_its_first_new_item() -> None:
    batch = plan([(fields("a"), at(0)), (fields("b"), at(90)), (fields("a"), at(0)),
                  (fields("a"), at(0))])  # fmt: skip
    assert batch.fresh == [0, 1]
    assert batch.targets == [None, None, 0, 0]


def test_the_same_content_in_another_namespace_is_new() -> None:
    batch = plan([(fields("a"), at(0)), (fields("a", "work"), at(0))])
    assert batch.fresh == [0, 1]
    assert batch.targets == [None, None]


def test_a_near_duplicate_merges_at_the_threshold_and_not_below() -> None:
    below = np.nextafter(DEDUP_SIMILARITY, 0)
    batch = plan([(fields("a"), at(0)), (fields("b"), at_cosine(DEDUP_SIMILARITY)),
                  (fields("c"), at_cosine(below))])  # fmt: skip
    assert batch.targets == [None, 0, None]
    assert batch.fresh == [0, 2]


def test_a_near_duplicate_in_another_namespace_is_new() -> None:
    batch = plan([(fields("a"), at(0)), (fields("b", "work"), at(5))])
    assert batch.targets == [None, None]


def test_the_nearest_earlier_item_is_the_one_merged_into() -> None:
    # 0° and 26° are apart (cosine 0.899); 15° is near both, nearer the second
    batch = plan([(fields("a"), at(0)), (fields("b"), at(26)), (fields("c"), at(15))])
    assert batch.targets == [None, None, 1]


def test_an_item_merged_away_is_no_candidate_for_later_items() -> None:
    # as one store after another: "b" merges into "a", so "c" (near "b", not near "a") meets only
    # "a" among the memories by then, and is new
    batch = plan([(fields("a"), at(0)), (fields("b"), at(15)), (fields("c"), at(30))])
    assert batch.targets == [None, 0, None]
    assert batch.fresh == [0, 2]


# ---- _BatchPlan: duplicates of stored memories ------------------------------------------------


def test_stored_same_content_wins_over_everything() -> None:
    # even over an earlier new item of the batch nearer in vector space
    batch = plan([(fields("a"), at(0)), (fields("b"), at(1))], same={1: STORED},
                 near={1: (OTHER_STORED, 0.99)})  # fmt: skip
    assert batch.targets == [None, STORED]
    assert batch.fresh == [0]


def test_items_merged_into_a_stored_memory_stay_merged_into_it() -> None:
    # the same content twice, both found stored: neither becomes new, and the second is not
    # taken for a duplicate of the first
    batch = plan([(fields("a"), at(0)), (fields("a"), at(0))], same={0: STORED, 1: STORED})
    assert batch.targets == [STORED, STORED]
    assert batch.fresh == []
    near = plan([(fields("a"), at(0)), (fields("a"), at(0))],
                near={0: (STORED, 0.97), 1: (STORED, 0.97)})  # fmt: skip
    assert near.targets == [STORED, STORED]


def test_a_stored_near_duplicate_merges_at_the_threshold_and_not_below() -> None:
    assert plan([(fields("a"), at(0))], near={0: (STORED, DEDUP_SIMILARITY)}).targets == [STORED]
    below = np.nextafter(DEDUP_SIMILARITY, 0)
    assert plan([(fields("a"), at(0))], near={0: (STORED, below)}).targets == [None]


def test_the_nearer_of_the_stored_memory_and_the_batch_item_wins() -> None:
    # "b" is at cosine 0.985 (10°) from the batch's "a"
    nearer_in_batch = plan([(fields("a"), at(0)), (fields("b"), at(10))],
                           near={1: (STORED, 0.97)})  # fmt: skip
    assert nearer_in_batch.targets == [None, 0]
    nearer_stored = plan([(fields("a"), at(0)), (fields("b"), at(10))],
                         near={1: (STORED, 0.99)})  # fmt: skip
    assert nearer_stored.targets == [None, STORED]


# ---- merged_metadata --------------------------------------------------------------------------


def test_incoming_keys_win_and_the_others_stay() -> None:
    existing, incoming = {"a": 1, "b": 2}, {"b": 3, "c": {"d": 4}}
    assert merged_metadata(existing, incoming) == {"a": 1, "b": 3, "c": {"d": 4}}
    assert existing == {"a": 1, "b": 2} and incoming == {"b": 3, "c": {"d": 4}}  # not mutated


def test_tags_are_unioned_in_order_without_repeats() -> None:
    merged = merged_metadata({"tags": ["health", "food"]}, {"tags": ["food", "diet"]})
    assert merged == {"tags": ["health", "food", "diet"]}
    assert merged_metadata({"tags": ["health"], "k": 1}, {"k": 2}) == {"tags": ["health"], "k": 2}
    assert merged_metadata({"k": 1}, {"tags": ["diet"]}) == {"k": 1, "tags": ["diet"]}
    assert "tags" not in merged_metadata({"a": 1}, {"b": 2})


def test_the_tag_union_is_cut_at_the_limit() -> None:
    existing = [f"old-{i}" for i in range(MAX_TAGS - 2)]
    incoming = [f"new-{i}" for i in range(5)]
    merged = merged_metadata({"tags": existing}, {"tags": incoming})
    assert merged["tags"] == (existing + incoming)[:MAX_TAGS]


def test_a_union_past_a_limit_merges_only_the_tags() -> None:
    half = MAX_METADATA_KEYS // 2 + 1  # two halves together: one key too many
    existing = {"tags": ["a"], **{f"old{i}": i for i in range(half)}}
    incoming = {"tags": ["b"], "old0": "changed", **{f"new{i}": i for i in range(half)}}
    assert merged_metadata(existing, incoming) == {**existing, "tags": ["a", "b"]}
    huge = {"note": "x" * 5000}  # past the metadata's byte limit on its own
    assert merged_metadata({"k": 1, "tags": ["a"]}, huge) == {"k": 1, "tags": ["a"]}
    assert merged_metadata({"k": 1}, huge) == {"k": 1}


# ---- against real rows: MemoryService.store_batch -----------------------------------------------


class ChosenVectors:
    """An embedder whose vector for each text the test chose (at an angle in one plane)."""

    model_name = "test-chosen-vectors"
    dims = LOCAL_EMBED_DIMS

    def __init__(self, angles: dict[str, float]) -> None:
        self.angles = angles

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        vectors = [at(self.angles[t], self.dims).astype(np.float32) for t in texts]
        return EmbedResult(vectors=vectors, tokens=0)


ANGLES = {"Alice is allergic to peanuts": 0, "Alice cannot eat peanuts": 10,
          "The office is in Porto": 60, "Deploys happen on Tuesdays": 120}  # fmt: skip


@pytest.fixture(scope="module")
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(asyncpg_dsn(database_url), 1, 2)
    yield pool
    await pool.close()


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A connection in a transaction rolled back after the test: it leaves nothing behind."""
    async with pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            yield conn
        finally:
            await transaction.rollback()


async def _store(conn: asyncpg.Connection, wallet: str, *items: StoreIn) -> list[tuple[str, bool]]:
    """(memory id, deduplicated) for each item stored as one batch."""
    outcomes, _ = await MemoryService(ChosenVectors(ANGLES)).store_batch(conn, wallet, list(items))
    return [(str(o.row["id"]), o.deduplicated) for o in outcomes]


async def _rows(conn: asyncpg.Connection, wallet: str) -> dict[str, asyncpg.Record]:
    rows = await conn.fetch(
        "SELECT id, content, namespace, metadata, importance, pinned FROM memories"
        " WHERE user_id = $1",
        wallet,
    )
    return {str(r["id"]): r for r in rows}


async def test_a_batch_against_stored_rows(conn: asyncpg.Connection) -> None:
    wallet = Account.create().address.lower()
    [(alice, _)] = await _store(conn, wallet, StoreIn(content="Alice is allergic to peanuts"))
    outcomes = await _store(
        conn, wallet,
        StoreIn(content="Alice is allergic to peanuts"),  # the same content: merged
        StoreIn(content="Alice cannot eat peanuts"),  # 10° from it, cosine 0.985: merged
        StoreIn(content="The office is in Porto"),  # far from everything: new
        StoreIn(content="The office is in Porto"),  # the batch's own new item again: merged
        StoreIn(content="Alice is allergic to peanuts", namespace="work"),  # another namespace
    )  # fmt: skip
    porto, work = outcomes[2][0], outcomes[4][0]
    assert outcomes == [(alice, True), (alice, True), (porto, False), (porto, True), (work, False)]
    rows = await _rows(conn, wallet)
    assert set(rows) == {alice, porto, work}
    assert rows[work]["namespace"] == "work"


async def test_merges_in_one_batch_build_on_each_other(conn: asyncpg.Connection) -> None:
    wallet = Account.create().address.lower()
    [(alice, _)] = await _store(conn, wallet, StoreIn(
        content="Alice is allergic to peanuts", metadata={"source": "chat", "k": 1},
        tags=["health"], importance=0.6))  # fmt: skip
    outcomes = await _store(
        conn, wallet,
        StoreIn(content="Alice is allergic to peanuts", metadata={"k": 2}, tags=["food"],
                importance=0.9),
        StoreIn(content="Alice cannot eat peanuts", tags=["diet", "health"], importance=0.3,
                pinned=True),
    )  # fmt: skip
    assert outcomes == [(alice, True), (alice, True)]
    row = (await _rows(conn, wallet))[alice]
    # the second merge starts from what the first left: its tags, its importance
    assert row["metadata"] == {"source": "chat", "k": 2, "tags": ["health", "food", "diet"]}
    assert row["importance"] == 0.9  # a merge never lowers importance
    assert row["pinned"] is True  # and pins stick
    assert row["content"] == "Alice is allergic to peanuts"  # the memory keeps its own words


async def test_an_immutable_stored_memory_absorbs_duplicates_unchanged(
    conn: asyncpg.Connection,
) -> None:
    wallet = Account.create().address.lower()
    [(alice, _)] = await _store(conn, wallet, StoreIn(
        content="Alice is allergic to peanuts", tags=["health"], immutable=True))  # fmt: skip
    before = (await _rows(conn, wallet))[alice]
    outcomes = await _store(conn, wallet, StoreIn(
        content="Alice cannot eat peanuts", tags=["food"], importance=1.0))  # fmt: skip
    assert outcomes == [(alice, True)]
    assert await _rows(conn, wallet) == {alice: before}
