"""Wire structs for GET /v1/usage."""

from __future__ import annotations

from msgspec import Struct, field

from app.free_tier.schemas import FreeTierStatus


class UsageDay(Struct):
    day: str  # YYYY-MM-DD, UTC
    calls: dict[str, int]  # metered calls by endpoint ("POST /v1/store")
    free_calls: int
    paid_calls: int
    paid_usdc: str  # settled payments, in USDC, as a decimal string


class UsageTotals(Struct):
    calls: int
    free_calls: int
    paid_calls: int
    paid_usdc: str


class Usage(Struct):
    """The wallet's metered calls and payments over [from, to], one entry per day (empty days
    included), and its free tier now."""

    free_tier: FreeTierStatus
    days: list[UsageDay]
    totals: UsageTotals
    to: str
    bucket: str
    from_: str = field(name="from")
