"""Dedup on store: each item of a store is merged into a duplicate (the same content in its
namespace, or the closest memory there at cosine >= DEDUP_SIMILARITY) among the wallet's memories
and the batch's earlier new items, or inserted (docs/api-contract.md, "Dedup on store").
`_BatchPlan` decides which; `store_deduplicated` looks the duplicates up and writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np

from app.ai.embedders import Embedder
from app.core.errors import InvalidInput
from app.memory.fields import ContentKey, MemoryFields
from app.memory.filters import MemoryFilter
from app.memory.repository import dedup as repo
from app.memory.repository import writes
from app.memory.schemas import MAX_TAGS, check_metadata
from app.memory.settled import content_digest, insert_settled, new_memory
from app.memory.sizes import RecentSizes

# Store merges a new memory into an existing one of the same wallet and namespace at or above
# this cosine similarity (MemoClaw's seed architecture figure; docs/api-contract.md,
# "Dedup on store").
DEDUP_SIMILARITY = 0.95
# A store's near-duplicate lookup: up to this many stored memories, a scan of them beats a
# graph walk for one item (100 single walks against 500 rows: ~30 ms either way, measured).
DEDUP_SCAN_MAX_ROWS = 500
# Several items measure the wallet's rows read once (repository `nearest_each`), which beats a
# walk per item further: 100 items against 2,000 rows 68-87 ms read once, 658-693 ms walked;
# against 5,000 rows the walks win, 64 ms to 295 (measured in one wallet, its own partition).
DEDUP_BATCH_SCAN_MAX_ROWS = 2000


@dataclass
class StoreOutcome:
    row: asyncpg.Record
    deduplicated: bool
    before: asyncpg.Record | None = None  # a dedup: the memory merged into, as it was (history)


def merge_tags(*tag_lists: list[str] | None) -> list[str]:
    merged: list[str] = []
    for tags in tag_lists:
        for tag in tags or []:
            if tag not in merged:
                merged.append(tag)
    return merged


def merged_metadata(existing: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """Incoming keys win, tags are unioned; if the union breaks a limit, only tags are merged."""
    tags = merge_tags(existing.get("tags"), incoming.get("tags"))[:MAX_TAGS]
    merged = {**existing, **incoming}
    if tags:
        merged["tags"] = tags
    try:
        check_metadata(merged)
    except InvalidInput:
        merged = {**existing, **({"tags": tags} if tags else {})}
    return merged


@dataclass
class _BatchPlan:
    """What each item of a store becomes: new (`targets[i] is None`), or merged into a stored
    memory (its record) or into an earlier new item of the batch (its index)."""

    items: list[MemoryFields]
    vectors: list[np.ndarray]
    keys: list[ContentKey]
    fresh: list[int] = field(default_factory=list)
    targets: list[asyncpg.Record | int | None] = field(default_factory=list)
    _first_new: dict[ContentKey, int] = field(default_factory=dict)

    def decide(
        self,
        i: int,
        stored_same: asyncpg.Record | None,
        stored_near: tuple[asyncpg.Record, float] | None,
    ) -> None:
        target = self._duplicate_of(i, stored_same, stored_near)
        if target is None:
            self._first_new.setdefault(self.keys[i], i)
            self.fresh.append(i)
        self.targets.append(target)

    def _duplicate_of(
        self,
        i: int,
        stored_same: asyncpg.Record | None,
        stored_near: tuple[asyncpg.Record, float] | None,
    ) -> asyncpg.Record | int | None:
        if stored_same is not None:
            return stored_same
        if self.keys[i] in self._first_new:
            return self._first_new[self.keys[i]]
        # the nearest among stored memories and the batch's earlier new items (what a one-by-one
        # store would compare against), if it is close enough
        near: list[tuple[float, asyncpg.Record | int]] = []
        if stored_near is not None:
            near.append((stored_near[1], stored_near[0]))
        namespace = self.items[i].namespace
        near.extend(
            (float(np.dot(self.vectors[i], self.vectors[j])), j)
            for j in self.fresh
            if self.items[j].namespace == namespace
        )
        similarity, target = max(near, key=lambda c: c[0], default=(0.0, None))
        return target if similarity >= DEDUP_SIMILARITY else None


async def store_deduplicated(
    conn: asyncpg.Connection,
    wallet: str,
    items: list[MemoryFields],
    vectors: list[np.ndarray],
    near_dedup: bool,
    *,
    sizes: RecentSizes,
    embedding_model: str,
    passage_embedder: Embedder | None,
) -> list[StoreOutcome]:
    """Store `items` as if one by one, in order, in a fixed number of statements.

    Each item merges into a duplicate (the same content in its namespace, else with
    `near_dedup` the closest memory there at cosine >= DEDUP_SIMILARITY) among the wallet's
    memories and the batch's earlier new items, or is inserted. Lookups run once for the
    whole batch against the stored memories; the batch's own items are compared here.
    Statements: lock, exact lookup, count and nearest lookup, one insert, one per merge.
    """
    keys = [(p.namespace, content_digest(p.content)) for p in items]
    await repo.lock_contents(conn, wallet, keys)
    stored_same = await repo.find_same_contents(conn, wallet, keys)
    stored_near: list[tuple[asyncpg.Record, float] | None] = [None] * len(items)
    if near_dedup:
        scan_max = DEDUP_SCAN_MAX_ROWS if len(items) == 1 else DEDUP_BATCH_SCAN_MAX_ROWS
        stored = await sizes.count_up_to(conn, MemoryFilter(wallet), scan_max)
        stored_near = await repo.nearest_each(
            conn, wallet, [p.namespace for p in items], vectors, exact=stored <= scan_max
        )
    plan = _BatchPlan(items, vectors, keys)
    for i in range(len(items)):
        plan.decide(i, stored_same.get(keys[i]), stored_near[i])
    fresh = [new_memory(wallet, items[i], vectors[i], embedding_model) for i in plan.fresh]
    inserted = dict(
        zip(
            plan.fresh,
            await insert_settled(conn, wallet, fresh, passage_embedder),
            strict=True,
        )
    )
    latest: dict[UUID, asyncpg.Record] = {}  # each memory as this batch last left it
    outcomes = []
    for i, target in enumerate(plan.targets):
        if target is None:
            outcomes.append(StoreOutcome(inserted[i], deduplicated=False))
            continue
        existing = inserted[target] if isinstance(target, int) else target
        before = latest.get(existing["id"], existing)
        merged = await _merge(conn, before, items[i])
        latest[merged["id"]] = merged
        outcomes.append(StoreOutcome(merged, deduplicated=True, before=before))
    return outcomes


async def _merge(
    conn: asyncpg.Connection, existing: asyncpg.Record, p: MemoryFields
) -> asyncpg.Record:
    if existing["immutable"]:
        return existing  # an immutable memory is never changed, not even by a merge
    return await writes.merge_duplicate(
        conn,
        existing["user_id"],
        existing["id"],
        existing["importance"] if p.importance is None else p.importance,
        merged_metadata(existing["metadata"] or {}, p.metadata),
        p.pinned,
    )
