"""All SQL for memories. Services call these with domain arguments; nothing else writes SQL.

Every read filters with LIVE: soft-deleted and expired memories vanish from every query.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, get_args
from uuid import UUID, uuid4

import asyncpg
import numpy as np
from pgvector import Vector

LIVE = "m.deleted_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > now())"
COLUMNS = (
    "m.id, m.user_id, m.namespace, m.content, m.embedding_model, m.metadata, m.importance,"
    " m.memory_type, m.session_id, m.agent_id, m.expires_at, m.pinned, m.immutable,"
    " m.created_at, m.updated_at, m.accessed_at, m.access_count, m.deleted_at, m.occurred_at,"
    " m.mentioned_at, m.key, m.version, m.source, m.written_by, m.writer, m.surface, m.flags,"
    " m.quarantined"
)
# filter_sql binds the wallet first, so its placeholder is always $1 (joins and subqueries name
# it to prune partitions at planning time: memories are partitioned by user_id).
WALLET = "$1"
# Live relations of m (both directions), whose other end is itself live: feeds recall's decay.
# For statements whose wallet is bound as $1; `kept` narrows the other end (relation_count).
_RELATION_COUNT_WHERE = f"""(
    SELECT count(*) FROM memory_relations r
    JOIN memories o ON o.user_id = {WALLET}
        AND o.id = CASE WHEN r.source_id = m.id THEN r.target_id ELSE r.source_id END
    WHERE r.user_id = {WALLET} AND (r.source_id = m.id OR r.target_id = m.id)
        AND o.deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now())
        {{kept}}
)"""
RELATION_COUNT = _RELATION_COUNT_WHERE.format(kept="")
# A recall query's words OR-ed together (plainto_tsquery ANDs them, which long questions rarely
# satisfy); the lexemes are already normalised, so the text is cast, not re-parsed.
OR_TSQUERY = "replace(plainto_tsquery('english', {p})::text, ' & ', ' | ')::tsquery"


# The keyword side ranks its matches by summed IDF (a subquery per row); a big wallet can have
# thousands of matches for a common word, so they are first cut to this many by ts_rank (a
# plain C function). Wallets with fewer matches are ranked by IDF in full.
KEYWORD_PREFILTER = 500

# Over a big wallet (the index path), the keyword side looks for the query's selective words
# only: those in at most this share of the IDF sample (about 2,000 memories of a 100k wallet),
# or the rarest word when none is. A memory holding only common words adds little IDF; reading
# every one (10,733 rows for one query at 1M rows, ts_rank on each) was the keyword side's whole
# cost, p95 48 ms. Those memories still come in by the vector side, and every candidate still
# scores all the query's words.
SELECTIVE_SHARE = 0.02
SELECTIVE_WORDS = f"""selective AS (
    SELECT string_agg(quote_literal(l.word), ' | ')::tsquery AS tsq FROM (
        SELECT lex.word FROM lex WHERE lex.n <= lex.total * {SELECTIVE_SHARE}
        UNION (SELECT lex.word FROM lex ORDER BY lex.n, lex.word LIMIT 1)
    ) l
),"""

# How many of the memories written after a seed in its namespace (by `seq`) recall's second
# round reads when it looks for the seed's continuation: its next turns in the same session
# and within the time gap come among the next few, unless other sessions interleave this much.
CONTINUATION_LOOKAHEAD = 64

# MemoryFilter fields that match a column of the same name exactly.
EQUALITY_FILTERS = ("namespace", "session_id", "agent_id", "pinned", "immutable", "quarantined")


@dataclass
class MemoryFilter:
    """Which of a wallet's memories a read is about."""

    wallet: str
    namespace: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    memory_types: list[str] | None = None
    tags: list[str] | None = None
    after: datetime | None = None
    before: datetime | None = None
    occurred_after: datetime | None = None  # event time (occurred_at), inclusive
    occurred_before: datetime | None = None  # event time, exclusive
    pinned: bool | None = None
    immutable: bool | None = None
    include_deleted: bool = False
    metadata: dict[str, Any] | None = None  # JSON containment: metadata holds all of it
    # the one namespace a grantee or an agent key reaches: relations whose other end lies
    # elsewhere count for nothing in what it reads (app/memory/actor.py)
    kept_to: str | None = None
    sources: list[str] | None = None  # memories from these sources only (provenance.py)
    quarantined: bool | None = None  # False: none held for review (recall: app/guard)


