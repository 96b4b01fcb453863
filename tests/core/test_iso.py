"""`iso()` writes a time as `isoformat()` does with UTC's `+00:00` as `Z`, which is what the
wire carried before it used msgspec's encoder: any instant, any offset, naive or not, with or
without a fraction of a second."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

from app.core.schemas import iso

OFFSETS = [UTC, timezone(timedelta(0)), timezone(timedelta(hours=2)),
           timezone(timedelta(hours=-5, minutes=-30)), None]  # fmt: skip


def as_before(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def test_iso_writes_what_isoformat_wrote() -> None:
    rng = random.Random(40)
    for _ in range(5000):
        value = datetime(
            rng.randint(1, 9999), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
            rng.randint(0, 59), rng.randint(0, 59),
            rng.choice([0, 10, 500_000, rng.randint(0, 999_999)]), tzinfo=rng.choice(OFFSETS),
        )  # fmt: skip
        assert iso(value) == as_before(value)
    assert iso(datetime(2026, 12, 6, 7, 22, 22, tzinfo=UTC)) == "2026-12-06T07:22:22Z"
    assert iso(None) is None
