"""SQL for tags: metadata.tags of a wallet's live memories, counted."""

from __future__ import annotations

import asyncpg

from app.memory.sql import LIVE


async def tag_counts(
    conn: asyncpg.Connection,
    wallet: str,
    namespace: str | None,
    session_id: str | None,
    agent_id: str | None,
) -> list[asyncpg.Record]:
    """(tag, count) pairs, most used first, then by name; a memory counts once per tag."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""SELECT t.tag, count(DISTINCT m.id) AS count
            FROM memories m
            CROSS JOIN LATERAL jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(m.metadata -> 'tags') = 'array'
                     THEN m.metadata -> 'tags' ELSE '[]'::jsonb END) AS t(tag)
            WHERE m.user_id = $1 AND {LIVE}
              AND ($2::text IS NULL OR m.namespace = $2::text)
              AND ($3::text IS NULL OR m.session_id = $3::text)
              AND ($4::text IS NULL OR m.agent_id = $4::text)
            GROUP BY t.tag
            ORDER BY count(DISTINCT m.id) DESC, t.tag""",
        wallet, namespace, session_id, agent_id,
    )  # fmt: skip
    return rows
