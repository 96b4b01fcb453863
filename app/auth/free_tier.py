"""The free tier: N free paid-endpoint calls per wallet (ENGRAM_FREE_TIER_CALLS, default 100)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from app.auth import repository
from app.auth.schemas import FreeTierStatus


@dataclass(frozen=True)
class FreeTier:
    calls_per_wallet: int

    async def remaining(self, conn: asyncpg.Connection, wallet: str) -> int:
        used = await repository.free_calls_used(conn, wallet)
        return max(self.calls_per_wallet - used, 0)

    async def consume(self, conn: asyncpg.Connection, wallet: str) -> int | None:
        """Use one free call; returns the calls left after it, or None if there were none."""
        used = await repository.consume_free_call(conn, wallet, self.calls_per_wallet)
        return None if used is None else self.calls_per_wallet - used

    async def status(self, conn: asyncpg.Connection, wallet: str) -> FreeTierStatus:
        used = min(await repository.free_calls_used(conn, wallet), self.calls_per_wallet)
        return FreeTierStatus(
            wallet=wallet,
            free_tier_remaining=self.calls_per_wallet - used,
            free_tier_total=self.calls_per_wallet,
            free_tier_used=used,
        )
