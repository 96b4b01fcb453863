"""Memory writes: insert (one statement for a batch), update, a dedup's merge, soft delete and
restore, a use counted, metadata set in bulk, and the lock that serialises stores of one key."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import numpy as np

from app.memory.fields import NewMemory
from app.memory.sql import COLUMNS, LIVE, Sql, vector_array


async def lock_key(conn: asyncpg.Connection, wallet: str, namespace: str, key: str) -> None:
    """Serialise concurrent stores of one key until commit: each then sees the last one's
    row."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        f"key\x1f{wallet}\x1f{namespace}\x1f{key}",
    )


def _one_wallet(new: list[NewMemory]) -> str:
    """The wallet of a batch: one per statement, so that it stays on one shard."""
    wallets = {n.wallet for n in new}
    if len(wallets) != 1:
        raise ValueError(f"a batch writes one wallet's memories, not {len(wallets)}")
    return wallets.pop()


def _flags_json(flags: list[dict[str, str]]) -> str | None:
    """A memory's flags as JSON text: a jsonb[] parameter would read the list as an array
    dimension."""
    return json.dumps(flags) if flags else None


async def insert_many(conn: asyncpg.Connection, new: list[NewMemory]) -> list[asyncpg.Record]:
    """Insert memories in one statement; rows come back in the order given. Timestamps, access
    count and deletion are the database's defaults unless a memory carries `kept` (import)."""
    if not new:
        return []
    ids = [uuid4() for _ in new]
    vectors = [n.embedding for n in new]
    rows = await conn.fetch(
        f"""
        INSERT INTO memories AS m (id, user_id, content, content_hash, embedding,
            embedding_model, metadata, importance, namespace, memory_type, session_id, agent_id,
            expires_at, pinned, immutable, created_at, updated_at, accessed_at, access_count,
            deleted_at, occurred_at, mentioned_at, key, source, written_by, writer, surface,
            flags, quarantined)
        SELECT u.id, $2::text, u.content, u.content_hash, u.embedding,
            u.embedding_model, u.metadata, u.importance, u.namespace, u.memory_type,
            u.session_id, u.agent_id, u.expires_at, u.pinned, u.immutable,
            coalesce(u.created_at, now()), coalesce(u.updated_at, now()),
            coalesce(u.accessed_at, now()), coalesce(u.access_count, 0), u.deleted_at,
            u.occurred_at, u.mentioned_at, u.key, u.source, u.written_by, u.writer, u.surface,
            u.flags::jsonb, u.quarantined
        FROM unnest($1::uuid[], $3::text[], $4::bytea[], $5::vector[], $6::text[],
            $7::jsonb[], $8::float8[], $9::text[], $10::text[], $11::text[], $12::text[],
            $13::timestamptz[], $14::bool[], $15::bool[], $16::timestamptz[], $17::timestamptz[],
            $18::timestamptz[], $19::int[], $20::timestamptz[], $21::timestamptz[],
            $22::timestamptz[], $23::text[], $24::text[], $25::text[], $26::text[], $27::text[],
            $28::text[], $29::bool[])
            WITH ORDINALITY
            AS u(id, content, content_hash, embedding, embedding_model, metadata,
                 importance, namespace, memory_type, session_id, agent_id, expires_at, pinned,
                 immutable, created_at, updated_at, accessed_at, access_count, deleted_at,
                 occurred_at, mentioned_at, key, source, written_by, writer, surface, flags,
                 quarantined, i)
        ORDER BY u.i  -- `seq` (the default) numbers the rows in the order given
        RETURNING {COLUMNS}
        """,
        ids, _one_wallet(new), [n.fields.content for n in new],
        [n.content_hash for n in new], vector_array(vectors),
        [n.embedding_model for n in new], [n.fields.metadata for n in new],
        [n.importance for n in new], [n.fields.namespace for n in new],
        [n.fields.memory_type for n in new], [n.fields.session_id for n in new],
        [n.fields.agent_id for n in new], [n.fields.expires_at for n in new],
        [n.fields.pinned for n in new], [n.fields.immutable for n in new],
        *(
            [getattr(n.kept, name) if n.kept else None for n in new]
            for name in ("created_at", "updated_at", "accessed_at", "access_count", "deleted_at")
        ),
        [n.fields.occurred_at for n in new], [n.fields.mentioned_at for n in new],
        [n.fields.key for n in new], [n.source for n in new], [n.written_by for n in new],
        [n.writer for n in new], [n.surface for n in new], [_flags_json(n.flags) for n in new],
        [n.quarantined for n in new],
    )  # fmt: skip
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in ids]


async def insert_passages(
    conn: asyncpg.Connection, wallet: str, memory_ids: list[UUID], passages: list[list[np.ndarray]]
) -> None:
    """Each memory's passages (its windows past the model's, in order), replacing any it had."""
    ids = [i for i, vectors in zip(memory_ids, passages, strict=True) for _ in vectors]
    seqs = [seq for vectors in passages for seq in range(1, len(vectors) + 1)]
    await conn.execute(
        "DELETE FROM memory_passages WHERE user_id = $1 AND memory_id = ANY($2::uuid[])",
        wallet, memory_ids,
    )  # fmt: skip
    if ids:
        await conn.execute(
            """INSERT INTO memory_passages (user_id, memory_id, seq, embedding)
               SELECT $1, u.memory_id, u.seq, u.embedding
               FROM unnest($2::uuid[], $3::int[], $4::vector[]) AS u(memory_id, seq, embedding)""",
            wallet, ids, seqs, vector_array([v for vectors in passages for v in vectors]),
        )  # fmt: skip


