"""Dates in text, for event time: explicit dates ("8 May, 2023", "May 2023", "2023-05-08") and
relative ones ("yesterday", "last week", "3 days ago", "last Friday"), each resolved to a span.

A memory's event time (`occurred_at`) and a recall query's date window both come from here:
- `event_time()`: when a stored memory's event happened: the client's `occurred_at`, or the
  first explicit date in the content (a chat line "[1:56 pm on 8 May, 2023] Ann: …" carries its
  session date), moved by a relative date in the content ("… I went there yesterday" → 7 May);
- `query_window()`: the time a query asks about ("what did Ann do in May 2023?", "last week"),
  relative dates counted back from the moment of the recall.

English only, day precision, no time of day: enough to match a question's date to a memory's,
which is all recall needs. What it does not read is left alone (no event time, no window), and
so is a date that falls outside the calendar Python and PostgreSQL share, years 1 to 9999 ("I
saw it 1000000 days ago", "5000 years ago", "this year" said in 9999): the text is kept as
written, that date is simply not used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, datetime, timedelta

MONTHS = {
    name: number
    for number, names in enumerate(
        [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
         ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
         ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
         ("december", "dec")],
        start=1,
    )
    for name in names
}  # fmt: skip
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3, "several": 3,
}  # fmt: skip
# How far back a month named without a year is looked for ("in June"): the last few Junes.
MONTH_WITHOUT_YEAR_LOOKBACK_YEARS = 10

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4,
             "4th": 4, "last": 0}  # fmt: skip
_ORDINAL = r"(?P<ordinal>" + "|".join(_ORDINALS) + ")"
_EXPLICIT = [
    # "the second week of November (2023)": first so that its month is not read alone
    re.compile(rf"\b{_ORDINAL}\s+week\s+of\s+{_MONTH}(?:,?\s+{_YEAR})?", re.I),
    re.compile(r"\b(?P<year>(?:19|20)\d{2})-(?P<mnum>[01]\d)-(?P<day>[0-3]\d)\b"),
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I),
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I),
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b", re.I),
    re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?!\s*(?:am|pm|:))", re.I),
    re.compile(rf"\b(?:in|during|since|of|throughout)\s+{_MONTH}(?!\s+\d)", re.I),
    re.compile(rf"\b(?:in|during|since|of|throughout)\s+{_YEAR}\b", re.I),
]
_COUNT = r"(?P<count>\d+|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + ")"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_RELATIVE = [
    ("today", re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", re.I)),
    ("yesterday", re.compile(r"\b(?:yesterday|last night)\b", re.I)),
    ("ago", re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+ago\b", re.I)),
    ("last", re.compile(r"\b(?:last|past|previous)\s+(?P<unit>week(?:end)?|month|year)\b", re.I)),
    ("weekday", re.compile(r"\blast\s+(?P<weekday>" + "|".join(WEEKDAYS) + r")\b", re.I)),
    ("this", re.compile(r"\bthis\s+(?P<unit>week(?:end)?|month|year)\b", re.I)),
    # "on the 15th": that day of the reference's month, or of the month before when it is
    # still to come (dates in a memory look back, like the rest of this list)
    ("day of month", re.compile(r"\bon\s+the\s+(?P<dom>[0-3]?\d)(?:st|nd|rd|th)\b", re.I)),
]
# "between August 11 and August 15 2023": one span from the first date to the second
_BETWEEN = re.compile(
    r"\bbetween\s+(?P<first>[^?!;]{3,40}?)\s+and\s+(?P<second>[^?!;]{3,40})", re.I
)


@dataclass(frozen=True)
class DateSpan:
    """A half-open UTC span [start, end) that a date expression names."""

    start: datetime
    end: datetime

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


# What date arithmetic raises past the calendar's ends (OverflowError from timedelta, ValueError
# from a year outside 1..9999 or a count of more digits than int() reads).
PAST_THE_CALENDAR = (OverflowError, ValueError)
LAST_MOMENT = datetime.max.replace(tzinfo=UTC)


def _day(year: int, month: int, day: int) -> datetime | None:
    try:
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None


def _first_of(year: int, month: int) -> datetime:
    """The first moment of a month; past the calendar's last year, its last moment (a span's
    end is open, so the last month's end is where the calendar ends)."""
    return LAST_MOMENT if year > MAXYEAR else datetime(year, month, 1, tzinfo=UTC)


