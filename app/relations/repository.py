"""All SQL for relations between memories and the walk over them. Both ends always belong to the
same wallet (the foreign keys on (user_id, source_id) and (user_id, target_id) say so too).

A relation is visible only while both of its memories are live (not soft-deleted, not expired):
deleting a memory hides its relations from every read here, and undeleting would bring them back.
Every join on memories names the wallet, so the hash partition of `memories` is pruned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import asyncpg

from app.memory.sql import LIVE

RETURNED = "r.id, r.source_id, r.target_id, r.relation_type, r.metadata, r.created_at"


async def create_many(
    conn: asyncpg.Connection,
    wallet: str,
    links: Sequence[tuple[UUID, UUID]],
    relation_type: str,
) -> int:
    """Create (source, target) relations of one type; existing ones are left alone.

    Returns how many were new. Self-links and links to another wallet's memories are skipped.
    (Ingest's auto_relate and consolidation write through here.)
    """
    if not links:
        return 0
    created = await conn.fetchval(
        """
        WITH wanted AS (
            SELECT * FROM unnest($2::uuid[], $3::uuid[]) AS w(source_id, target_id)
        ), inserted AS (
            INSERT INTO memory_relations (user_id, source_id, target_id, relation_type)
            SELECT $1, w.source_id, w.target_id, $4
            FROM wanted w
            JOIN memories s ON s.id = w.source_id AND s.user_id = $1
            JOIN memories t ON t.id = w.target_id AND t.user_id = $1
            WHERE w.source_id <> w.target_id
            ON CONFLICT (user_id, source_id, target_id, relation_type) DO NOTHING
            RETURNING 1
        )
        SELECT count(*) FROM inserted
        """,
        wallet,
        [s for s, _ in links],
        [t for _, t in links],
        relation_type,
    )
    return int(created or 0)


async def insert(
    conn: asyncpg.Connection,
    wallet: str,
    source_id: UUID,
    target_id: UUID,
    relation_type: str,
    metadata: dict[str, Any],
) -> asyncpg.Record | None:
    """The new relation, or None when (source, target, type) exists already.

    ON CONFLICT DO NOTHING waits for a concurrent insert of the same triple to commit or roll
    back, so of N identical concurrent creates exactly one gets a row: never a duplicate.
    """
    row: asyncpg.Record | None = await conn.fetchrow(
        f"""INSERT INTO memory_relations AS r
                (user_id, source_id, target_id, relation_type, metadata)
            VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT (user_id, source_id, target_id, relation_type) DO NOTHING
            RETURNING {RETURNED}""",
        wallet, source_id, target_id, relation_type, metadata,
    )  # fmt: skip
    return row


async def find(
    conn: asyncpg.Connection, wallet: str, source_id: UUID, target_id: UUID, relation_type: str
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        f"""SELECT {RETURNED} FROM memory_relations r
            WHERE r.user_id = $1 AND r.source_id = $2 AND r.target_id = $3
              AND r.relation_type = $4""",
        wallet, source_id, target_id, relation_type,
    )  # fmt: skip
    return row


async def linked(
    conn: asyncpg.Connection,
    wallet: str,
    memory_ids: Sequence[UUID],
    kept_to: str | None = None,
) -> list[asyncpg.Record]:
    """The visible relations of each of `memory_ids`, both directions, in one query; with
    `kept_to`, only those whose other end is in that namespace (what a grantee or an agent key
    kept to it may see).

    Each row names the memory it was found from (`anchor_id`), its `direction` from there, and
    the memory at the other end (`other_id`, content, importance, memory_type, namespace).
    Two index scans (by source, by target) rather than one OR, which neither index serves.
    """
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""
        SELECT x.anchor_id, x.id, x.relation_type, x.direction, x.metadata, x.created_at,
               m.id AS other_id, m.content, m.importance, m.memory_type, m.namespace
        FROM (
            SELECT r.source_id AS anchor_id, r.target_id AS other_id, 'outgoing' AS direction,
                   r.id, r.relation_type, r.metadata, r.created_at
            FROM memory_relations r WHERE r.user_id = $1 AND r.source_id = ANY($2::uuid[])
            UNION ALL
            SELECT r.target_id, r.source_id, 'incoming',
                   r.id, r.relation_type, r.metadata, r.created_at
            FROM memory_relations r WHERE r.user_id = $1 AND r.target_id = ANY($2::uuid[])
        ) x
        JOIN memories m ON m.user_id = $1 AND m.id = x.other_id
        WHERE {LIVE} AND ($3::text IS NULL OR m.namespace = $3)
        ORDER BY x.anchor_id, x.created_at, x.id
        """,
        wallet, list(memory_ids), kept_to,
    )  # fmt: skip
    return rows


