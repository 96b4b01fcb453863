"""Which memories deserve a look now, from the same signals recall scores with (scoring.py).

Each live memory of the filtered set falls in at most one category, tested in this order:

- **hot**: used often and lately: access_count ≥ 5 and last accessed within 7 days.
- **fresh**: created within the last 7 days (and not hot, so accessed fewer than 5 times): new
  knowledge worth confirming while its context is still known.
- **stale**: important but left alone: effective_importance ≥ 0.7 and not accessed for 30 days
  or more (pinned memories included: always loaded is not the same as still true).
- **decaying**: losing its recall weight: not pinned and type_decay < 0.5, i.e. idle for more
  than one (relation-stretched) half-life of its type.

Memories in none of them (ordinary, middle-aged, still weighty) are not suggested.

`review_score` (0–1) says how much a memory deserves review: effective_importance times what
makes its category urgent:

- hot: access_boost − 1 = min(0.1 × access_count, 1), how much recall already leans on it;
- fresh: recency = exp(−age_days / 30), fading as the memory ages out of "fresh";
- stale: 1 − exp(−days_since_access / 30), growing the longer it is left alone;
- decaying: 1 − type_decay, the recall weight it has lost.

effective_importance, type_decay (pinned: 1), the half-lives, the relation stretch and the
30-day scale are scoring.py's, computed in SQL; results come best review_score first.
`categories` counts every category over the filtered set (whatever `category` asks for), and
`total` is how many suggestions match the request before `limit`.
"""

from __future__ import annotations

import asyncpg

from app.memory import scoring
from app.suggested import repository as repo
from app.suggested.repository import SuggestionFilter, SuggestionRules
from app.suggested.schemas import CATEGORIES

MAX_LIMIT = 50  # contract: limit ≤ 50
DEFAULT_LIMIT = 10

RULES = SuggestionRules(
    type_half_life_days=dict(scoring.TYPE_HALF_LIFE_DAYS),
    relation_importance_step=scoring.RELATION_IMPORTANCE_STEP,
    relation_half_life_step=scoring.RELATION_HALF_LIFE_STEP,
    relation_cap=scoring.RELATION_CAP,
    hot_min_accesses=5,
    hot_window_days=7.0,
    fresh_window_days=7.0,
    stale_min_importance=0.7,
    stale_idle_days=30.0,
    decaying_below=0.5,
    access_boost_per_access=scoring.ACCESS_BOOST_PER_ACCESS,
    recency_scale_days=scoring.RECENCY_SCALE_DAYS,
)


class SuggestedService:
    def __init__(self, rules: SuggestionRules = RULES) -> None:
        self.rules = rules

    async def suggested(
        self, conn: asyncpg.Connection, f: SuggestionFilter, limit: int
    ) -> tuple[list[asyncpg.Record], dict[str, int], int]:
        """The page of suggestions, the count of every category, and the total matching."""
        rows, found = await repo.suggested(conn, f, self.rules, limit)
        counts: dict[str, int] = {name: found.get(name, 0) for name in CATEGORIES}
        total = counts[f.category] if f.category else sum(counts.values())
        return rows, counts, total
