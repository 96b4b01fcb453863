"""The recall pipeline: embed the query, gather candidates (an exact scan of a small wallet's rows,
or a walk of the HNSW index), rank them (app/memory/ranking.py), follow the best ones'
continuations and relations (the second round), rerank when asked, hold back flagged memories
when asked, and count the accesses when configured."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import asyncpg
import numpy as np

from app.access.rules import OWNER, Actor
from app.ai.embedders import Embedder
from app.ai.rerank import Reranker, RerankUnavailable
from app.core.errors import InvalidInput
from app.db import settings_repository as db
from app.infra.metrics import phase
from app.memory.dates import now_utc
from app.memory.filters import MemoryFilter, recall_filter
from app.memory.ranking import Ranking, Recalled
from app.memory.repository import recall as repo
from app.memory.schemas import RecallIn
from app.memory.scoring import (
    CONTINUATION_FOLLOW,
    CONTINUATION_MAX_GAP,
    SECOND_ROUND_SEEDS,
    with_rerank,
)
from app.memory.sizes import RecentSizes

log = logging.getLogger("engram")

# Candidates gathered from each of the vector and keyword sides before scoring.
MIN_CANDIDATES_PER_SIDE = 50
CANDIDATES_PER_RESULT = 4
# Up to this many matching memories, recall scans them exactly instead of walking the HNSW graph:
# an exact scan of 2,000 vectors costs a few ms and is always right, while a graph walk for a
# small wallet in a big partition has to skip most nodes (calibration in docs/api-contract.md,
# "Measurements the code cites": forced HNSW 63 ms vs exact 1.3 ms for a 900-memory wallet among
# 1M rows).
EXACT_SCAN_MAX_ROWS = 2000
# The keyword side of a recall reads at most this many distinct words of the query, within this
# many characters (the search query's limit, docs/api-contract.md, "Limits"): PostgreSQL's
# text-search parser recurses per term, so 16,384 words overflowed its stack and 10,000 took
# 3.4 s. The vector side still embeds the whole query.
MAX_KEYWORD_TERMS = 64
MAX_KEYWORD_CHARS = 1000


class RecallResult(NamedTuple):
    recalled: list[Recalled]
    tokens: int  # the query's embedding tokens
    reranked: bool | None  # None: no rerank asked; False: asked, but no reranker answered
    held_back: int = 0  # flagged memories that ranked within the answer (exclude_flagged)


@dataclass(frozen=True)
class Rerank:
    """The rerank stage's configuration: the model (None: none configured), whether every
    recall uses it, and how many of the best candidates it orders."""

    model: Reranker | None = None
    by_default: bool = False
    candidates: int = 30


class RecallSetup(Protocol):
    """What a recall reads of the memory service (app/memory/service.py): its embedder, the
    size memo, and how it is configured (ENGRAM_RECALL_*)."""

    embedder: Embedder
    sizes: RecentSizes  # picks exact scans or index walks (app/memory/sizes.py)
    access_boost: bool
    recall_counts_access: bool  # MemoClaw's accounting: every recalled memory counts as used
    second_round: bool  # continuation and relations of the top hits
    event_time_boost: bool  # the time a query names
    speaker_boost: bool  # what the people a query names said
    keyword: str  # keyword_match's form (repository KEYWORD_FORMS)
    keyword_agreement: bool  # keyword side weighted by keyword_share
    passages: bool  # a long memory's vector_sim is its best window's
    rerank: Rerank
    default_min_similarity: float


def keyword_text(query: str) -> str:
    """The part of a recall query its keyword side searches: the query itself when short, else
    its first distinct words up to MAX_KEYWORD_TERMS and MAX_KEYWORD_CHARS."""
    words = query.split()
    if len(words) <= MAX_KEYWORD_TERMS and len(query) <= MAX_KEYWORD_CHARS:
        return query
    kept: list[str] = []
    size = 0
    for word in dict.fromkeys(words):
        size += len(word) + 1
        if len(kept) == MAX_KEYWORD_TERMS or size > MAX_KEYWORD_CHARS + 1:
            break
        kept.append(word)
    return " ".join(kept)


def held_back_from(
    ranked: list[Recalled], limit: int, exclude_flagged: bool | None
) -> tuple[list[Recalled], int]:
    """Without the flagged memories when asked, and how many of them ranked within the answer
    (the first `limit` unflagged ones and the flagged ones among them)."""
    if not exclude_flagged:
        return ranked, 0
    kept: list[Recalled] = []
    held = 0
    for item in ranked:
        if len(kept) == limit:
            break
        if item.row["flags"]:
            held += 1
        else:
            kept.append(item)
    return kept, held


async def recall(
    setup: RecallSetup,
    conn: asyncpg.Connection,
    wallet: str,
    req: RecallIn,
    actor: Actor = OWNER,
) -> RecallResult:
    """`actor` kept to a namespace: the memories and their relation counts are from there
    alone (the second round follows relations and continuations within `req`'s filter)."""
    if not req.query.strip():
        raise InvalidInput("query must not be blank", {"field": "query"})
    f = recall_filter(wallet, req, actor.kept_to)
    with phase("recall", "embed"):
        embedded = await setup.embedder.embed([req.query])
    vector = embedded.vectors[0]
    per_side = max(MIN_CANDIDATES_PER_SIDE, CANDIDATES_PER_RESULT * req.limit)
    keywords = keyword_text(req.query)
    with phase("recall", "sql"):
        rows = await _exact_candidates(setup, conn, f, vector, keywords, per_side)
        if rows is None:  # a big wallet, or a big share of one: the HNSW index's walk
            rows = await _index_candidates(setup, conn, f, vector, keywords, per_side)
    ranking = Ranking(
        req, now_utc(), setup.access_boost, setup.event_time_boost,
        setup.default_min_similarity, setup.speaker_boost, setup.keyword_agreement,
    )  # fmt: skip
    with phase("recall", "scoring"):
        ranked = ranking.first_round(rows)
    if setup.second_round and ranked:
        seeds = ranked[:SECOND_ROUND_SEEDS]
        with phase("recall", "sql"):
            followers = await repo.second_round_candidates(
                conn, f, [r.row["id"] for r in seeds], vector, keywords,
                repo.lexicon_of(rows), CONTINUATION_FOLLOW, CONTINUATION_MAX_GAP,
                setup.keyword,
            )  # fmt: skip
        with phase("recall", "scoring"):
            ranked = ranking.second_round(ranked, seeds, followers)
    ranked, reranked = await _reranked(setup.rerank, req, ranked)
    ranked, held_back = held_back_from(ranked, req.limit, req.exclude_flagged)
    ranked = ranked[: req.limit]
    if setup.recall_counts_access:
        with phase("recall", "sql"):
            await repo.record_access_each_time(conn, wallet, [r.row["id"] for r in ranked])
        ranked = [Recalled(r.row, r.signals, accesses_counted=1) for r in ranked]
    return RecallResult(ranked, embedded.tokens, reranked, held_back)


async def _reranked(
    rerank: Rerank, req: RecallIn, ranked: list[Recalled]
) -> tuple[list[Recalled], bool | None]:
    """The best candidates in the reranker's order (the rest after them, as they were), and
    whether that happened: None when not asked, False when asked but no reranker answered
    (recall keeps its own order)."""
    if not (req.rerank if req.rerank is not None else rerank.by_default):
        return ranked, None
    if rerank.model is None or not ranked:
        return ranked, rerank.model is not None
    head = ranked[: max(rerank.candidates, req.limit)]
    try:
        scores = await rerank.model.rerank(req.query, [r.row["content"] for r in head])
    except RerankUnavailable as exc:
        log.warning("recall without its rerank stage: %s", exc)
        return ranked, False
    order = sorted(range(len(head)), key=lambda i: scores[i], reverse=True)
    rescored = [
        Recalled(head[i].row, with_rerank(head[i].signals, scores[i]), head[i].accesses_counted)
        for i in order
    ]
    return rescored + ranked[len(head) :], True


async def _exact_candidates(
    setup: RecallSetup,
    conn: asyncpg.Connection,
    f: MemoryFilter,
    vector: np.ndarray,
    keywords: str,
    per_side: int,
) -> list[asyncpg.Record] | None:
    """The exact scan's candidates when at most EXACT_SCAN_MAX_ROWS memories match `f`,
    else None. Unless the size memo knows `f` to be bigger, the scan itself finds out (it
    stops at the cap + 1st row), with no count before it."""
    known = setup.sizes.recent_up_to(f, EXACT_SCAN_MAX_ROWS)
    if known is not None and known > EXACT_SCAN_MAX_ROWS:
        return None
    found = await repo.exact_candidates_within(
        conn, f, vector, keywords, per_side, EXACT_SCAN_MAX_ROWS, setup.keyword, setup.passages
    )
    setup.sizes.learnt_up_to(
        f, EXACT_SCAN_MAX_ROWS, found.matching if found else EXACT_SCAN_MAX_ROWS + 1
    )
    return found.rows if found else None


async def _index_candidates(
    setup: RecallSetup,
    conn: asyncpg.Connection,
    f: MemoryFilter,
    vector: np.ndarray,
    keywords: str,
    per_side: int,
) -> list[asyncpg.Record]:
    """The HNSW walk's candidates, with the IDF of a sample of the matching rows; an exact
    scan when filters starved the walk."""
    corpus = EXACT_SCAN_MAX_ROWS + 1
    await db.plan_for_the_parameters(conn)  # index scans want plans made for the size
    rows, vector_hits = await repo.recall_candidates(
        conn, f, vector, keywords, per_side, False, corpus, setup.keyword, setup.passages
    )
    if vector_hits < per_side:
        # Many rows match, yet the index scan came back short (filters starved it even with
        # iterative scanning): an exact scan returns the true top k.
        rows, _ = await repo.recall_candidates(
            conn, f, vector, keywords, per_side, True, corpus, setup.keyword, setup.passages
        )
    return rows
