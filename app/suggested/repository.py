"""SQL for suggestions: every live memory of the filtered set gets its recall signals, a
category and a review score in one query, which also counts each category."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from app.memory.sql import COLUMNS, LIVE, RELATION_COUNT

# exp() and power() raise "underflow" in PostgreSQL once the result rounds to 0; exponents are
# capped where the value is already 0 to every printed digit.
MAX_EXPONENT = 500


@dataclass(frozen=True)
class SuggestionRules:
    """The category thresholds and the scoring constants they use (app/suggested/service.py)."""

    type_half_life_days: dict[str, float]
    relation_importance_step: float
    relation_half_life_step: float
    relation_cap: int
    hot_min_accesses: int
    hot_window_days: float
    fresh_window_days: float
    stale_min_importance: float
    stale_idle_days: float
    decaying_below: float
    access_boost_per_access: float
    recency_scale_days: float


@dataclass(frozen=True)
class SuggestionFilter:
    wallet: str
    namespace: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    category: str | None = None


SUGGESTED = f"""
WITH base AS (
    SELECT {COLUMNS}, {RELATION_COUNT}::int AS relation_count,
           greatest(extract(epoch FROM now() - m.accessed_at)::float8, 0) / 86400 AS idle_days,
           greatest(extract(epoch FROM now() - m.created_at)::float8, 0) / 86400 AS age_days
    FROM memories m
    WHERE m.user_id = $1 AND {LIVE}
      AND ($2::text IS NULL OR m.namespace = $2::text)
      AND ($3::text IS NULL OR m.session_id = $3::text)
      AND ($4::text IS NULL OR m.agent_id = $4::text)
),
signals AS (
    SELECT b.*,
        least(1.0::float8,
              b.importance + $6::float8 * least(b.relation_count, $8::int)) AS effective_importance,
        CASE WHEN b.pinned THEN 1.0::float8 ELSE power(0.5::float8, least(
            b.idle_days / (coalesce(($5::jsonb ->> b.memory_type)::float8,
                                    ($5::jsonb ->> 'general')::float8)
                           * (1 + $7::float8 * least(b.relation_count, $8::int))),
            {MAX_EXPONENT})) END AS type_decay
    FROM base b
),
categorised AS (
    SELECT s.*, CASE
        WHEN s.access_count >= $9::int AND s.idle_days <= $10::float8 THEN 'hot'
        WHEN s.age_days <= $11::float8 THEN 'fresh'
        WHEN s.effective_importance >= $12::float8 AND s.idle_days >= $13::float8 THEN 'stale'
        WHEN NOT s.pinned AND s.type_decay < $14::float8 THEN 'decaying'
    END AS category
    FROM signals s
),
scored AS (
    SELECT c.*, c.effective_importance * CASE c.category
        WHEN 'hot' THEN least(c.access_count * $15::float8, 1.0::float8)
        WHEN 'fresh' THEN exp(-least(c.age_days / $16::float8, {MAX_EXPONENT}))
        WHEN 'stale' THEN 1 - exp(-least(c.idle_days / $16::float8, {MAX_EXPONENT}))
        ELSE 1 - c.type_decay
    END AS review_score
    FROM categorised c
    WHERE c.category IS NOT NULL
),
counts AS (
    SELECT coalesce(jsonb_object_agg(g.category, g.n), '{{}}'::jsonb) AS categories
    FROM (SELECT category, count(*) AS n FROM scored GROUP BY category) g
)
SELECT counts.categories, page.*
FROM counts LEFT JOIN LATERAL (
    SELECT * FROM scored
    WHERE $17::text IS NULL OR scored.category = $17::text
    ORDER BY scored.review_score DESC, scored.created_at DESC, scored.id
    LIMIT $18::int
) page ON true
"""


async def suggested(
    conn: asyncpg.Connection, f: SuggestionFilter, rules: SuggestionRules, limit: int
) -> tuple[list[asyncpg.Record], dict[str, int]]:
    """The best `limit` suggestions (of f.category, if given) and how many each category has.

    The page joins onto the counts, so an empty page still comes back as one row whose memory
    columns are NULL.
    """
    rows = await conn.fetch(
        SUGGESTED,
        f.wallet, f.namespace, f.session_id, f.agent_id,
        rules.type_half_life_days, rules.relation_importance_step, rules.relation_half_life_step,
        rules.relation_cap, rules.hot_min_accesses, rules.hot_window_days,
        rules.fresh_window_days, rules.stale_min_importance, rules.stale_idle_days,
        rules.decaying_below, rules.access_boost_per_access, rules.recency_scale_days,
        f.category, limit,
    )  # fmt: skip
    counts: dict[str, Any] = rows[0]["categories"] if rows else {}
    page = [r for r in rows if r["id"] is not None]
    return page, {name: int(n) for name, n in counts.items()}
