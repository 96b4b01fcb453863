"""The free tier's answer: a wallet's free calls, used and left."""

from __future__ import annotations

from msgspec import Struct


class FreeTierStatus(Struct):
    wallet: str
    free_tier_remaining: int
    free_tier_total: int
    free_tier_used: int
