"""A recall's filters are answered by one index (migration 0007): wallet, namespace, type and
tags intersect in `memories_wallet_filters_gin`, so a tag shared by thousands of a wallet's
memories in other namespaces costs no heap reads. Before, the index knew wallet and tags only
and every row with the tag was read to test its namespace (9,361 heap blocks for 197 matches
in bench/scale.py's 1M-row data)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from eth_account import Account

from app.db.pool import create_pool
from app.memory.filters import MemoryFilter
from app.memory.sql import filter_sql

EACH, WANTED = 1500, 40


def _rows(wallet: str) -> list[tuple[object, ...]]:
    rng = np.random.default_rng(7)
    rows = []
    # the namespace alone matches 1,540 rows, the tag alone 1,540: only together are they 40
    kinds = [("team", "decision", ["shared"])] * WANTED
    kinds += [("team", "general", ["other"])] * EACH + [("notes", "general", ["shared"])] * EACH
    for i, (namespace, memory_type, tags) in enumerate(kinds):
        content = f"memory {i} of {namespace}"
        vector = rng.standard_normal(384).astype(np.float32)
        rows.append((
            wallet, namespace, memory_type, content, hashlib.sha256(content.encode()).digest(),
            vector / np.linalg.norm(vector), "test", {"tags": tags},
        ))  # fmt: skip
    return rows


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def test_namespace_type_and_tags_meet_in_the_index(database_url: str) -> None:
    wallet = Account.create().address.lower()
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.executemany(
                """INSERT INTO memories (user_id, namespace, memory_type, content, content_hash,
                                         embedding, embedding_model, metadata)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8)""",
                _rows(wallet),
            )
            await conn.execute("ANALYZE memories")
            f = MemoryFilter(
                wallet=wallet, namespace="team", memory_types=["decision"], tags=["shared"]
            )
            sql = filter_sql(f)
            async with conn.transaction():
                await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                plan = await conn.fetchval(
                    "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM memories m"
                    f" WHERE {sql.sql()}",
                    *sql.params,
                )
    finally:
        await pool.close()
    nodes = list(_nodes(plan[0]["Plan"]))
    index_conds = [n.get("Index Cond", "") for n in nodes]
    assert any("namespace" in c and "memory_type" in c and "tags" in c for c in index_conds), (
        index_conds
    )
    heap = [n for n in nodes if n["Node Type"] == "Bitmap Heap Scan"]
    assert heap and heap[0]["Actual Rows"] == WANTED
    # the rows of the namespace without the tag, or with the tag elsewhere, were never fetched to be filtered out
    assert heap[0].get("Rows Removed by Filter", 0) == 0