# The orders a list can be read in (MemoClaw's MCP server's `sort` values); ties by id.
ListSort = Literal["created_at", "updated_at", "importance"]
LIST_SORTS: tuple[str, ...] = get_args(ListSort)


@dataclass(frozen=True)
class ListOrder:
    sort: str = "created_at"  # one of LIST_SORTS
    descending: bool = True


NEWEST_FIRST = ListOrder()


@dataclass
class MemoryFields:
    """What a caller says about a new memory (validated); importance None means the default."""

    content: str
    metadata: dict[str, Any]
    importance: float | None
    namespace: str
    memory_type: str
    session_id: str | None
    agent_id: str | None
    expires_at: datetime | None
    pinned: bool
    immutable: bool
    occurred_at: datetime | None = None  # event time, when known (app/memory/dates.py)
    mentioned_at: datetime | None = None  # when it was said, which relative dates count from
    key: str | None = None  # a stable name in its namespace (upsert by key)
    # provenance (app/memory/provenance.py): None on `source` is the route's default; the
    # others, when set, are what an import carries over (else the request's)
    source: str | None = None
    written_by: str | None = None
    writer: str | None = None
    surface: str | None = None


# (namespace, SHA-256 of the content): what exact-content dedup compares
ContentKey = tuple[str, bytes]


@dataclass
class KeptState:
    """What an import carries over from its source; a store leaves these to the database."""

    created_at: datetime
    updated_at: datetime
    accessed_at: datetime
    access_count: int
    deleted_at: datetime | None


@dataclass
class NewMemory:
    wallet: str
    fields: MemoryFields
    importance: float
    content_hash: bytes
    embedding: np.ndarray
    embedding_model: str
    kept: KeptState | None = None
    # provenance and trust, as the service settled them (app/guard/service.py)
    source: str = "api"
    written_by: str | None = None
    writer: str = "owner"
    surface: str = "rest"
    flags: list[dict[str, str]] = field(default_factory=list)
    quarantined: bool = False


@dataclass
class _Sql:
    """WHERE clauses and their $n parameters, built together so numbering cannot drift."""

    params: list[Any] = field(default_factory=list)
    clauses: list[str] = field(default_factory=list)

    def param(self, value: Any) -> str:
        self.params.append(value)
        return f"${len(self.params)}"

    def where(self, clause: str) -> None:
        self.clauses.append(clause)

    def sql(self) -> str:
        return " AND ".join(self.clauses) if self.clauses else "true"


def filter_sql(f: MemoryFilter) -> _Sql:
    """The WHERE clauses that select the memories `f` describes, with their parameters (the
    wallet first, as $1); a statement adds its own parameters after them."""
    sql = _Sql()
    sql.where(f"m.user_id = {sql.param(f.wallet)}")
    if f.include_deleted:
        sql.where("(m.expires_at IS NULL OR m.expires_at > now())")
    else:
        sql.where(LIVE)
    for column in EQUALITY_FILTERS:
        value = getattr(f, column)
        if value is not None:
            sql.where(f"m.{column} = {sql.param(value)}")
    if f.memory_types:
        sql.where(f"m.memory_type = ANY({sql.param(f.memory_types)}::text[])")
    if f.sources:
        sql.where(f"m.source = ANY({sql.param(f.sources)}::text[])")
    if f.tags:
        sql.where(f"(m.metadata -> 'tags') ?| {sql.param(f.tags)}::text[]")
    if f.metadata:
        sql.where(f"m.metadata @> {sql.param(f.metadata)}::jsonb")
    if f.after is not None:
        sql.where(f"m.created_at >= {sql.param(f.after)}")
    if f.before is not None:
        sql.where(f"m.created_at < {sql.param(f.before)}")
    if f.occurred_after is not None:
        sql.where(f"m.occurred_at >= {sql.param(f.occurred_after)}")
    if f.occurred_before is not None:
        sql.where(f"m.occurred_at < {sql.param(f.occurred_before)}")
    return sql


# ---- writes ------------------------------------------------------------------------------------


def _content_lock_key(wallet: str, namespace: str, digest: bytes) -> str:
    return f"{wallet}\x1f{namespace}\x1f{digest.hex()}"


