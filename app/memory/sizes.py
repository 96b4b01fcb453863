"""How many memories a filter matches, as this process recently counted: it picks a plan
(an exact scan of a small wallet's rows, or a walk of the HNSW index for a big one), never an
answer, so a count a few seconds old is as good as a fresh one and saves a statement per store.
Recall needs no count of its own: its exact scan stops at the cap + 1st row and says how many it
read (`learnt_up_to`), so the memo only sends a filter known to be bigger straight to the index.

What a stale count can do, and why it is harmless:
- a dedup over a wallet just grown past the threshold is scanned exactly a little longer: exact
  is always the true answer, only slower (recall's scan finds out by itself);
- a wallet just shrunk below it walks the index, as every big wallet does, and recall falls
  back to the exact scan when the walk comes back short.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import asyncpg

from app.core.recent import RecentValues
from app.memory.filters import MemoryFilter
from app.memory.repository import reads

MEMO_SECONDS = 5.0
MEMO_FILTERS = 10_000


class RecentSizes:
    """Counts (capped, as `count_up_to` gives them) by filter, each trusted for `max_age`."""

    def __init__(
        self,
        max_age: float = MEMO_SECONDS,
        max_filters: int = MEMO_FILTERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._memo: RecentValues[str, int] = RecentValues(max_age, max_filters, clock)

    async def count(self, key: str, count: Callable[[], Awaitable[int]]) -> int:
        """The remembered count for `key` if recent, else `count()`, remembered."""
        known = self._memo.recent(key)
        if known is not None:
            return known
        counted = await count()
        self._memo.learnt(key, counted)
        return counted

    async def count_up_to(self, conn: asyncpg.Connection, f: MemoryFilter, cap: int) -> int:
        """How many memories `f` matches, counted no further than `cap` + 1 (so "more than
        `cap`" shows): as recently counted for that filter and cap, else counted now."""
        return await self.count(_key(f, cap), lambda: reads.count_up_to(conn, f, cap + 1))

    def recent_up_to(self, f: MemoryFilter, cap: int) -> int | None:
        """`count_up_to`'s answer if it is recent, else None (nothing is counted)."""
        return self._memo.recent(_key(f, cap))

    def learnt_up_to(self, f: MemoryFilter, cap: int, matching: int) -> None:
        """A count of `f` up to `cap` + 1 that a statement made on the way (an exact scan)."""
        self._memo.learnt(_key(f, cap), min(matching, cap + 1))


def _key(f: MemoryFilter, cap: int) -> str:
    return repr((f, cap))