async def delete(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID, relation_id: UUID
) -> UUID | None:
    """Delete a visible relation of `memory_id` (either direction); None if there is none."""
    deleted: UUID | None = await conn.fetchval(
        f"""DELETE FROM memory_relations r USING memories m
            WHERE r.user_id = $1 AND r.id = $3 AND (r.source_id = $2 OR r.target_id = $2)
              AND m.user_id = $1
              AND m.id = CASE WHEN r.source_id = $2 THEN r.target_id ELSE r.source_id END
              AND {LIVE}
            RETURNING r.id""",
        wallet, memory_id, relation_id,
    )  # fmt: skip
    return deleted


# The breadth-first walk, one row per level. Each level carries the whole frontier and the set of
# memories seen so far as arrays, so a memory reached twice (cycles, both directions, diamonds) is
# expanded once: the work is bounded by the relations of the returned nodes, not by the number of
# paths (a per-node recursion revisits nodes at every depth and grows with degree^depth). The
# last level is cut so that the total never exceeds the limit, keeping the most important of
# that level. Neighbours are found by the (user_id, source_id) and (user_id, target_id) indexes.
_WALK = f"""
WITH RECURSIVE walk(depth, frontier, seen) AS (
    SELECT 0, ARRAY[m.id], ARRAY[m.id]
    FROM memories m WHERE m.user_id = $1 AND m.id = $2 AND {LIVE}
  UNION ALL
    SELECT w.depth + 1, step.found, w.seen || step.found
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT coalesce(
                   (array_agg(m.id ORDER BY m.importance DESC, m.id))[1:$4 - cardinality(w.seen)],
                   '{{}}'::uuid[]
               ) AS found
        FROM memories m
        WHERE m.user_id = $1 AND {LIVE} AND m.id <> ALL(w.seen)
          AND m.id = ANY(ARRAY(
              SELECT r.target_id FROM memory_relations r
              WHERE r.user_id = $1 AND r.source_id = ANY(w.frontier)
                AND ($5::text[] IS NULL OR r.relation_type = ANY($5::text[]))
              UNION
              SELECT r.source_id FROM memory_relations r
              WHERE r.user_id = $1 AND r.target_id = ANY(w.frontier)
                AND ($5::text[] IS NULL OR r.relation_type = ANY($5::text[]))
          ))
    ) step
    WHERE w.depth < $3 AND cardinality(w.frontier) > 0 AND cardinality(w.seen) < $4
)
SELECT w.depth, m.id, m.content, m.importance, m.memory_type, m.namespace
FROM walk w
CROSS JOIN LATERAL unnest(w.frontier) WITH ORDINALITY AS f(id, position)
JOIN memories m ON m.user_id = $1 AND m.id = f.id
ORDER BY w.depth, f.position
"""


async def walk(
    conn: asyncpg.Connection,
    wallet: str,
    root_id: UUID,
    depth: int,
    limit: int,
    relation_types: Sequence[str] | None,
) -> list[asyncpg.Record]:
    """The live memories within `depth` relations of the root (either direction), root first,
    then by depth, at most `limit` of them; empty if the root is not a live memory of the wallet.
    """
    types = list(relation_types) if relation_types is not None else None
    rows: list[asyncpg.Record] = await conn.fetch(_WALK, wallet, root_id, depth, limit, types)
    return rows


async def edges_between(
    conn: asyncpg.Connection,
    wallet: str,
    memory_ids: Sequence[UUID],
    relation_types: Sequence[str] | None,
) -> list[asyncpg.Record]:
    """The relations (of the given types) whose two ends are both among `memory_ids`."""
    types = list(relation_types) if relation_types is not None else None
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT r.id, r.source_id, r.target_id, r.relation_type FROM memory_relations r
           WHERE r.user_id = $1 AND r.source_id = ANY($2::uuid[])
             AND r.target_id = ANY($2::uuid[])
             AND ($3::text[] IS NULL OR r.relation_type = ANY($3::text[]))
           ORDER BY r.created_at, r.id""",
        wallet, list(memory_ids), types,
    )  # fmt: skip
    return rows
