"""Usage: what a wallet's metered calls were, per day and endpoint, and what it paid, from
Engram's own records (usage_daily, written in each metered call's transaction, and the payments
ledger). Free routes (list, get, ...) are not metered and not counted."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import asyncpg

from app.core.errors import InvalidInput
from app.free_tier.service import FreeTier
from app.usage import repository
from app.usage.schemas import Usage, UsageDay, UsageTotals

# A report covers at most this many days (a year and a day: a leap year's worth).
MAX_DAYS = 366
DEFAULT_DAYS = 30
BUCKETS = ("day",)
_CONVERTER = re.compile(r":[a-z]+}")


def endpoint_label(method: str, path_template: str) -> str:
    """`PATCH /v1/memories/{memory_id}`: the route, never the path (ids would make every call
    its own endpoint)."""
    return f"{method} {_CONVERTER.sub('}', path_template)}"


def parse_day(value: str | None, field: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise InvalidInput(f"{field} must be a date, YYYY-MM-DD", {"field": field}) from exc


def report_days(first: str | None, last: str | None, bucket: str) -> tuple[date, date]:
    """The [from, to] days a report covers, checked: to defaults to today (UTC), from to the
    30 days ending there. Each default is worked out only when its parameter is missing, and a
    default that would fall before year 1 (`to=0001-01-01` alone) is a 422, as is any day
    Python's calendar cannot hold (`0000-...`, `10000-...`, 29 February of a common year)."""
    if bucket not in BUCKETS:
        raise InvalidInput(f"bucket must be one of {', '.join(BUCKETS)}", {"field": "bucket"})
    to = parse_day(last, "to") or datetime.now(UTC).date()
    start = parse_day(first, "from")
    if start is None:
        try:
            start = to - timedelta(days=DEFAULT_DAYS - 1)
        except OverflowError as exc:
            raise InvalidInput(
                f"from defaults to {DEFAULT_DAYS} days ending at to, which would start before"
                " year 1: give from",
                {"field": "from"},
            ) from exc
    if start > to:
        raise InvalidInput("from must not be after to", {"field": "from"})
    if (to - start).days + 1 > MAX_DAYS:
        raise InvalidInput(f"a report covers at most {MAX_DAYS} days", {"field": "from"})
    return start, to


class UsageService:
    def __init__(self, free_tier: FreeTier, decimals: int) -> None:
        self.free_tier = free_tier
        self.unit = Decimal(10) ** decimals  # atomic units per USDC

    async def count_call(
        self, conn: asyncpg.Connection, wallet: str, endpoint: str, paid: bool
    ) -> None:
        await repository.count_call(conn, wallet, endpoint, paid)

    async def report(
        self, conn: asyncpg.Connection, wallet: str, first: date, last: date, bucket: str
    ) -> Usage:
        calls = await repository.calls_by_day(conn, wallet, first, last)
        paid = {r["day"]: Decimal(r["amount"]) for r in await repository.paid_by_day(
            conn, wallet, first, last
        )}  # fmt: skip
        days = {
            first + timedelta(days=n): UsageDay(str(first + timedelta(days=n)), {}, 0, 0, "0")
            for n in range((last - first).days + 1)
        }
        for row in calls:
            day = days[row["day"]]
            day.calls[row["endpoint"]] = row["free_calls"] + row["paid_calls"]
            day.free_calls += row["free_calls"]
            day.paid_calls += row["paid_calls"]
        for when, amount in paid.items():
            days[when].paid_usdc = self.usdc(amount)
        listed = list(days.values())
        return Usage(
            free_tier=await self.free_tier.status(conn, wallet),
            days=listed,
            totals=UsageTotals(
                calls=sum(d.free_calls + d.paid_calls for d in listed),
                free_calls=sum(d.free_calls for d in listed),
                paid_calls=sum(d.paid_calls for d in listed),
                paid_usdc=self.usdc(sum(paid.values(), Decimal(0))),
            ),
            to=str(last),
            bucket=bucket,
            from_=str(first),
        )

    def usdc(self, atomic: Decimal) -> str:
        return format((atomic / self.unit).normalize(), "f")
