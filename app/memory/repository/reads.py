"""Memory reads: by id (for update too) or by key, a page of a list, counts (capped too), keyword
search, namespaces and stats, a memory's nearest neighbours, and a wallet's memories with their
vectors (consolidation)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
import numpy as np

from app.memory.filters import LIST_SORTS, ListOrder, MemoryFilter
from app.memory.sql import COLUMNS, LIVE, filter_sql


async def holding_key(
    conn: asyncpg.Connection, wallet: str, namespace: str, key: str, for_update: bool = False
) -> asyncpg.Record | None:
    """The memory (not deleted; expired or not: it still holds its key) named `key`."""
    lock = " FOR UPDATE" if for_update else ""
    row: asyncpg.Record | None = await conn.fetchrow(
        f"""SELECT {COLUMNS} FROM memories m WHERE m.user_id = $1 AND m.namespace = $2
            AND m.key = $3 AND m.deleted_at IS NULL{lock}""",
        wallet, namespace, key,
    )  # fmt: skip
    return row


async def get_including_deleted(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID
) -> asyncpg.Record | None:
    """A wallet's memory even if soft-deleted (restore), locked; expired ones stay gone."""
    return await conn.fetchrow(
        f"""SELECT {COLUMNS} FROM memories m
            WHERE m.id = $1 AND m.user_id = $2 AND (m.expires_at IS NULL OR m.expires_at > now())
            FOR UPDATE""",
        memory_id, wallet,
    )  # fmt: skip


async def get_many(
    conn: asyncpg.Connection, wallet: str, ids: list[UUID], for_update: bool = False
) -> list[asyncpg.Record]:
    lock = " FOR UPDATE" if for_update else ""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {COLUMNS} FROM memories m WHERE m.id = ANY($1::uuid[]) AND m.user_id = $2"
        f" AND {LIVE}{lock}",
        ids, wallet,
    )  # fmt: skip
    return rows


async def list_page(
    conn: asyncpg.Connection, f: MemoryFilter, limit: int, offset: int, order: ListOrder
) -> tuple[list[asyncpg.Record], int]:
    """One page of the memories `f` matches, and how many it matches in all: one statement (a
    page past the end still carries the total, on a row of NULLs that is not returned)."""
    sql = filter_sql(f)
    where = sql.sql()
    found = await conn.fetch(
        f"""SELECT page.*, total.n AS total
            FROM (SELECT count(*) AS n FROM memories m WHERE {where}) total
            LEFT JOIN LATERAL (
                SELECT {COLUMNS} FROM memories m WHERE {where}
                ORDER BY {_order_by(order)}
                LIMIT {sql.param(limit)} OFFSET {sql.param(offset)}
            ) page ON true""",
        *sql.params,
    )
    rows = [r for r in found if r["id"] is not None]
    return rows, int(found[0]["total"])


async def count(conn: asyncpg.Connection, f: MemoryFilter) -> int:
    sql = filter_sql(f)
    return int(
        await conn.fetchval(f"SELECT count(*) FROM memories m WHERE {sql.sql()}", *sql.params)
    )


async def keyword_search(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    query: str,
    limit: int,
    order: ListOrder | None = None,
) -> tuple[list[asyncpg.Record], int]:
    """Full-text match (web-search syntax), or a literal substring for identifiers and codes;
    best match first, or in `order` when one is asked for."""
    sql = filter_sql(f)
    q = sql.param(query)
    pattern = sql.param("%" + _escape_like(query) + "%")
    sql.where(f"(m.tsv @@ websearch_to_tsquery('english', {q}) OR m.content ILIKE {pattern})")
    where = sql.sql()
    total = await conn.fetchval(f"SELECT count(*) FROM memories m WHERE {where}", *sql.params)
    ranked = f"ts_rank_cd(m.tsv, websearch_to_tsquery('english', {q}), 32) DESC, m.created_at DESC"
    rows = await conn.fetch(
        f"""SELECT {COLUMNS} FROM memories m WHERE {where}
            ORDER BY {_order_by(order) if order else ranked}
            LIMIT {sql.param(limit)}""",
        *sql.params,
    )
    return rows, int(total)


def _order_by(order: ListOrder) -> str:
    if order.sort not in LIST_SORTS:
        raise ValueError(f"not a list order: {order.sort}")
    direction = "DESC" if order.descending else "ASC"
    return f"m.{order.sort} {direction}, m.id {direction}"


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def count_up_to(conn: asyncpg.Connection, f: MemoryFilter, cap: int) -> int:
    """How many memories match `f`, counting no further than `cap` (cheap for big wallets)."""
    sql = filter_sql(f)
    return int(
        await conn.fetchval(
            f"""SELECT count(*) FROM (
                    SELECT 1 FROM memories m WHERE {sql.sql()} LIMIT {sql.param(cap)}
                ) matching""",
            *sql.params,
        )
    )


