"""Memory's SQL fragments, for every repository that reads memories (memory's own, and those of
the features built on them: relations, guard, tags, suggested, transfer): LIVE, COLUMNS, the
relation count, and `filter_sql`, the WHERE a MemoryFilter selects, with its parameters.
Fragments only: no statement runs here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pgvector import Vector

from app.memory.filters import MemoryFilter

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

# MemoryFilter fields that match a column of the same name exactly.
EQUALITY_FILTERS = ("namespace", "session_id", "agent_id", "pinned", "immutable", "quarantined")


@dataclass
class Sql:
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


def filter_sql(f: MemoryFilter) -> Sql:
    """The WHERE clauses that select the memories `f` describes, with their parameters (the
    wallet first, as $1); a statement adds its own parameters after them."""
    sql = Sql()
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


def vector_array(vectors: list[np.ndarray]) -> list[Vector]:
    """Vectors as one vector[] parameter. Each is wrapped, or asyncpg's array encoder would take
    an ndarray for a sub-array; wrapped, each goes over in pgvector's binary form, where the
    flat real[] this replaced was encoded one Python float at a time (0.14 ms of the event
    loop per vector)."""
    return [Vector(v) for v in vectors]


def relation_count(sql: Sql, kept_to: str | None) -> str:
    """RELATION_COUNT of `m`, counting only relations into `kept_to` when given."""
    kept = "" if kept_to is None else f"AND o.namespace = {sql.param(kept_to)}"
    return _RELATION_COUNT_WHERE.format(kept=kept)
