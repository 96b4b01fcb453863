"""The 4-signal hybrid recall score (memoclaw-api.md, "Recall: the 4-signal hybrid score").

    hybrid = vector_sim × 0.55 + keyword_match × 0.25 + recency × 0.20
    score  = hybrid × context_importance × access_boost × type_decay

Published by MemoClaw and used as is: the three weights, recency = exp(−age_days / 30),
access_boost = min(1 + access_count × 0.1, 2.0), and the per-type half-lives.

Left unpublished by MemoClaw, so Engram's own choices (documented in the README too):
- effective_importance = min(1, importance + 0.02 × min(relation_count, 10)): a memory other
  memories point at is a little more important.
- context_importance = effective_importance × (0.5 + 0.5 × relevance), floored at
  CONTEXT_IMPORTANCE_FLOOR, where relevance = (0.55 × vector_sim + 0.25 × keyword_match) / 0.8 is
  the query-dependent part of the hybrid score (bench/locomo.py, 2 conversations: R@10 0.673 with
  vector_sim alone as the relevance, 0.686 so). Importance counts fully only when the memory is
  about the query, so an important but off-topic memory does not outrank a relevant ordinary one
  (the "importance boosted by query relevance" MemoClaw describes). The floor keeps
  importance-0 memories recallable.
- type_decay = 0.5 ** (days_since_last_access / half_life), pinned memories exempt (1.0).
  The decay timer starts at the last access (accessed_at, which a recall resets), and each relation
  stretches the half-life by 10 % up to 2× (10 relations): connected memories decay slower.
  half_life = type_half_life × (1 + 0.10 × min(relation_count, 10)); e.g. a general memory
  untouched for 60 days keeps 0.5 with no relation, 0.5 ** (60 / 66) ≈ 0.53 with one, 0.5 ** (60 /
  120) ≈ 0.71 with ten. relation_count counts the memory's relations in both directions whose other
  end is live (app/memory/repository.py RELATION_COUNT), so deleting the memory at the other end
  takes the stretch (and the importance bonus above) away again.
- keyword_match = ts_rank(tsv, query) of the query's words OR-ed together, divided by the best
  such rank among the recall's candidates: 1.0 for the best keyword match, 0..1 for the rest.
  (bench/locomo.py, 2 conversations, no access boost: R@10 0.600 with ts_rank_cd / (rank + 1),
  0.673 so.)

Option (ENGRAM_RECALL_ACCESS_BOOST=0): access_boost fixed at 1.0. The contract's boost feeds on
itself: every recall raises the count of what it returned, which then outranks more relevant
memories in later, unrelated recalls. bench/locomo.py prints both figures.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import datetime

VECTOR_WEIGHT = 0.55
KEYWORD_WEIGHT = 0.25
RECENCY_WEIGHT = 0.20
RECENCY_SCALE_DAYS = 30.0
ACCESS_BOOST_PER_ACCESS = 0.1
ACCESS_BOOST_CAP = 2.0
TYPE_HALF_LIFE_DAYS = {
    "correction": 180.0,
    "preference": 180.0,
    "decision": 90.0,
    "project": 30.0,
    "observation": 14.0,
    "general": 60.0,
}
RELATION_IMPORTANCE_STEP = 0.02
RELATION_HALF_LIFE_STEP = 0.10
RELATION_CAP = 10
CONTEXT_IMPORTANCE_FLOOR = 0.05
SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Signals:
    vector: float
    keyword: float
    recency: float
    base_importance: float
    effective_importance: float
    context_importance: float
    relation_count: int
    type_decay: float
    access_boost: float
    score: float

    def to_wire(self) -> dict[str, float | int]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _days_between(later: datetime, earlier: datetime) -> float:
    return max((later - earlier).total_seconds(), 0.0) / SECONDS_PER_DAY


def recency(created_at: datetime, now: datetime) -> float:
    return math.exp(-_days_between(now, created_at) / RECENCY_SCALE_DAYS)


def access_boost(access_count: int) -> float:
    return min(1.0 + access_count * ACCESS_BOOST_PER_ACCESS, ACCESS_BOOST_CAP)


def effective_importance(importance: float, relation_count: int) -> float:
    return min(1.0, importance + RELATION_IMPORTANCE_STEP * min(relation_count, RELATION_CAP))


def query_relevance(vector_sim: float, keyword_match: float) -> float:
    """The query-dependent part of the hybrid score, rescaled to 0..1."""
    return (vector_sim * VECTOR_WEIGHT + keyword_match * KEYWORD_WEIGHT) / (
        VECTOR_WEIGHT + KEYWORD_WEIGHT
    )


def context_importance(effective: float, relevance: float) -> float:
    return max(effective * (0.5 + 0.5 * max(relevance, 0.0)), CONTEXT_IMPORTANCE_FLOOR)


def half_life_days(memory_type: str, relation_count: int) -> float:
    stretch = 1.0 + RELATION_HALF_LIFE_STEP * min(relation_count, RELATION_CAP)
    return TYPE_HALF_LIFE_DAYS.get(memory_type, TYPE_HALF_LIFE_DAYS["general"]) * stretch


def type_decay(
    memory_type: str, pinned: bool, last_access: datetime, relation_count: int, now: datetime
) -> float:
    if pinned:
        return 1.0
    # float ** float is typed Any (a negative base would give complex); the base here is 0.5.
    decay: float = 0.5 ** (
        _days_between(now, last_access) / half_life_days(memory_type, relation_count)
    )
    return decay


def score_memory(
    *,
    vector_sim: float,
    keyword_match: float,
    importance: float,
    memory_type: str,
    pinned: bool,
    created_at: datetime,
    accessed_at: datetime,
    access_count: int,
    relation_count: int,
    now: datetime,
    use_access_boost: bool = True,
) -> Signals:
    vector_sim = min(max(vector_sim, 0.0), 1.0)
    keyword_match = min(max(keyword_match, 0.0), 1.0)
    rec = recency(created_at, now)
    hybrid = vector_sim * VECTOR_WEIGHT + keyword_match * KEYWORD_WEIGHT + rec * RECENCY_WEIGHT
    eff = effective_importance(importance, relation_count)
    ctx = context_importance(eff, query_relevance(vector_sim, keyword_match))
    boost = access_boost(access_count) if use_access_boost else 1.0
    decay = type_decay(memory_type, pinned, accessed_at, relation_count, now)
    return Signals(
        vector=vector_sim,
        keyword=keyword_match,
        recency=rec,
        base_importance=importance,
        effective_importance=eff,
        context_importance=ctx,
        relation_count=relation_count,
        type_decay=decay,
        access_boost=boost,
        score=hybrid * ctx * boost * decay,
    )
