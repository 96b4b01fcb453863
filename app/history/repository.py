"""All SQL for memory history: one set-based insert for any number of changes, and the read.

History rows reference memories by (user_id, id), so a row can only name the wallet's own memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import asyncpg

# A memory's history in the order it happened. Rows written by one statement share a transaction
# but not a clock reading; for the rare memory named twice in one statement (a batch that stores
# the same fact twice: create, then the merge), its later rows are pushed a microsecond apart so
# the order is the order given, whatever the clock's resolution.
_INSERT = """
INSERT INTO memory_history (user_id, memory_id, action, changes, actor, created_at)
SELECT $1, e.memory_id, e.action, e.changes, $5,
       clock_timestamp()
       + (row_number() OVER (PARTITION BY e.memory_id ORDER BY e.n) - 1) * interval '1 microsecond'
FROM unnest($2::uuid[], $3::text[], $4::jsonb[]) WITH ORDINALITY AS e(memory_id, action, changes, n)
ORDER BY e.n
"""


async def insert_many(
    conn: asyncpg.Connection,
    wallet: str,
    memory_ids: Sequence[UUID],
    actions: Sequence[str],
    changes: Sequence[dict[str, Any]],
    actor: str | None = None,
) -> None:
    """One statement for the whole list (a batch of 100 stores writes its history at once);
    `actor`: the wallet that acted, when not the owner."""
    await conn.execute(_INSERT, wallet, list(memory_ids), list(actions), list(changes), actor)


async def history_of(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID
) -> list[asyncpg.Record] | None:
    """A memory's history, oldest first, deleted memories included (restoring needs it); None
    when the wallet has no such memory (or it expired: expired memories vanish everywhere)."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT h.id, m.id AS memory_id, h.action, h.changes, h.actor, h.created_at
           FROM memories m
           LEFT JOIN memory_history h ON h.user_id = m.user_id AND h.memory_id = m.id
           WHERE m.user_id = $1 AND m.id = $2
             AND (m.expires_at IS NULL OR m.expires_at > now())
           ORDER BY h.created_at, h.id""",
        wallet, memory_id,
    )  # fmt: skip
    if not rows:
        return None
    return [r for r in rows if r["id"] is not None]
