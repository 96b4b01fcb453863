"""All SQL for export and import: a server-side cursor over a wallet's memories, the lookup of
contents a wallet already holds (the insert is app/memory/repository/writes.py insert_many).

Every statement names the wallet (memories are hash-partitioned by user_id).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import asyncpg

from app.memory.filters import MemoryFilter
from app.memory.sql import COLUMNS, LIVE, filter_sql

# Not LIVE: a soft-deleted memory is still held (and exportable), an expired one is not.
NOT_EXPIRED = "(m.expires_at IS NULL OR m.expires_at > now())"


async def export_batches(
    conn: asyncpg.Connection, f: MemoryFilter, batch_rows: int
) -> AsyncIterator[list[asyncpg.Record]]:
    """The filtered memories in batches from a server-side cursor (needs an open transaction):
    at most `batch_rows` rows are held at a time, however many the wallet has.

    Ordered by namespace, then age, so a document can group by namespace while streaming.
    """
    sql = filter_sql(f)
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
