"""All SQL for export and import: a server-side cursor over a wallet's memories, the lookup of
contents a wallet already holds, and a set-based insert (one statement per chunk of rows).

Every statement names the wallet (memories are hash-partitioned by user_id).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np
from pgvector import Vector

from app.memory.repository import COLUMNS, LIVE, MemoryFilter, _filtered

# Not LIVE: a soft-deleted memory is still held (and exportable), an expired one is not.
NOT_EXPIRED = "(m.expires_at IS NULL OR m.expires_at > now())"


@dataclass
class ImportedMemory:
    """One memory as an import writes it: the source's fields, a new id, the caller's wallet."""

    id: UUID
    content: str
    content_hash: bytes
    metadata: dict[str, Any]
    importance: float
    namespace: str
    memory_type: str
    session_id: str | None
    agent_id: str | None
    expires_at: datetime | None
    pinned: bool
    immutable: bool
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime
    access_count: int
    deleted_at: datetime | None


async def export_batches(
    conn: asyncpg.Connection, f: MemoryFilter, batch_rows: int
) -> AsyncIterator[list[asyncpg.Record]]:
    """The filtered memories in batches from a server-side cursor (needs an open transaction):
    at most `batch_rows` rows are held at a time, however many the wallet has.

    Ordered by namespace, then age, so a document can group by namespace while streaming.
    """
    sql = _filtered(f)
    cursor = await conn.cursor(
        f"""SELECT {COLUMNS} FROM memories m WHERE {sql.sql()}
            ORDER BY m.namespace, m.created_at, m.id""",
        *sql.params,
    )
    while rows := await cursor.fetch(batch_rows):
        yield rows


async def lock_imports(conn: asyncpg.Connection, wallet: str) -> None:
    """One import per wallet at a time, until commit: two concurrent imports of the same export
    would otherwise both find nothing to skip and both insert everything."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"import\x1f{wallet}"
    )


async def held_contents(
    conn: asyncpg.Connection, wallet: str, keys: Iterable[tuple[str, bytes]]
) -> set[tuple[str, bytes, bool]]:
    """Which (namespace, content_hash) pairs the wallet already holds, each with whether the
    holding memory is live (True) or soft-deleted (False). Expired memories do not count."""
    namespaces: list[str] = []
    digests: list[bytes] = []
    for namespace, digest in keys:
        namespaces.append(namespace)
        digests.append(digest)
    if not namespaces:
        return set()
    rows = await conn.fetch(
        f"""SELECT DISTINCT m.namespace, m.content_hash, ({LIVE}) AS live
            FROM memories m
            JOIN unnest($2::text[], $3::bytea[]) AS k(namespace, content_hash)
                ON m.namespace = k.namespace AND m.content_hash = k.content_hash
            WHERE m.user_id = $1 AND {NOT_EXPIRED}""",
        wallet, namespaces, digests,
    )  # fmt: skip
    return {(r["namespace"], bytes(r["content_hash"]), bool(r["live"])) for r in rows}


async def insert_many(
    conn: asyncpg.Connection,
    wallet: str,
    memories: Sequence[ImportedMemory],
    embeddings: Sequence[np.ndarray],
    embedding_model: str,
) -> None:
    """Insert memories with all their fields kept (timestamps and counts included) in one
    statement: one row of arrays per column, unnested together."""
    if not memories:
        return

    def column(name: str) -> list[Any]:
        return [getattr(m, name) for m in memories]

    await conn.execute(
        """
        INSERT INTO memories (user_id, embedding_model, id, content, content_hash, embedding,
            metadata, importance, namespace, memory_type, session_id, agent_id, expires_at,
            pinned, immutable, created_at, updated_at, accessed_at, access_count, deleted_at)
        SELECT $1, $2, u.* FROM unnest(
            $3::uuid[], $4::text[], $5::bytea[], $6::vector[], $7::jsonb[], $8::float8[],
            $9::text[], $10::text[], $11::text[], $12::text[], $13::timestamptz[],
            $14::boolean[], $15::boolean[], $16::timestamptz[], $17::timestamptz[],
            $18::timestamptz[], $19::integer[], $20::timestamptz[]
        ) AS u
        """,
        wallet, embedding_model, column("id"), column("content"), column("content_hash"),
        # pgvector's Vector, not ndarrays: asyncpg's array encoder refuses a list of ndarrays
        [Vector(e) for e in embeddings],
        column("metadata"), column("importance"), column("namespace"), column("memory_type"),
        column("session_id"), column("agent_id"), column("expires_at"), column("pinned"),
        column("immutable"), column("created_at"), column("updated_at"), column("accessed_at"),
        column("access_count"), column("deleted_at"),
    )  # fmt: skip
