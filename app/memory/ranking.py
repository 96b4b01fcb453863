"""One recall's ranking of its candidates: the 4-signal score of each (app/memory/scoring.py), the
event-time and speaker boosts, the keyword side's weight (`keyword_share`), and the second
round's carried scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from app.memory.dates import EventTime, asks_when, query_window
from app.memory.schemas import RecallIn
from app.memory.scoring import (
    KEYWORD_AGREEMENT_TOP,
    Signals,
    carried_score,
    score_memory,
    with_carried,
    with_event_time,
    with_speaker,
)
from app.memory.speakers import named_in, speaker_of


@dataclass
class Recalled:
    row: asyncpg.Record
    signals: Signals
    accesses_counted: int = 0  # what this recall added to access_count (MemoClaw's accounting)


class Ranking:
    """One recall's scoring: the 4-signal score of each candidate, the event-time boost, and
    the second round's carried scores (app/memory/scoring.py)."""

    def __init__(
        self,
        req: RecallIn,
        now: datetime,
        access_boost: bool,
        event_time_boost: bool,
        default_min_similarity: float,
        speaker_boost: bool = True,
        keyword_agreement: bool = True,
    ) -> None:
        self.keyword_agreement = keyword_agreement
        self.min_similarity = (
            req.min_similarity if req.min_similarity is not None else default_min_similarity
        )
        self.now = now
        self.access_boost = access_boost
        self.window = query_window(req.query, now) if event_time_boost else []
        # a "when" question is answered by a memory that says when its event happened
        self.wants_dated = event_time_boost and asks_when(req.query)
        # who the query names: a memory said by one of them is about them
        self.names = named_in(req.query) if speaker_boost else set()
        self.best_keyword = 0.0
        self.keyword_share = 1.0

    def _passes(self, row: asyncpg.Record) -> bool:
        return self.min_similarity <= 0 or float(row["vector_sim"]) >= self.min_similarity

    def _in_window(self, row: asyncpg.Record) -> bool:
        """The memory's event time meets the time the query names, or the query asks when and
        the memory says when."""
        if self.wants_dated and _says_when(row):
            return True
        if not self.window or row["occurred_at"] is None:
            return False
        said = row["mentioned_at"] or row["occurred_at"]
        return EventTime(row["occurred_at"], said).meets(self.window)

    def _score(self, row: asyncpg.Record) -> Signals:
        signals = _signals_of(
            row, self.now, self.best_keyword / self.keyword_share, self.access_boost
        )
        signals = with_event_time(signals, self._in_window(row))
        return with_speaker(signals, self._said_by_named(row))

    def _said_by_named(self, row: asyncpg.Record) -> bool:
        """The memory is a line said by someone the query names ("What books has John read?"
        and "[8 May, 2023] John: I'm reading Dune")."""
        if not self.names:
            return False
        said_by = speaker_of(row["content"])
        return said_by is not None and said_by in self.names

    def first_round(self, rows: list[asyncpg.Record]) -> list[Recalled]:
        # keyword_match is relative to the best among the first round's candidates
        self.best_keyword = max((float(r["keyword_match"]) for r in rows), default=0.0)
        self.keyword_share = keyword_share(rows) if self.keyword_agreement else 1.0
        scored = [Recalled(row, self._score(row)) for row in rows if self._passes(row)]
        return sorted(scored, key=lambda r: r.signals.score, reverse=True)

    def second_round(
        self, ranked: list[Recalled], seeds: list[Recalled], followers: list[asyncpg.Record]
    ) -> list[Recalled]:
        """Fuse what the seeds led to into one ranking: each memory scores the higher of its
        own score and the best score a seed carried to it."""
        by_id = {r.row["id"]: r for r in ranked}
        seed_score = {s.row["id"]: s.signals.score for s in seeds}
        for row in followers:
            if not self._passes(row):
                continue
            found = by_id.get(row["id"]) or Recalled(row, self._score(row))
            carried = carried_score(seed_score[row["seed_id"]], int(row["hops"]))
            by_id[row["id"]] = Recalled(found.row, with_carried(found.signals, carried))
        return sorted(by_id.values(), key=lambda r: r.signals.score, reverse=True)


def keyword_share(rows: Sequence[asyncpg.Record]) -> float:
    """The share of the KEYWORD_AGREEMENT_TOP candidates nearest the query (by vector) that
    hold any of its words: the keyword side's weight in this recall. A query whose words the
    memories nearest it lack (a question whose evidence shares no word with it) is one where
    the keyword side ranks other memories, so it counts less (issue 37)."""
    nearest = sorted(rows, key=lambda r: float(r["vector_sim"]), reverse=True)
    nearest = nearest[:KEYWORD_AGREEMENT_TOP]
    if not nearest:
        return 1.0
    held = sum(float(r["keyword_match"]) > 0 for r in nearest) / len(nearest)
    return max(held, 1e-9)  # it divides the best keyword match: none held, keyword_match ~0


def _says_when(row: asyncpg.Record) -> bool:
    """The memory dates its event itself: a relative date moved it from when it was said."""
    said = row["mentioned_at"]
    return said is not None and row["occurred_at"] is not None and said != row["occurred_at"]


def _signals_of(
    row: asyncpg.Record, now: datetime, best_keyword: float, access_boost: bool
) -> Signals:
    keyword = float(row["keyword_match"])
    return score_memory(
        vector_sim=float(row["vector_sim"]),
        # relative to the best keyword match among the candidates: 1.0 for the best
        keyword_match=keyword / best_keyword if best_keyword > 0 else 0.0,
        importance=float(row["importance"]),
        memory_type=row["memory_type"],
        pinned=row["pinned"],
        created_at=row["created_at"],
        accessed_at=row["accessed_at"],
        access_count=int(row["access_count"]),
        relation_count=int(row["relation_count"]),
        now=now,
        use_access_boost=access_boost,
    )
