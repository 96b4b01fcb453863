"""`engram reembed`'s SQL: the wallets, and their memories, whose vectors come from another model,
or that are long and have no passages yet; and the new vectors written."""

from __future__ import annotations

from uuid import UUID

import asyncpg
import numpy as np

from app.memory.sql import vector_array


async def wallets_embedded_otherwise(conn: asyncpg.Connection, model: str, limit: int) -> list[str]:
    """Up to `limit` wallets holding a memory whose vector comes from another model than
    `model` (`engram reembed` then works wallet by wallet: on Citus, each on its shard)."""
    rows = await conn.fetch(
        """SELECT DISTINCT user_id FROM memories WHERE embedding_model <> $1
           ORDER BY user_id LIMIT $2""",
        model, limit,
    )  # fmt: skip
    return [str(r["user_id"]) for r in rows]


async def embedded_otherwise(
    conn: asyncpg.Connection, wallet: str, model: str, limit: int
) -> list[asyncpg.Record]:
    """Up to `limit` of the wallet's memories (deleted ones too: a restore brings them back)
    whose vector comes from another model than `model`, locked until the transaction ends."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT id, content FROM memories WHERE user_id = $1 AND embedding_model <> $2
           LIMIT $3 FOR UPDATE SKIP LOCKED""",
        wallet, model, limit,
    )  # fmt: skip
    return rows


async def long_memories_after(
    conn: asyncpg.Connection, wallet: str, after: UUID | None, min_chars: int, limit: int
) -> list[asyncpg.Record]:
    """Up to `limit` of the wallet's memories of more than `min_chars` characters and without
    passages, by id after `after` (`engram reembed` gives those past the model's window their
    passages)."""
    rows: list[asyncpg.Record] = await conn.fetch(
        """SELECT m.id, m.content FROM memories m
           WHERE m.user_id = $1 AND ($2::uuid IS NULL OR m.id > $2) AND length(m.content) > $3
             AND NOT EXISTS (SELECT 1 FROM memory_passages p
                             WHERE p.user_id = $1 AND p.memory_id = m.id)
           ORDER BY m.id LIMIT $4""",
        wallet, after, min_chars, limit,
    )  # fmt: skip
    return rows


async def wallets_after(conn: asyncpg.Connection, after: str, limit: int) -> list[str]:
    """Up to `limit` wallets holding memories, in order after `after` (`engram reembed`'s
    passage pass walks them all)."""
    rows = await conn.fetch(
        "SELECT DISTINCT user_id FROM memories WHERE user_id > $1 ORDER BY user_id LIMIT $2",
        after, limit,
    )  # fmt: skip
    return [str(r["user_id"]) for r in rows]


async def set_embeddings(
    conn: asyncpg.Connection,
    wallet: str,
    rows: list[asyncpg.Record],
    vectors: list[np.ndarray],
    model: str,
) -> None:
    """Each of the wallet's rows gets its new vector, from `model`."""
    await conn.execute(
        """UPDATE memories m SET embedding = u.embedding, embedding_model = $4
           FROM unnest($2::uuid[], $3::vector[]) AS u(id, embedding)
           WHERE m.user_id = $1 AND m.id = u.id""",
        wallet, [r["id"] for r in rows], vector_array(vectors), model,
    )  # fmt: skip