def _vector_array(vectors: list[np.ndarray]) -> list[Vector]:
    """Vectors as one vector[] parameter. Each is wrapped, or asyncpg's array encoder would take
    an ndarray for a sub-array; wrapped, each goes over in pgvector's binary form, where the
    flat real[] this replaced was encoded one Python float at a time (0.14 ms of the event
    loop per vector)."""
    return [Vector(v) for v in vectors]


async def lock_contents(conn: asyncpg.Connection, wallet: str, keys: list[ContentKey]) -> None:
    """Serialise concurrent stores of the same content (clients retry POSTs) until commit.

    One statement for a whole batch; locks are taken in sorted order, so two batches sharing
    contents cannot deadlock.
    """
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest($1::text[]) AS k",
        sorted({_content_lock_key(wallet, namespace, digest) for namespace, digest in keys}),
    )


async def lock_key(conn: asyncpg.Connection, wallet: str, namespace: str, key: str) -> None:
    """Serialise concurrent stores of one key until commit: each then sees the last one's
    row."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        f"key\x1f{wallet}\x1f{namespace}\x1f{key}",
    )


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
    rows = await conn.fetch(sql, wallet, namespaces, _vector_array(embeddings))
    found: list[tuple[asyncpg.Record, float] | None] = [None] * len(namespaces)
    for r in rows:
        found[int(r["i"]) - 1] = (r, float(r["similarity"]))
    return found


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
        [n.content_hash for n in new], _vector_array(vectors),
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
            wallet, ids, seqs, _vector_array([v for vectors in passages for v in vectors]),
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
    sql = _Sql()
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


async def record_access_each_time(conn: asyncpg.Connection, wallet: str, ids: list[UUID]) -> None:
    """MemoClaw's own accounting (ENGRAM_RECALL_COUNTS_ACCESS=1): every recalled memory counts."""
    await conn.execute(
        """UPDATE memories SET access_count = access_count + 1, accessed_at = now()
           WHERE id = ANY($1::uuid[]) AND user_id = $2""",
        ids, wallet,
    )  # fmt: skip


# ---- reads -------------------------------------------------------------------------------------


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


# A row `m`'s keyword match (`keyword_match`), from the words of the lexicon `lex` it holds.
#
# "idf", the earlier form: the sum of their IDFs. A memory much longer than the others holds
# many of any question's common words by chance (an assistant's 2,000-word answer holds most
# of a long question's words), so the sum let it outrank the short memory that holds the
# question's one telling word: on BEAM, turning the keyword signal off recovered 47 % of the
# evidence Engram lost to dense-only retrieval (issue 37).
#
# "passage", the default: a memory of p passages (p = its distinct lexemes / PASSAGE_LEXEMES,
# at least 1) has about p times the chance of a one-passage memory to hold a given word, so a
# word it holds tells ln(p) less about it: each word counts max(idf - ln(p), 0). A rare word
# still counts (idf 4-7 against ln(p) <= 2 for 7 passages); a word half the memories hold
# (idf ~0.7) counts nothing in a memory of two passages or more. A memory of one passage or
# less (every LoCoMo turn, a short note) scores exactly as before: no bonus for being short,
# which lost LoCoMo's evidence (longer than its average turn) to short chit-chat.
#
# PASSAGE_LEXEMES is what the default embedder reads of a memory: MiniLM's 256-token window
# holds ~60 distinct lexemes of English text (median over 2,000 BEAM turns of 230-280 tokens;
# 4.3 tokens a lexeme). Up to that length the vector and the keyword side read the same text.
# Measured, not fitted: 30 and BM25's own normalisation (by the wallet's average length) were
# tried and dropped (README, "Recall").
PASSAGE_LEXEMES = 60
IDF_SUM = "(SELECT coalesce(sum(lex.idf), 0) FROM lex WHERE m.tsv @@ lex.lq)"
PASSAGE_IDF_SUM = f"""(SELECT coalesce(sum(greatest(
    lex.idf - ln(greatest(length(m.tsv)::float8 / {PASSAGE_LEXEMES}, 1)), 0)), 0)
    FROM lex WHERE m.tsv @@ lex.lq)"""
KEYWORD_FORMS = {"passage": PASSAGE_IDF_SUM, "idf": IDF_SUM}