def _month_span(year: int, month: int) -> DateSpan:
    start = datetime(year, month, 1, tzinfo=UTC)
    return DateSpan(start, _first_of(year + month // 12, month % 12 + 1))


def _year_span(year: int) -> DateSpan:
    return DateSpan(datetime(year, 1, 1, tzinfo=UTC), _first_of(year + 1, 1))


def _week_of_month(year: int, month: int, ordinal: int) -> DateSpan:
    """The nth seven days of a month (days 1-7, 8-14 ...); ordinal 0: its last seven."""
    whole = _month_span(year, month)
    if ordinal == 0:
        return DateSpan(max(whole.start, whole.end - timedelta(days=7)), whole.end)
    start = whole.start + timedelta(days=7 * (ordinal - 1))
    return DateSpan(start, min(start + timedelta(days=7), whole.end))


def _day_span(day: datetime) -> DateSpan:
    start = day.replace(hour=0, minute=0, second=0, microsecond=0)
    return DateSpan(start, _day_after(start))


def _day_after(start: datetime) -> datetime:
    """The next midnight, or the calendar's last moment on its last day."""
    return start + timedelta(days=1) if start.date() < LAST_MOMENT.date() else LAST_MOMENT


def _months_back(moment: datetime, months: int) -> tuple[int, int]:
    index = moment.year * 12 + moment.month - 1 - months
    return index // 12, index % 12 + 1


def _explicit(match: re.Match[str], reference: datetime | None, now: datetime) -> list[DateSpan]:
    """The span(s) an explicit date names; a date without a year takes the reference's year,
    or (no reference) the last few years' up to `now`."""
    parts = match.groupdict()
    month = (
        int(parts["mnum"]) if parts.get("mnum") else MONTHS.get((parts.get("month") or "").lower())
    )
    years = [int(parts["year"])] if parts.get("year") else (
        [reference.year] if reference else []
    )  # fmt: skip
    lookback = not years
    if lookback and month:
        years = [now.year - back for back in range(MONTH_WITHOUT_YEAR_LOOKBACK_YEARS)]
    spans = []
    for year in years:
        if month and parts.get("day"):
            day = _day(year, month, int(parts["day"]))
            if day:
                spans.append(_day_span(day))
        elif month and parts.get("ordinal"):
            spans.append(_week_of_month(year, month, _ORDINALS[parts["ordinal"].lower()]))
        elif month:
            spans.append(_month_span(year, month))
        else:
            spans.append(_year_span(year))
    if lookback:  # "in June" asked in February means a June gone by
        spans = [span for span in spans if span.start <= now]
    return spans


def _relative(kind: str, match: re.Match[str], reference: datetime) -> DateSpan | None:
    today = _day_span(reference).start
    parts = match.groupdict()
    unit = (parts.get("unit") or "").lower()
    if kind == "today":
        return _day_span(today)
    if kind == "yesterday":
        return _day_span(today - timedelta(days=1))
    if kind == "ago":
        raw = parts["count"].lower()
        count = int(raw) if raw.isdigit() else NUMBER_WORDS[raw]
        if unit in ("day", "week"):
            return _day_span(today - timedelta(days=count * (7 if unit == "week" else 1)))
        if unit == "year":
            return _year_span(today.year - count)
        return _month_span(*_months_back(today, count))
    if kind == "day of month":
        dom = int(parts["dom"])
        year, month = (today.year, today.month) if dom <= today.day else _months_back(today, 1)
        day = _day(year, month, dom)
        return _day_span(day) if day else None
    if kind == "weekday":
        back = (today.weekday() - WEEKDAYS.index(parts["weekday"].lower())) % 7 or 7
        return _day_span(today - timedelta(days=back))
    week_start = today - timedelta(days=today.weekday())
    if kind == "last":
        if unit == "weekend":  # the Saturday and Sunday before the reference's week
            return DateSpan(week_start - timedelta(days=2), week_start)
        if unit == "week":
            return DateSpan(week_start - timedelta(days=7), week_start)
        if unit == "month":
            return _month_span(*_months_back(today, 1))
        return _year_span(today.year - 1)
    if unit == "weekend":  # kind == "this"
        return DateSpan(week_start + timedelta(days=5), week_start + timedelta(days=7))
    if unit == "week":
        return DateSpan(week_start, week_start + timedelta(days=7))
    if unit == "month":
        return _month_span(today.year, today.month)
    return _year_span(today.year)


def _explicit_or_none(
    match: re.Match[str], reference: datetime | None, now: datetime
) -> list[DateSpan]:
    try:
        return _explicit(match, reference, now)
    except PAST_THE_CALENDAR:  # a reference at the calendar's end: "in December" in 9999
        return []


def explicit_dates(
    text: str, reference: datetime | None = None, now: datetime | None = None
) -> list[DateSpan]:
    """Every explicit date in `text`, in order of appearance (overlapping matches dropped); a
    month named without a year counts back from `now` (default: the current time)."""
    now = now or datetime.now(UTC)
    found: list[tuple[int, int, list[DateSpan]]] = []
    for pattern in _EXPLICIT:
        for match in pattern.finditer(text):
            if any(s < match.end() and match.start() < e for s, e, _ in found):
                continue
            # kept even when empty: "31 February, 2023" is no date, not "February 2023"
            found.append((match.start(), match.end(), _explicit_or_none(match, reference, now)))
    return [span for _, _, spans in sorted(found, key=lambda f: f[0]) for span in spans]


def relative_date(text: str, reference: datetime) -> DateSpan | None:
    """The first relative date in `text` ("yesterday", "2 weeks ago"), resolved against
    `reference`."""
    hits = []
    for kind, pattern in _RELATIVE:
        match = pattern.search(text)
        if match:
            hits.append((match.start(), kind, match))
    if not hits:
        return None
    _, kind, match = min(hits, key=lambda h: h[0])
    try:
        return _relative(kind, match, reference)
    except PAST_THE_CALENDAR:  # "1000000 days ago": no date, not an error
        return None


@dataclass(frozen=True)
class EventTime:
    """When a memory's event happened (`occurred_at`) and when it was said or written
    (`mentioned_at`, what its relative dates count from); equal unless a relative date moved
    the event."""

    occurred_at: datetime
    mentioned_at: datetime

    def meets(self, spans: list[DateSpan]) -> bool:
        """Whether the days from one to the other meet any of `spans`."""
        first = min(self.occurred_at, self.mentioned_at)
        last = _day_span(max(self.occurred_at, self.mentioned_at)).end
        return any(span.start < last and first < span.end for span in spans)


def event_time(content: str, occurred_at: datetime | None, stored_at: datetime) -> EventTime | None:
    """When the memory's event happened: its reference time (the client's `occurred_at`, else
    the content's first explicit date), moved by a relative date in the content; a relative
    date with no reference counts back from the time of storing. None when nothing says."""
    explicit = explicit_dates(content, now=stored_at)
    reference = occurred_at or (explicit[0].start if explicit else None)
    relative = relative_date(content, reference or stored_at)
    if relative is not None:
        return EventTime(relative.start, reference or stored_at)
    return EventTime(reference, reference) if reference is not None else None


def between_dates(query: str, now: datetime) -> DateSpan | None:
    """ "between A and B": the span from A's start to B's end; A without a year takes B's
    ("between August 11 and August 15 2023"). None unless both ends are dates."""
    match = _BETWEEN.search(query)
    if match is None:
        return None
    last = explicit_dates(match["second"], now=now)
    if not last:
        return None
    first = explicit_dates(match["first"], reference=last[0].start, now=now)
    if not re.search(_YEAR, match["first"]):  # A's year is B's
        first = explicit_dates(f"{match['first']} {last[0].start.year}", now=now) or first
    if not first or first[0].start >= last[-1].end:
        return None
    return DateSpan(first[0].start, last[-1].end)


# A question that asks for a time: "When did ...", "What year ...", "Since when ...".
_ASKS_WHEN = re.compile(
    r"^\W*(?:when\b|since when\b|how long ago\b|(?:what|which)\s+(?:date|day|year|month|week)\b)",
    re.I,
)


def asks_when(query: str) -> bool:
    """Whether the query asks when something happened."""
    return _ASKS_WHEN.search(query) is not None


def query_window(query: str, now: datetime) -> list[DateSpan]:
    """The spans a query asks about: a span between two dates, else its explicit dates, else
    its first relative date counted back from `now`. Empty when the query names no time."""
    between = between_dates(query, now)
    if between is not None:
        return [between]
    explicit = explicit_dates(query, now=now)
    if explicit:
        return explicit
    relative = relative_date(query, now)
    return [relative] if relative else []


def now_utc() -> datetime:
    """The moment memory's rules count from: a store's relative dates and expiry, a recall's
    window, a list's `7d`."""
    return datetime.now(UTC)
