"""The 4-signal hybrid recall score (docs/api-contract.md, "Recall score").

    hybrid = vector_sim × 0.55 + keyword_match × 0.25 + recency × 0.20
    score  = hybrid × context_importance × access_boost × type_decay

Published by MemoClaw and used as is: the three weights, recency = exp(−age_days / 30),
access_boost = min(1 + access_count × 0.1, 2.0), and the per-type half-lives.

Left unpublished by MemoClaw, so Engram's own choices (documented in docs: concepts/recall.md too):
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
  end is live (app/memory/sql.py RELATION_COUNT), so deleting the memory at the other end
  takes the stretch (and the importance bonus above) away again.
- keyword_match = over the query's words the memory holds, the sum of each word's BM25 inverse
  document frequency less ln(the memory's passages), floored at 0 per word (app/memory/
  repository.py KEYWORD_FORMS: passages = its distinct lexemes / 60, about what MiniLM's
  256-token window reads, at least 1; the frequencies counted over the wallet's memories
  searched), divided by the best such sum among the recall's candidates: 1.0 for the best
  keyword match, 0..1 for the rest. A memory of one passage or less counts each word's full
  IDF; a memory of several holds common words by chance, which then count nothing (issue 37:
  BEAM R@10 0.434 -> 0.554, LoCoMo unchanged at 0.776; ENGRAM_RECALL_KEYWORD_PASSAGES=0
  restores the plain sum). Then × the share of the KEYWORD_AGREEMENT_TOP candidates nearest the
  query (by vector) that hold any of its words: where the nearest memories lack the query's
  words, the keyword side can only rank others (issue 37: BEAM 0.554 -> 0.558, instruction
  following 0.312 -> 0.338; LoCoMo unchanged; ENGRAM_RECALL_KEYWORD_AGREEMENT=0 turns it off).
  (An earlier form used ts_rank of the OR-ed words: bench/locomo.py,
  2 conversations, no access boost: R@10 0.600 with ts_rank_cd / (rank + 1), 0.673 with the
  normalised ts_rank; docs/pages/concepts/recall.md for the figures since.)

What counts as an access (access_count, and accessed_at, the decay timer): a use, not an
exposure. `GET /v1/memories/{id}` and `POST /v1/memories/{id}/feedback` count, at most once per
memory per ACCESS_COUNTED_ONCE_PER; recall and context blocks count nothing. MemoClaw counts
every memory a recall returns, and its boost then feeds on itself: agents recall on every turn,
so whatever came back most often outranks more relevant memories in later, unrelated recalls.
Measured on LoCoMo dev (760 questions asked in order, an auto-recall agent's workload, first
round only; R@5 / R@10): every returned memory counted 0.415 / 0.509; the top 3 returned
0.540 / 0.672; the top 3 with similarity >= 0.5 0.580 / 0.687; the top 1 with similarity >= 0.6
0.630 / 0.709; nothing counted 0.632 / 0.711 (the boost-off figure). Any exposure counted costs
recall, so none is. ENGRAM_RECALL_COUNTS_ACCESS=1 restores MemoClaw's accounting;
ENGRAM_RECALL_ACCESS_BOOST=0 fixes access_boost at 1.0.

After the 4-signal score, two steps of Engram's own (docs: concepts/recall.md):
- event time: a memory whose event time (occurred_at, app/memory/dates.py) falls in a time the
  query names ("in May 2023", "last week") has its score × (1 + EVENT_TIME_BOOST);
- second round: the first round's top SECOND_ROUND_SEEDS hits lead to the memories written right
  after them in their namespace and session (CONTINUATION_FOLLOW of them, within
  CONTINUATION_MAX_GAP: a conversation's next turns, where the answer to what matched usually
  is) and to the memories they are related to. Such a memory, `hops` away from a hit, scores
  max(its own score, CONTINUATION_DECAY ** hops × the hit's score): it ranks just below what
  led to it, unless it ranks higher on its own.
Both measured on the whole LoCoMo dev split (bench/locomo.py; fitted on conv-26/30/41, checked
on conv-42/43: docs/pages/concepts/recall.md).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import msgspec

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

# Recall's similarity floor when the request sets none, by embedding model: cosine scales differ
# (MiniLM's run lower than OpenAI's). MemoClaw publishes 0.5 for text-embedding-3-small. For
# MiniLM, LoCoMo dev (760 questions, every turn asked in the conversation's own wallet), R@10
# by floor: 0 0.766, 0.1 0.768, 0.15 0.769, 0.2 0.770, 0.25 0.760, 0.3 0.751, 0.4 0.667; and the
# results a question gets in another conversation's wallet (nothing there is about it), of 10:
# 10, 10, 9.9, 9.1, 7.3, 4.8, 1.1. 0.2 is the highest floor that costs no recall. potion-base-8M,
# the same way (bench/locomo.py --min-similarity F --foreign): R@10 / R@5 0 0.757 / 0.676, 0.1
# 0.757 / 0.676, 0.15 0.757 / 0.674, 0.2 0.752 / 0.671, 0.3 0.735 / 0.663, 0.4 0.614 / 0.563; in
# another wallet 10.0 at 0.1, 9.9 at 0.15, 9.5 at 0.2: its floor is 0.1, which cuts almost
# nothing (its cosines sit as MiniLM's do, median 0.263 / 0.268, but spread less, 0.083 / 0.105).
# Other embedders: no floor (their scale is unknown).
DEFAULT_MIN_SIMILARITY = {
    "all-MiniLM-L6-v2": 0.2,
    "potion-base-8M": 0.1,
    "text-embedding-3-small": 0.5,
}

# An access is counted at most once per memory per day (an agent reading the same memory in a
# loop does not pile up a boost).
ACCESS_COUNTED_ONCE_PER = timedelta(days=1)

# Event time named by the query: LoCoMo dev, whole split, R@10 of the first round 0.711 -> 0.721
# at 0.5 (0.716 at 0.1, 0.722 at 0.25, 0.720 at 1.0; flat from 0.25 up: a boost, not a filter).
EVENT_TIME_BOOST = 0.5

# A memory said by someone the query names (app/memory/speakers.py): fitted on LoCoMo
# conv-26/30/41, R@10 0.794 without, 0.801 at 0.25, 0.794 at 0.5; checked on conv-42/43: 0.748
# -> 0.750 (multi-hop 0.416 -> 0.428). 97 % of the evidence of a question naming one speaker
# was said by that speaker, 71 % of the top 10 without the boost.
SPEAKER_BOOST = 0.25

# Second round. CONTINUATION_DECAY fitted on LoCoMo conv-26/30/41 (R@10 0.768 / 0.780 / 0.789 /
# 0.783 at 0.75 / 0.8 / 0.85 / 0.9), then checked on conv-42/43 (0.698 -> 0.743). Seeds: the
# figures are the same from the top 5 to the top 20; following 2 turns (hops 1, 2) gained
# 0.744 -> 0.766 over 1; the turn before a hit, tried too, lowered R@5.
CONTINUATION_DECAY = 0.85
SECOND_ROUND_SEEDS = 10
# keyword side's weight: the share of this many nearest candidates holding a query word
KEYWORD_AGREEMENT_TOP = 10
CONTINUATION_FOLLOW = 2
# The next memory counts as a continuation only if written within this of the hit: a
# conversation is captured in one sitting; a memory stored days later is another story.
CONTINUATION_MAX_GAP = timedelta(hours=1)


class Signals(msgspec.Struct, frozen=True):
    """What a recall result's score is made of; sent as a result's `_signals`."""

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
    event_time_boost: float = 1.0  # × (1 + EVENT_TIME_BOOST) when the query names its time
    carried: float = 0.0  # the score a first-round hit passed on (second round), else 0
    speaker_boost: float = 1.0  # × (1 + SPEAKER_BOOST) when said by someone the query names
    # the reranker's relevance, when the rerank stage ordered this result (absent otherwise)
    rerank: float | msgspec.UnsetType = msgspec.UNSET

    def rounded(self) -> Signals:
        """The signals as the wire carries them: floats to 6 decimals (built positionally, 30 %
        less time than by name: it runs for every result of every recall)."""
        values: list[Any] = [
            round(v, 6) if type(v) is float else v for v in msgspec.structs.astuple(self)
        ]
        return Signals(*values)


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


def with_event_time(signals: Signals, in_query_window: bool) -> Signals:
    """The score × (1 + EVENT_TIME_BOOST) when the memory's event time is one the query names."""
    if not in_query_window:
        return signals
    boost = 1.0 + EVENT_TIME_BOOST
    return msgspec.structs.replace(signals, event_time_boost=boost, score=signals.score * boost)


def with_speaker(signals: Signals, said_by_named: bool) -> Signals:
    """The score × (1 + SPEAKER_BOOST) when someone the query names said the memory."""
    if not said_by_named:
        return signals
    boost = 1.0 + SPEAKER_BOOST
    return msgspec.structs.replace(signals, speaker_boost=boost, score=signals.score * boost)


def carried_score(seed_score: float, hops: int) -> float:
    """What a first-round hit passes on to a memory `hops` away from it."""
    return seed_score * CONTINUATION_DECAY**hops


def with_carried(signals: Signals, carried: float) -> Signals:
    """A second-round memory's signals: it scores the higher of its own and what it carried."""
    if carried <= signals.carried:
        return signals
    return msgspec.structs.replace(signals, carried=carried, score=max(signals.score, carried))


def with_rerank(signals: Signals, relevance: float) -> Signals:
    """A result the rerank stage ordered: its relevance by the reranker, beside its score."""
    return msgspec.structs.replace(signals, rerank=relevance)