async def merge_duplicate(
    conn: asyncpg.Connection,
    wallet: str,
    memory_id: UUID,
    importance: float,
    metadata: dict[str, Any],
    pinned: bool,
) -> asyncpg.Record:
    return await conn.fetchrow(
        f"""UPDATE memories m SET importance = GREATEST(m.importance, $3), metadata = $4,
                pinned = m.pinned OR $5, updated_at = now(), version = m.version + 1
            WHERE m.user_id = $1 AND m.id = $2 RETURNING {COLUMNS}""",
        wallet, memory_id, importance, metadata, pinned,
    )  # fmt: skip


UPDATABLE = {
    "content", "content_hash", "embedding", "embedding_model", "metadata", "importance",
    "memory_type", "namespace", "pinned", "immutable", "expires_at", "session_id", "agent_id",
    "flags", "quarantined",
}  # fmt: skip


async def update(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID, changes: dict[str, Any]
) -> asyncpg.Record:
    sql = Sql()
    sets = []
    for column, value in changes.items():
        if column not in UPDATABLE:
            raise ValueError(f"not an updatable column: {column}")
        sets.append(f"{column} = {sql.param(value)}")
    sets.append("updated_at = now()")
    sets.append("version = m.version + 1")  # every change is a new version
    return await conn.fetchrow(
        f"""UPDATE memories m SET {", ".join(sets)}
            WHERE m.id = {sql.param(memory_id)} AND m.user_id = {sql.param(wallet)}
            RETURNING {COLUMNS}""",
        *sql.params,
    )


async def set_metadata_many(
    conn: asyncpg.Connection, wallet: str, metadata: dict[UUID, dict[str, Any]]
) -> None:
    await conn.execute(
        """UPDATE memories m SET metadata = u.metadata, updated_at = now(), version = m.version + 1
           FROM unnest($2::uuid[], $3::jsonb[]) AS u(id, metadata)
           WHERE m.id = u.id AND m.user_id = $1 AND NOT m.immutable""",
        wallet, list(metadata), list(metadata.values()),
    )  # fmt: skip


async def soft_delete(conn: asyncpg.Connection, wallet: str, ids: list[UUID]) -> list[UUID]:
    rows = await conn.fetch(
        f"""UPDATE memories m SET deleted_at = now(), updated_at = now()
            WHERE m.id = ANY($1::uuid[]) AND m.user_id = $2 AND NOT m.immutable AND {LIVE}
            RETURNING m.id""",
        ids, wallet,
    )  # fmt: skip
    return [r["id"] for r in rows]


async def restore(conn: asyncpg.Connection, wallet: str, memory_id: UUID) -> asyncpg.Record:
    return await conn.fetchrow(
        f"""UPDATE memories m SET deleted_at = NULL, updated_at = now()
            WHERE m.id = $1 AND m.user_id = $2 RETURNING {COLUMNS}""",
        memory_id, wallet,
    )  # fmt: skip


async def use_one(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID, once_per: timedelta
) -> tuple[asyncpg.Record | None, bool]:
    """Count a use of the memory (access_count + 1, accessed_at = now), unless it was counted
    less than `once_per` ago, and read it in the same statement whether the use counted or not:
    (the row after counting, True), (the row as it is, False), or (None, False) when the wallet
    has no such live memory."""
    row = await conn.fetchrow(
        f"""WITH counted AS (
                UPDATE memories m SET access_count = access_count + 1, accessed_at = now()
                WHERE m.id = $1 AND m.user_id = $2 AND {LIVE}
                  AND (m.access_count = 0 OR m.accessed_at <= now() - $3::interval)
                RETURNING {COLUMNS}
            )
            SELECT *, true AS counted FROM counted
            UNION ALL
            SELECT {COLUMNS}, false FROM memories m
            WHERE m.id = $1 AND m.user_id = $2 AND {LIVE} AND NOT EXISTS (SELECT FROM counted)""",
        memory_id, wallet, once_per,
    )  # fmt: skip
    return (row, bool(row["counted"])) if row is not None else (None, False)


async def approve(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID
) -> tuple[asyncpg.Record | None, bool]:
    """Release a quarantined memory of the wallet: (the memory, whether it was quarantined);
    (None, False) when the wallet has no such live memory."""
    row = await conn.fetchrow(
        f"""WITH released AS (
                UPDATE memories m SET quarantined = false, updated_at = now()
                WHERE m.id = $1 AND m.user_id = $2 AND m.quarantined AND {LIVE}
                RETURNING {COLUMNS}
            )
            SELECT *, true AS released FROM released
            UNION ALL
            SELECT {COLUMNS}, false FROM memories m
            WHERE m.id = $1 AND m.user_id = $2 AND {LIVE} AND NOT EXISTS (SELECT FROM released)""",
        memory_id, wallet,
    )  # fmt: skip
    return (row, bool(row["released"])) if row is not None else (None, False)