def _sampled_lexicon(sql: _Sql, searched: str, where: str, text: str, corpus_size: int) -> str:
    """The `lex` CTE: each query word with its inverse document frequency among the rows
    searched (`searched` as `m`, those `where` matches; BM25's), counted in one read of up to
    `corpus_size` of those rows: all of a small wallet's, a sample of a big one's (counting a
    common word over every match of a 100k-memory wallet would cost a bitmap of thousands of
    rows per word).

    Each word is counted among the sampled rows that hold any of the query's words (one test of
    each row against their disjunction), not among all of them: a word at a time over the whole
    sample cost ~1.6 ms a word at 2,001 rows, 13 ms of an 8-word query's recall."""
    size = sql.param(corpus_size)
    return f"""sample AS MATERIALIZED (SELECT m.tsv FROM {searched} WHERE {where} LIMIT {size}),
    words AS MATERIALIZED (
        SELECT w AS word, quote_literal(w)::tsquery AS lq
        FROM unnest(tsvector_to_array(to_tsvector('english', {text}))) w
    ),
    holding AS MATERIALIZED (
        SELECT s.tsv FROM sample s
        WHERE s.tsv @@ (SELECT string_agg(quote_literal(word), ' | ')::tsquery FROM words)
    ),
    lex AS (
        SELECT l.word, l.lq, d.n, t.total, ln(1 + (t.total - d.n + 0.5) / (d.n + 0.5)) AS idf
        FROM words l, (SELECT count(*) AS total FROM sample) t,
             LATERAL (SELECT count(*) FILTER (WHERE h.tsv @@ l.lq) AS n FROM holding h) d
    ),"""


def _given_lexicon(sql: _Sql, lexicon: Lexicon) -> str:
    """The `lex` CTE from the first round's words and weights: the second round scores its
    rows with the same IDF, without reading the sample again."""
    words, idf = sql.param(list(lexicon)), sql.param(list(lexicon.values()))
    return f"""lex AS (
        SELECT l.word, quote_literal(l.word)::tsquery AS lq, l.idf
        FROM unnest({words}::text[], {idf}::float8[]) AS l(word, idf)
    ),"""


def relation_count(sql: _Sql, kept_to: str | None) -> str:
    """RELATION_COUNT of `m`, counting only relations into `kept_to` when given."""
    kept = "" if kept_to is None else f"AND o.namespace = {sql.param(kept_to)}"
    return _RELATION_COUNT_WHERE.format(kept=kept)


# The distance of a memory `m`'s nearest passage (its text past the model's window, migration
# 0021), NULL for a memory within the window: one primary-key probe per candidate.
PASSAGE_DISTANCE = """(SELECT min(p.embedding <=> {vec}) FROM memory_passages p
    WHERE p.user_id = {wallet} AND p.memory_id = m.id)"""


def _distance(vec: str, passages: bool) -> str:
    """A candidate `m`'s distance from the query: its own vector's, or with `passages` its best
    window's (LEAST skips the NULL of a memory without passages)."""
    own = f"(m.embedding <=> {vec})"
    return f"LEAST({own}, {PASSAGE_DISTANCE.format(vec=vec, wallet=WALLET)})" if passages else own


def _signals(sql: _Sql, f: MemoryFilter, vec: str, keyword: str, passages: bool) -> str:
    """The raw signals of a candidate row `m` (joined with `q`), beside its columns."""
    return f"""{COLUMNS},
               1 - {_distance(vec, passages)} AS vector_sim,
               CASE WHEN m.tsv @@ q.tsq THEN {KEYWORD_FORMS[keyword]} ELSE 0 END AS keyword_match,
               {relation_count(sql, f.kept_to)} AS relation_count"""


# A query's words (lexemes) and their inverse document frequencies, as the first round
# counted them.
Lexicon = dict[str, float]


def _scoring_params(
    f: MemoryFilter, embedding: np.ndarray, query: str
) -> tuple[_Sql, str, str, str, str]:
    """The filter's WHERE, then the query vector, its text and its OR-ed tsquery as parameters:
    what every statement that scores candidates starts from."""
    sql = filter_sql(f)
    where = sql.sql()
    vec = sql.param(embedding)
    text = sql.param(query)
    return sql, where, vec, text, OR_TSQUERY.format(p=text)


