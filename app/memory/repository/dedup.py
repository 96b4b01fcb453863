"""A store's duplicate lookups: the locks that serialise stores of the same content, the memory
already holding each content, and each item's nearest memory (app/memory/dedup.py decides)."""

from __future__ import annotations

import asyncpg
import numpy as np

from app.memory.fields import ContentKey
from app.memory.sql import COLUMNS, LIVE, vector_array


def _content_lock_key(wallet: str, namespace: str, digest: bytes) -> str:
    return f"{wallet}\x1f{namespace}\x1f{digest.hex()}"


async def lock_contents(conn: asyncpg.Connection, wallet: str, keys: list[ContentKey]) -> None:
    """Serialise concurrent stores of the same content (clients retry POSTs) until commit.

    One statement for a whole batch; locks are taken in sorted order, so two batches sharing
    contents cannot deadlock.
    """
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest($1::text[]) AS k",
        sorted({_content_lock_key(wallet, namespace, digest) for namespace, digest in keys}),
    )


async def find_same_contents(
    conn: asyncpg.Connection, wallet: str, keys: list[ContentKey]
) -> dict[ContentKey, asyncpg.Record]:
    """The live memory (the oldest) already holding each (namespace, content digest)."""
    rows = await conn.fetch(
        f"""SELECT DISTINCT ON (m.namespace, m.content_hash) {COLUMNS}, m.content_hash
            FROM memories m
            JOIN unnest($2::text[], $3::bytea[]) AS u(namespace, content_hash)
              ON m.namespace = u.namespace AND m.content_hash = u.content_hash
            WHERE m.user_id = $1 AND {LIVE}
            ORDER BY m.namespace, m.content_hash, m.created_at""",
        wallet, [k[0] for k in keys], [k[1] for k in keys],
    )  # fmt: skip
    return {(r["namespace"], bytes(r["content_hash"])): r for r in rows}


# nearest_each's statements: $1 the wallet, $2 each item's namespace, $3 its vector.
_ITEMS = """u AS MATERIALIZED (
    SELECT v.namespace, v.i, v.embedding
    FROM unnest($2::text[], $3::vector[]) WITH ORDINALITY AS v(namespace, embedding, i)
)"""

_NEAREST_EACH = """WITH {items}
    SELECT u.i, near.* FROM u
    CROSS JOIN LATERAL (
        SELECT {columns}, 1 - (m.embedding <=> u.embedding) AS similarity FROM memories m
        WHERE m.user_id = $1 AND m.namespace = u.namespace AND {live}
        ORDER BY {order} LIMIT 1
    ) near"""

# `+ 0` hides the distance from the HNSW index: an exact scan of the wallet's rows
_NEAREST_EACH_EXACT = _NEAREST_EACH.format(
    items=_ITEMS, columns=COLUMNS, live=LIVE, order="(m.embedding <=> u.embedding) + 0"
)

_NEAREST_EACH_BY_INDEX = _NEAREST_EACH.format(
    items=_ITEMS, columns=COLUMNS, live=LIVE, order="m.embedding <=> u.embedding"
)

_NEAREST_OF_MANY_EXACT = f"""WITH {_ITEMS},
    w AS MATERIALIZED (  -- one read of the wallet's rows, whatever the batch's size
        -- subvector(): each vector detoasted once here, not once per distance below
        SELECT m.id, m.namespace,
               subvector(m.embedding, 1, vector_dims(m.embedding)) AS embedding
        FROM memories m
        WHERE m.user_id = $1 AND m.namespace = ANY($2::text[]) AND {LIVE}
    ),
    best AS (
        SELECT u.i, near.id, near.similarity FROM u CROSS JOIN LATERAL (
            SELECT w.id, 1 - (w.embedding <=> u.embedding) AS similarity FROM w
            WHERE w.namespace = u.namespace
            ORDER BY w.embedding <=> u.embedding, w.id LIMIT 1
        ) near
    )
    SELECT best.i, {COLUMNS}, best.similarity
    FROM best JOIN memories m ON m.user_id = $1 AND m.id = best.id"""


async def nearest_each(
    conn: asyncpg.Connection,
    wallet: str,
    namespaces: list[str],
    embeddings: list[np.ndarray],
    exact: bool,
) -> list[tuple[asyncpg.Record, float] | None]:
    """For each (namespace, embedding): the wallet's closest live memory there and its cosine.

    `exact` (a small wallet) measures every row of the wallet instead of walking the HNSW graph
    (~0.4 ms per item however big the wallet grows). One item scans the wallet; several read its
    rows once, detoasted once, and measure each item against them: a batch of 100 against 400
    memories took 16-18 ms that way, 78-118 ms as 100 scans (each detoasting every vector again).
    """
    if exact and len(embeddings) > 1:
        sql = _NEAREST_OF_MANY_EXACT
    else:
        sql = _NEAREST_EACH_EXACT if exact else _NEAREST_EACH_BY_INDEX
    rows = await conn.fetch(sql, wallet, namespaces, vector_array(embeddings))
    found: list[tuple[asyncpg.Record, float] | None] = [None] * len(namespaces)
    for r in rows:
        found[int(r["i"]) - 1] = (r, float(r["similarity"]))
    return found
