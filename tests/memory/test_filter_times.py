"""Filter bounds as MemoClaw's CLI writes them: ISO 8601, or relative (`7d`: seven days ago)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.core.errors import InvalidInput
from app.memory.schemas import parse_metadata_filter, parse_moment

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "ago"),
    [
        ("30m", timedelta(minutes=30)),
        ("1h", timedelta(hours=1)),
        ("1d", timedelta(days=1)),
        ("2w", timedelta(weeks=2)),
        ("1mo", timedelta(days=30)),
        ("1y", timedelta(days=365)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_relative_times_count_back_from_now(text: str, ago: timedelta) -> None:
    assert parse_moment(text, "since", NOW) == NOW - ago


def test_iso_times_and_the_cli_s_own_iso_form() -> None:
    assert parse_moment("2026-11-30T00:00:00.000Z", "since", NOW) == datetime(
        2026, 11, 30, tzinfo=UTC
    )
    assert parse_moment("2026-11-30", "since", NOW) == datetime(2026, 11, 30, tzinfo=UTC)
    assert parse_moment(None, "since", NOW) is None


@pytest.mark.parametrize("text", ["yesterday", "-1d", "1x", "d", "999999y", "2026-13-01"])
def test_anything_else_is_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_moment(text, "since", NOW)


def test_metadata_filter_is_an_object_within_the_metadata_limits() -> None:
    assert parse_metadata_filter('{"source":"slack"}', "metadata") == {"source": "slack"}
    assert parse_metadata_filter({"a": 1}, "metadata") == {"a": 1}
    assert parse_metadata_filter(None, "metadata") is None
    for bad in ("[1]", "{not json", '"text"', {"k": "a\x00b"}, {f"k{i}": i for i in range(21)}):
        with pytest.raises(InvalidInput):
            parse_metadata_filter(bad, "metadata")
