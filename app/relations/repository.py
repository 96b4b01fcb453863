"""SQL for relations between memories (the full relations API arrives later; ingest and
consolidate write them now). Both ends always belong to the same wallet."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg

RELATION_TYPES = ("related_to", "supersedes", "contradicts", "derived_from", "supports")


async def create_many(
    conn: asyncpg.Connection,
    wallet: str,
    links: Sequence[tuple[UUID, UUID]],
    relation_type: str,
) -> int:
    """Create (source, target) relations of one type; existing ones are left alone.

    Returns how many were new. Self-links and links to another wallet's memories are skipped.
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
            ON CONFLICT (source_id, target_id, relation_type) DO NOTHING
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