async def recall_candidates(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    embedding: np.ndarray,
    query: str,
    per_side: int,
    exact: bool,
    corpus_size: int,
    keyword: str = "passage",
    passages: bool = True,
) -> tuple[list[asyncpg.Record], int]:
    """Vector top-N (HNSW with iterative scan, or an exact scan) united with keyword top-N.

    `keyword_match` is the sum of the inverse document frequencies of the query's words found
    in a memory, counted over `corpus_size` of the rows searched (all of them, or a sample of a
    big wallet's).

    Returns the candidates with their raw signals and how many the vector side found, so the
    caller can fall back to an exact scan when filters starved the index scan.
    """
    rows = await _candidates(
        conn, f, embedding, query, per_side, exact, corpus_size, None, keyword, passages
    )
    return rows, _vector_hits(rows)


@dataclass(frozen=True)
class ExactCandidates:
    rows: list[asyncpg.Record]
    vector_hits: int
    matching: int  # how many memories the filter matches (all of them were scanned)


async def exact_candidates_within(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    embedding: np.ndarray,
    query: str,
    per_side: int,
    cap: int,
    keyword: str = "passage",
    passages: bool = True,
) -> ExactCandidates | None:
    """`recall_candidates`' exact scan if `f` matches at most `cap` memories, else None (the
    scan stopped at `cap` + 1 rows): the count that picks the plan and the exact scan in one
    statement, one read of the matching rows where a count first read them twice."""
    rows = await _candidates(
        conn, f, embedding, query, per_side, True, cap + 1, cap + 1, keyword, passages
    )
    matching = int(rows[0]["scoped"]) if rows else 0
    if matching > cap:
        return None
    return ExactCandidates(rows, _vector_hits(rows), matching)


def _vector_hits(rows: list[asyncpg.Record]) -> int:
    return int(rows[0]["vector_hits"]) if rows else 0


async def _candidates(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    embedding: np.ndarray,
    query: str,
    per_side: int,
    exact: bool,
    corpus_size: int,
    scope_limit: int | None,
    keyword: str,
    passages: bool,
) -> list[asyncpg.Record]:
    sql, where, vec, text, tsq = _scoring_params(f, embedding, query)
    n = sql.param(per_side)
    scoped = ""
    if exact:
        # One read of the filtered rows, with each one's exact distance, feeds the IDF sample
        # and both sides: as three scans, a filtered big wallet's heap was read three times
        # (19,500 blocks each, 257 ms, in bench/scale.py's slowest query at 1M rows).
        limit = f"LIMIT {sql.param(scope_limit)}" if scope_limit is not None else ""
        # with `passages`, a long memory is as near as its best window (the wallet's passages
        # read once, beside its rows)
        nearest = ""
        own = f"m.embedding <=> {vec}"
        if passages:
            nearest = f"""LEFT JOIN (
                SELECT p.memory_id, min(p.embedding <=> {vec}) AS distance FROM memory_passages p
                WHERE p.user_id = {WALLET} GROUP BY p.memory_id
            ) pd ON pd.memory_id = m.id"""
            own = f"LEAST({own}, pd.distance)"
        scope = f"""scope AS MATERIALIZED (
            SELECT m.id, m.tsv, {own} AS distance FROM memories m {nearest} WHERE {where}
            {limit}
        ),"""
        scoped = ", (SELECT count(*) FROM scope) AS scoped" if limit else ""
        searched, where = "scope m", "true"
        distance = "m.distance"
        matched, selective = "q", ""  # the keyword side looks for every word of the query
    else:  # the HNSW index's order, filtered as it goes (iterative scan)
        scope, searched, distance = "", "memories m", f"m.embedding <=> {vec}"
        matched, selective = "selective", SELECTIVE_WORDS
    lex = _sampled_lexicon(sql, searched, where, text, corpus_size)
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""
        WITH q AS (SELECT {tsq} AS tsq), {scope} {lex} {selective}
        vec AS (SELECT m.id FROM {searched} WHERE {where} ORDER BY {distance} LIMIT {n}),
        kw AS (
            SELECT m.id FROM (
                SELECT m.id, m.tsv FROM {searched}, {matched} t WHERE {where} AND m.tsv @@ t.tsq
                ORDER BY ts_rank(m.tsv, t.tsq, 0) DESC LIMIT {KEYWORD_PREFILTER}
            ) m ORDER BY {KEYWORD_FORMS[keyword]} DESC LIMIT {n}
        ),
        cand AS (SELECT id FROM vec UNION SELECT id FROM kw)
        SELECT {_signals(sql, f, vec, keyword, passages)},
               (SELECT count(*) FROM vec) AS vector_hits,
               (SELECT array_agg(lex.word) FROM lex) AS lex_words,
               (SELECT array_agg(lex.idf) FROM lex) AS lex_idf {scoped}
        FROM cand JOIN memories m ON m.user_id = {WALLET} AND m.id = cand.id, q
        """,
        *sql.params,
    )
    return rows


def lexicon_of(rows: list[asyncpg.Record]) -> Lexicon:
    """The first round's query words and their IDF, as its candidate rows carry them."""
    if not rows or rows[0]["lex_words"] is None:
        return {}
    return dict(zip(rows[0]["lex_words"], map(float, rows[0]["lex_idf"]), strict=True))