async def neighbours(
    conn: asyncpg.Connection,
    wallet: str,
    namespace: str,
    embedding: np.ndarray,
    exclude: list[UUID],
    limit: int,
    min_similarity: float,
) -> list[asyncpg.Record]:
    """A wallet's memories closest to `embedding` in a namespace, at or above a similarity."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""SELECT id, similarity FROM (
                SELECT m.id, 1 - (m.embedding <=> $3) AS similarity FROM memories m
                WHERE m.user_id = $1 AND m.namespace = $2 AND {LIVE}
                  AND m.id <> ALL($4::uuid[])
                ORDER BY m.embedding <=> $3 LIMIT $5
            ) near WHERE similarity >= $6""",
        wallet, namespace, embedding, exclude, limit, min_similarity,
    )  # fmt: skip
    return rows


async def embeddings_of_wallet(
    conn: asyncpg.Connection, wallet: str, namespace: str | None, agent_id: str | None = None
) -> list[asyncpg.Record]:
    """Every live memory of a wallet (or one namespace, or one agent's) with its embedding,
    for consolidation."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""SELECT m.id, m.namespace, m.content, m.embedding, m.importance, m.pinned, m.immutable,
                   m.metadata, m.access_count, m.created_at, m.memory_type
            FROM memories m
            WHERE m.user_id = $1 AND ($2::text IS NULL OR m.namespace = $2)
              AND ($3::text IS NULL OR m.agent_id = $3) AND {LIVE}
            ORDER BY m.namespace, m.created_at""",
        wallet, namespace, agent_id,
    )  # fmt: skip
    return rows


async def namespaces(conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""SELECT m.namespace AS name, count(*) AS count, max(m.created_at) AS last_memory_at
            FROM memories m WHERE m.user_id = $1 AND {LIVE}
            GROUP BY m.namespace ORDER BY count(*) DESC, m.namespace""",
        wallet,
    )
    return rows


async def namespace_names(conn: asyncpg.Connection, wallet: str) -> list[str]:
    """The names of the wallet's namespaces with a live memory, in order: a skip scan (one index
    probe per namespace on memories_live_by_wallet), not a pass over every memory as
    namespaces() makes to count them (a 100,000-memory wallet: ~1 ms against ~250 ms)."""
    rows = await conn.fetch(
        f"""WITH RECURSIVE names AS (
                (SELECT m.namespace FROM memories m WHERE m.user_id = $1 AND {LIVE}
                 ORDER BY m.namespace LIMIT 1)
                UNION ALL
                SELECT (SELECT m.namespace FROM memories m
                        WHERE m.user_id = $1 AND {LIVE} AND m.namespace > names.namespace
                        ORDER BY m.namespace LIMIT 1)
                FROM names WHERE names.namespace IS NOT NULL
            )
            SELECT namespace FROM names WHERE namespace IS NOT NULL""",
        wallet,
    )
    return [r["namespace"] for r in rows]


async def stats(conn: asyncpg.Connection, wallet: str) -> dict[str, Any]:
    totals = await conn.fetchrow(
        f"""SELECT count(*) AS total_memories,
                   count(*) FILTER (WHERE m.pinned) AS pinned_count,
                   count(*) FILTER (WHERE m.access_count = 0) AS never_accessed,
                   coalesce(sum(m.access_count), 0) AS total_accesses,
                   coalesce(avg(m.importance), 0) AS avg_importance,
                   min(m.created_at) AS oldest_memory, max(m.created_at) AS newest_memory
            FROM memories m WHERE m.user_id = $1 AND {LIVE}""",
        wallet,
    )
    by_type = await conn.fetch(
        f"""SELECT m.memory_type, count(*) AS count FROM memories m
            WHERE m.user_id = $1 AND {LIVE} GROUP BY m.memory_type ORDER BY count(*) DESC""",
        wallet,
    )
    by_namespace = await conn.fetch(
        f"""SELECT m.namespace, count(*) AS count FROM memories m
            WHERE m.user_id = $1 AND {LIVE} GROUP BY m.namespace ORDER BY count(*) DESC""",
        wallet,
    )
    return {"totals": totals, "by_type": by_type, "by_namespace": by_namespace}
