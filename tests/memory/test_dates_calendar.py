"""Dates read out of text never fail, whatever the text says: a date past the calendar's ends
(years 1..9999) is no date, and the rest of the text is read as usual (app/memory/dates.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.memory.dates import EventTime, event_time, explicit_dates, query_window, relative_date

FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)
NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)

# Counts that overflow each unit's arithmetic, and counts int() cannot read (over 4,300 digits).
HUGE_COUNTS = ["1000000", "3652059", "999999999999", "9" * 30, "9" * 5000]
UNITS = ["day", "days", "week", "weeks", "month", "months", "year", "years"]
# Every relative form the reader knows, resolved against a reference at either calendar end.
RELATIVE_FORMS = [
    "today", "yesterday", "last night", "3 days ago", "a week ago", "2 months ago",
    "5 years ago", "last week", "last weekend", "last month", "last year", "last friday",
    "this week", "this weekend", "this month", "this year",
]  # fmt: skip
EXPLICIT_FORMS = ["in December", "on 31 December", "December 31", "in 2023", "May 2023"]


@pytest.mark.parametrize("count", HUGE_COUNTS)
@pytest.mark.parametrize("unit", UNITS)
def test_a_count_past_the_calendar_is_no_date(count: str, unit: str) -> None:
    text = f"I saw it {count} {unit} ago"
    assert relative_date(text, NOW) is None
    assert query_window(text, NOW) == []
    assert event_time(text, None, NOW) is None


@pytest.mark.parametrize("reference", [FIRST, LAST, LAST - timedelta(days=3)], ids=str)
@pytest.mark.parametrize("form", RELATIVE_FORMS + EXPLICIT_FORMS)
def test_dates_counted_from_the_calendars_ends_answer(reference: datetime, form: str) -> None:
    """A client's occurred_at may be any valid instant, the first or the last one included."""
    found = event_time(f"we met {form}", reference, NOW)
    assert found is None or FIRST <= found.occurred_at <= LAST
    query_window(f"what happened {form}?", reference)
    explicit_dates(f"we met {form}", reference=reference, now=reference)


def test_an_unresolvable_date_leaves_the_texts_other_dates_in_use() -> None:
    """Only the date that cannot be resolved is dropped: the explicit date beside it counts."""
    found = event_time("[8 May, 2023] I saw it 1000000 days ago", None, NOW)
    assert found == EventTime(datetime(2023, 5, 8, tzinfo=UTC), datetime(2023, 5, 8, tzinfo=UTC))
    window = query_window("what did I see in May 2023, 1000000 days ago?", NOW)
    assert window and window[0].start == datetime(2023, 5, 1, tzinfo=UTC)


def test_an_event_on_the_calendars_last_day_meets_a_window() -> None:
    evening = LAST - timedelta(hours=1)
    last_day = EventTime(evening, evening)
    assert last_day.meets(query_window("what happened this year?", LAST)) is True
    assert last_day.meets(query_window("and today?", LAST)) is True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.lists(
        st.one_of(
            st.sampled_from(RELATIVE_FORMS + EXPLICIT_FORMS),
            st.builds(
                lambda n, u: f"{n} {u} ago",
                st.integers(min_value=0, max_value=10**12),
                st.sampled_from(UNITS),
            ),
            st.text(max_size=20),
        ),
        max_size=5,
    ).map(" ".join),
    reference=st.none() | st.datetimes(timezones=st.just(UTC)),
    now=st.datetimes(timezones=st.just(UTC)),
)
def test_reading_dates_never_raises(text: str, reference: datetime | None, now: datetime) -> None:
    found = event_time(text, reference, now)
    if found is not None:
        found.meets(query_window(text, now))
    query_window(text, now)