async def second_round_candidates(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    seeds: list[UUID],
    embedding: np.ndarray,
    query: str,
    lexicon: Lexicon,
    follow: int,
    max_gap: timedelta,
    keyword: str = "passage",
    passages: bool = True,
) -> list[asyncpg.Record]:
    """What the first round's hits (`seeds`) lead to, each row with its raw signals, the seed
    it came from (`seed_id`) and how far from it (`hops`):

    - continuation: the `follow` memories written right after a seed in its namespace and
      session (by `seq`), each within `max_gap` of the seed (a conversation's next turns: the
      answer to a question, the rest of a story), hops 1..follow;
    - relations: memories a seed is related to, in either direction, hops 1.

    Only memories that `f` matches; a row may come once per seed that leads to it. A seed's
    continuation is looked for among the next CONTINUATION_LOOKAHEAD memories of its namespace:
    unbounded, a seed with no next turn in its session within `max_gap` (most of a big wallet's)
    walked the rest of its namespace, ~56 ms a recall at 100k memories."""
    sql, where, vec, _, tsq = _scoring_params(f, embedding, query)
    ids = sql.param(seeds)
    lex = _given_lexicon(sql, lexicon)
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""
        WITH q AS (SELECT {tsq} AS tsq), {lex}
        seed AS (
            SELECT s.id, s.namespace, s.session_id, s.seq, s.created_at FROM memories s
            WHERE s.user_id = {WALLET} AND s.id = ANY({ids}::uuid[])
        ),
        cand AS (
            SELECT seed.id AS seed_id, nxt.id,
                   row_number() OVER (PARTITION BY seed.id ORDER BY nxt.seq) AS hops
            FROM seed, LATERAL (
                SELECT m.id, m.seq FROM (
                    SELECT m.* FROM memories m
                    WHERE m.user_id = {WALLET} AND m.namespace = seed.namespace
                      AND m.seq > seed.seq AND m.deleted_at IS NULL
                    ORDER BY m.seq LIMIT {CONTINUATION_LOOKAHEAD}
                ) m
                WHERE {where} AND m.session_id IS NOT DISTINCT FROM seed.session_id
                  AND m.created_at <= seed.created_at + {sql.param(max_gap)}
                ORDER BY m.seq LIMIT {sql.param(follow)}
            ) nxt
            UNION
            SELECT seed.id, CASE WHEN r.source_id = seed.id THEN r.target_id ELSE r.source_id END,
                   1
            FROM seed JOIN memory_relations r ON r.user_id = {WALLET}
                AND (r.source_id = seed.id OR r.target_id = seed.id)
        )
        SELECT {_signals(sql, f, vec, keyword, passages)}, cand.seed_id, cand.hops
        -- one primary-key lookup per candidate (OFFSET 0 keeps the planner from flattening it
        -- into a join that scanned the whole wallet: 2 ms at 680 memories)
        FROM cand CROSS JOIN LATERAL (
            SELECT m.* FROM memories m
            WHERE m.user_id = {WALLET} AND m.id = cand.id AND {where} OFFSET 0
        ) m, q
        """,
        *sql.params,
    )
    return rows


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
        wallet, [r["id"] for r in rows], _vector_array(vectors), model,
    )  # fmt: skip
