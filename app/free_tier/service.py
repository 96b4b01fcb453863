"""The free tier: N free paid-endpoint calls per wallet (ENGRAM_FREE_TIER_CALLS, default 100).

The count lives in the wallets table and only `consume` changes it, atomically, just before the
request commits: that is what decides whether a call was free. How many calls a wallet has left
is also read before a call (to answer 402 before doing the work) and for the
x-free-tier-remaining header of every answer; a process remembers what it last learnt of each
wallet for a second (`RecentCounts`) instead of reading it on each request, which saved one
statement per request. What that memo can get wrong, and why it is harmless:
- it can say calls are left when another process or instance has just used the last ones: the
  handler runs, `consume` finds none, and the call is answered 402 and rolled back, as if the
  402 had come first (no free work is kept);
- a header can show up to a second's worth of another process's calls too many.
A memo of "none left" is never trusted (an operator may give calls back): that is read again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg

from app.core.recent import RecentValues
from app.free_tier import repository
from app.free_tier.schemas import FreeTierStatus
from app.infra import metrics

MEMO_SECONDS = 1.0
MEMO_WALLETS = 10_000


class RecentCounts:
    """The free calls each wallet had left when this process last learnt it, for `max_age`."""

    def __init__(
        self,
        max_age: float = MEMO_SECONDS,
        max_wallets: int = MEMO_WALLETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._memo: RecentValues[str, int] = RecentValues(max_age, max_wallets, clock)

    def calls_left(self, wallet: str) -> int | None:
        """The remembered count if it is recent and not zero, else None (read it)."""
        left = self._memo.recent(wallet)
        return left if left is not None and left > 0 else None

    def learnt(self, wallet: str, left: int) -> None:
        self._memo.learnt(wallet, left)


@dataclass(frozen=True)
class FreeTier:
    calls_per_wallet: int
    recent: RecentCounts = field(default_factory=RecentCounts, compare=False)

    async def remaining(self, conn: asyncpg.Connection, wallet: str) -> int:
        """The wallet's free calls left: as recently learnt, else read."""
        known = self.recent.calls_left(wallet)
        if known is not None:
            return known
        used = await repository.free_calls_used(conn, wallet)
        left = max(self.calls_per_wallet - used, 0)
        self.recent.learnt(wallet, left)
        return left

    async def consume(self, conn: asyncpg.Connection, wallet: str) -> int | None:
        """Use one free call; returns the calls left after it, or None if there were none."""
        used = await repository.consume_free_call(conn, wallet, self.calls_per_wallet)
        left = None if used is None else self.calls_per_wallet - used
        if left is not None:
            metrics.FREE_CALLS.inc()
        self.recent.learnt(wallet, left or 0)
        return left

    async def status(self, conn: asyncpg.Connection, wallet: str) -> FreeTierStatus:
        used = min(await repository.free_calls_used(conn, wallet), self.calls_per_wallet)
        self.recent.learnt(wallet, self.calls_per_wallet - used)
        return FreeTierStatus(
            wallet=wallet,
            free_tier_remaining=self.calls_per_wallet - used,
            free_tier_total=self.calls_per_wallet,
            free_tier_used=used,
        )
