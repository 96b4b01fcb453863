"""Recall's own steps after the 4-signal score: dates read from text, the event time of a memory
(stored, filtered on, boosted when the query names it) and the second round (a hit's next turns
and relations)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import asyncpg
import numpy as np
import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.config import LOCAL_EMBED_DIMS
from app.memory.dates import (
    DateSpan,
    EventTime,
    asks_when,
    event_time,
    explicit_dates,
    query_window,
)
from app.memory.filters import MemoryFilter
from app.memory.repository import recall as memory_repository
from app.memory.scoring import CONTINUATION_FOLLOW, CONTINUATION_MAX_GAP
from tests.support.api import auth, store_memory

NOW = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)  # a Tuesday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


# ---- dates in text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("[1:56 pm on 8 May, 2023] Ann: hi", day(2023, 5, 8), day(2023, 5, 9)),
        ("the launch is on May 8, 2023 at noon", day(2023, 5, 8), day(2023, 5, 9)),
        ("deployed 2024-02-29 after review", day(2024, 2, 29), day(2024, 3, 1)),
        ("what happened in October 2023?", day(2023, 10, 1), day(2023, 11, 1)),
        ("the 3rd of June, 2023", day(2023, 6, 3), day(2023, 6, 4)),
        ("budget for 2025 was set", None, None),  # a bare number is not read as a year
        ("during 2025 we grew", day(2025, 1, 1), day(2026, 1, 1)),
    ],
)
def test_explicit_dates(text: str, start: datetime | None, end: datetime | None) -> None:
    found = explicit_dates(text)
    assert (found[0] if found else None) == (DateSpan(start, end) if start and end else None)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("in the second week of November 2023", day(2023, 11, 8), day(2023, 11, 15)),
        ("the first week of May, 2023", day(2023, 5, 1), day(2023, 5, 8)),
        ("the last week of February 2024", day(2024, 2, 23), day(2024, 3, 1)),
    ],
)
def test_a_week_of_a_month(text: str, start: datetime, end: datetime) -> None:
    assert explicit_dates(text) == [DateSpan(start, end)]  # not the whole month besides


def test_an_invalid_calendar_date_is_not_a_date() -> None:
    assert explicit_dates("on 31 February, 2023") == []


@pytest.mark.parametrize(
    ("content", "occurred", "said"),
    [
        # the content's own date is when it was said; "yesterday" moves the event
        ("[1:56 pm on 8 May, 2023] Ann: I went to the support group yesterday",
         day(2023, 5, 7), day(2023, 5, 8)),
        ("[8 May, 2023] Ann: we went camping last weekend", day(2023, 5, 6), day(2023, 5, 8)),
        ("[8 May, 2023] Ann: I moved here 4 years ago", day(2019, 1, 1), day(2023, 5, 8)),
        ("[8 May, 2023] Ann: two weeks ago I ran a marathon", day(2023, 4, 24), day(2023, 5, 8)),
        ("[8 May, 2023] Ann: last Friday was fun", day(2023, 5, 5), day(2023, 5, 8)),
        ("[8 May, 2023] Ann: hello there", day(2023, 5, 8), day(2023, 5, 8)),
        # no date in the text: a relative one counts back from the time of storing
        ("I fixed the boiler yesterday", day(2026, 11, 30), NOW),
    ],
)  # fmt: skip
def test_event_time_of_a_memory(content: str, occurred: datetime, said: datetime) -> None:
    assert event_time(content, None, NOW) == EventTime(occurred, said)


def test_event_time_counts_from_the_clients_time_first() -> None:
    given = datetime(2024, 3, 10, 9, 30, tzinfo=UTC)
    assert event_time("we met Bob yesterday", given, NOW) == EventTime(day(2024, 3, 9), given)
    assert event_time("[8 May, 2023] plain note", given, NOW) == EventTime(given, given)
    assert event_time("no date at all", None, NOW) is None


def test_the_day_of_the_month_counts_from_the_memorys_own_date() -> None:
    """A memory's "on the 15th" is the 15th of the month the memory was said in, or of the month before
    when that day is still to come."""
    met = event_time("[17 August, 2023] John: I met my teammates on the 15th", None, NOW)
    assert met == EventTime(day(2023, 8, 15), day(2023, 8, 17))
    back = event_time("[3 August, 2023] John: we won on the 20th", None, NOW)
    assert back == EventTime(day(2023, 7, 20), day(2023, 8, 3))


def test_a_window_between_two_dates() -> None:
    """One span from the first date to the second; the first takes the second's year."""
    assert query_window("Where was John between August 11 and August 15 2023?", NOW) == [
        DateSpan(day(2023, 8, 11), day(2023, 8, 16))
    ]
    assert query_window("between 3 May, 2023 and 9 May, 2023", NOW) == [
        DateSpan(day(2023, 5, 3), day(2023, 5, 10))
    ]
    assert query_window("between you and me, what happened?", NOW) == []
    # the wrong way round is no span: the dates are read one by one
    assert len(query_window("between 9 May, 2023 and 3 May, 2023", NOW)) == 2


@pytest.mark.parametrize(
    ("query", "when"),
    [("When did Nate win his third tourney?", True), ("what year did she move?", True),
     ("Since when has Ann lived in Lisbon?", True), ("Which month was the launch?", True),
     ("Where does Ann live?", False), ("What did we say about when to deploy?", False)],
)  # fmt: skip
def test_a_question_that_asks_when(query: str, when: bool) -> None:
    assert asks_when(query) is when


def test_query_window() -> None:
    assert query_window("What did Ann do in May 2023?", NOW) == [
        DateSpan(day(2023, 5, 1), day(2023, 6, 1))
    ]
    assert query_window("who came last week?", NOW) == [
        DateSpan(day(2026, 11, 23), day(2026, 11, 30))
    ]
    junes = query_window("when did we go camping in June?", NOW)
    assert junes[0] == DateSpan(day(2026, 6, 1), day(2026, 7, 1)) and len(junes) == 10
    assert query_window("in December?", datetime(2026, 2, 1, tzinfo=UTC))[0].start.year == 2025
    assert query_window("what is my favourite colour?", NOW) == []


def test_an_event_span_meets_a_window_on_either_end() -> None:
    said_on_3_june_about_last_weekend = EventTime(day(2023, 5, 27), day(2023, 6, 3))
    assert said_on_3_june_about_last_weekend.meets([DateSpan(day(2023, 6, 3), day(2023, 6, 4))])
    assert said_on_3_june_about_last_weekend.meets([DateSpan(day(2023, 5, 27), day(2023, 5, 28))])
    assert not said_on_3_june_about_last_weekend.meets([DateSpan(day(2023, 6, 4), day(2023, 6, 5))])


# ---- event time through the API -----------------------------------------------------------------


async def test_store_batch_and_import_keep_the_event_time(client: AsyncTestClient) -> None:
    wallet = Account.create()
    given = (await store_memory(client, wallet, "Signed the lease yesterday",
                                occurred_at="2025-09-02T10:00:00Z"))["memory"]  # fmt: skip
    assert given["occurred_at"] == "2025-09-01T00:00:00Z"
    assert given["mentioned_at"] == "2025-09-02T10:00:00Z"
    read = (await store_memory(client, wallet,
                               "[3:00 pm on 12 March, 2024] Ann: the roof was repaired"))["memory"]  # fmt: skip
    assert read["occurred_at"] == read["mentioned_at"] == "2024-03-12T00:00:00Z"
    timeless = (await store_memory(client, wallet, "Ann prefers tea to coffee"))["memory"]
    assert "occurred_at" not in timeless  # nothing says when: no field, not a null
    r = await client.post("/v1/store/batch", headers=auth(wallet), json={"memories": [
        {"content": "Paid the plumber", "occurred_at": "2025-10-05"}]})  # fmt: skip
    assert r.status_code == 201, r.text
    memory = (await client.get(f"/v1/memories/{r.json()['ids'][0]}", headers=auth(wallet))).json()
    assert memory["occurred_at"] == "2025-10-05T00:00:00Z"
    # an export's event time is imported as it was resolved, not resolved again
    other = Account.create()
    exported = (await client.get("/v1/export", headers=auth(wallet))).json()
    r = await client.post("/v1/import", json=exported, headers=auth(other))
    assert r.status_code in (200, 201), r.text
    moved = (await client.get("/v1/export", headers=auth(other))).json()["memories"]
    lease = next(m for m in moved if m["content"] == "Signed the lease yesterday")
    assert lease["occurred_at"] == "2025-09-01T00:00:00Z"
    r = await client.post("/v1/store", headers=auth(wallet),
                          json={"content": "x", "occurred_at": "not a date"})  # fmt: skip
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "occurred_at"


@pytest.mark.parametrize(
    ("conversation", "occurred", "said"),
    [
        ({"messages": [{"role": "user", "occurred_at": "2023-05-08T10:00:00Z",
                        "content": "I had my wisdom tooth removed at the dentist yesterday."}]},
         "2023-05-07T00:00:00Z", "2023-05-08T10:00:00Z"),
        ({"occurred_at": "2024-01-15", "messages": [
            {"role": "user", "content": "I had my wisdom tooth removed at the dentist yesterday."}]},
         "2024-01-14T00:00:00Z", "2024-01-15T00:00:00Z"),
        ({"text": "[2:00 pm on 3 June, 2023] I had my wisdom tooth removed at the dentist yesterday."},
         "2023-06-02T00:00:00Z", "2023-06-03T00:00:00Z"),
    ],
)  # fmt: skip
async def test_ingest_fills_the_event_time_from_the_conversations_dates(
    client: AsyncTestClient, conversation: dict, occurred: str, said: str
) -> None:
    wallet = Account.create()
    r = await client.post("/v1/ingest", json=conversation, headers=auth(wallet))
    assert r.status_code == 201, r.text
    [memory_id] = r.json()["memory_ids"]
    memory = (await client.get(f"/v1/memories/{memory_id}", headers=auth(wallet))).json()
    assert "wisdom tooth" in memory["content"]
    assert (memory["occurred_at"], memory["mentioned_at"]) == (occurred, said)


async def test_recall_filters_on_event_time_and_boosts_the_time_the_query_names(
    client: AsyncTestClient,
) -> None:
    wallet = Account.create()
    # two memories equally about the query, one of them on the day it names
    march = (await store_memory(client, wallet, "Dinner with Priya at the Lebanese place",
                                occurred_at="2024-03-14T19:00:00Z"))["memory"]  # fmt: skip
    june = (await store_memory(client, wallet, "Had dinner with Priya and her brother at a noodle bar",
                               occurred_at="2024-06-20T19:00:00Z"))["memory"]  # fmt: skip
    for query, first in (("Who did I have dinner with on 14 March 2024?", march),
                         ("Who did I have dinner with in June 2024?", june)):  # fmt: skip
        r = await client.post("/v1/recall", json={"query": query}, headers=auth(wallet))
        hits = r.json()["memories"]
        assert hits[0]["id"] == first["id"], hits
        assert hits[0]["_signals"]["event_time_boost"] == 1.5
        assert hits[1]["_signals"]["event_time_boost"] == 1.0
    r = await client.post("/v1/recall", headers=auth(wallet), json={
        "query": "dinner with Priya", "filters": {"occurred_after": "2024-05-01"}})  # fmt: skip
    assert [m["id"] for m in r.json()["memories"]] == [june["id"]]
    r = await client.post("/v1/recall", headers=auth(wallet), json={
        "query": "dinner with Priya", "filters": {"occurred_before": "2024-05-01"}})  # fmt: skip
    assert [m["id"] for m in r.json()["memories"]] == [march["id"]]


async def test_a_when_question_ranks_the_memory_that_says_when_first(
    client: AsyncTestClient,
) -> None:
    """Two memories equally about the question; the one that dates its event ("last Friday")
    answers "when", and ranks first for a "when" question only."""
    wallet = Account.create()
    dated = (await store_memory(
        client, wallet, "[16 November, 2023] Tim: I visited a castle on my trip last Friday"
    ))["memory"]  # fmt: skip
    undated = (await store_memory(
        client, wallet, "[16 November, 2023] Tim: I visited a castle on my trip, it was huge"
    ))["memory"]  # fmt: skip
    for query, first in (("When did Tim visit a castle?", dated),
                         ("Did Tim visit a huge castle on his trip?", undated)):  # fmt: skip
        r = await client.post("/v1/recall", json={"query": query}, headers=auth(wallet))
        hits = r.json()["memories"]
        assert hits[0]["id"] == first["id"], hits
    r = await client.post("/v1/recall", json={"query": "When did Tim visit a castle?"},
                          headers=auth(wallet))  # fmt: skip
    boosts = {m["id"]: m["_signals"]["event_time_boost"] for m in r.json()["memories"]}
    assert boosts == {dated["id"]: 1.5, undated["id"]: 1.0}


# ---- second round ---------------------------------------------------------------------------

QUESTION = "Where does Ann's sister live these days?"
SEED = "Ann's sister Beth called this morning"
BRIDGE = "She packed up and left for Lisbon in April"  # says nothing of Ann, sisters or living
# Nearer the question than the bridge, on their own.
DISTRACTORS = ["Ann's phone screen cracked again", "Ann works from home these days"]
TOP = 3


def ids_of(response) -> list[str]:
    return [m["id"] for m in response.json()["memories"]]


async def test_the_second_round_brings_the_next_turn_that_answers(
    client: AsyncTestClient, make_app
) -> None:
    """The bridging turn matches nothing of the question; the turn before it does."""
    wallet = Account.create()
    conversation = [*DISTRACTORS, SEED, BRIDGE]
    r = await client.post("/v1/store/batch", headers=auth(wallet), json={
        "memories": [{"content": c, "namespace": "chat-1"} for c in conversation]})  # fmt: skip
    assert r.status_code == 201, r.text
    ids = dict(zip(conversation, r.json()["ids"], strict=True))
    body = {"query": QUESTION, "limit": TOP}
    async with AsyncTestClient(
        app=make_app(recall={"second_round": False}), timeout=60
    ) as first_only:
        r = await first_only.post("/v1/recall", json=body, headers=auth(wallet))
        assert ids[SEED] in ids_of(r) and ids[BRIDGE] not in ids_of(r)  # the first round misses it
    r = await client.post("/v1/recall", json=body, headers=auth(wallet))
    hits = {m["id"]: m for m in r.json()["memories"]}
    assert ids[BRIDGE] in hits and ids[DISTRACTORS[0]] not in hits, hits
    carried = hits[ids[BRIDGE]]["_signals"]["carried"]
    assert carried == pytest.approx(hits[ids[SEED]]["score"] * 0.85, abs=1e-5)
    assert hits[ids[BRIDGE]]["score"] == pytest.approx(carried, abs=1e-6)


async def test_the_second_round_follows_relations_and_keeps_the_filters(
    client: AsyncTestClient,
) -> None:
    wallet = Account.create()
    for text in DISTRACTORS:
        await store_memory(client, wallet, text, namespace="chat-1")
    # the last turn of its chat
    seed = (await store_memory(client, wallet, SEED, namespace="chat-1"))["memory"]
    # the bridge written elsewhere (another namespace): only a relation leads to it
    bridge = (await store_memory(client, wallet, BRIDGE, namespace="notes"))["memory"]
    body = {"query": QUESTION, "limit": TOP}
    r = await client.post("/v1/recall", json=body, headers=auth(wallet))
    assert seed["id"] in ids_of(r) and bridge["id"] not in ids_of(r)
    r = await client.post(f"/v1/memories/{seed['id']}/relations", headers=auth(wallet),
                          json={"target_id": bridge["id"], "relation_type": "related_to"})  # fmt: skip
    assert r.status_code in (200, 201), r.text
    r = await client.post("/v1/recall", json=body, headers=auth(wallet))
    assert bridge["id"] in ids_of(r), r.json()
    # a filter still holds: the bridge is outside the namespace asked for
    r = await client.post("/v1/recall", json={**body, "namespace": "chat-1"}, headers=auth(wallet))
    assert bridge["id"] not in ids_of(r)


@pytest.mark.parametrize(("lookahead", "found"), [(3, False), (4, True)])
async def test_a_continuation_is_looked_for_among_the_next_memories_of_the_namespace(
    client: AsyncTestClient, database_url: str, monkeypatch: pytest.MonkeyPatch,
    lookahead: int, found: bool,
) -> None:  # fmt: skip
    """The seed's next turn in its session comes after three turns of another session: found
    when the walk reads four memories past the seed, not when it reads three (the walk is
    bounded, so a seed with no next turn never reads the rest of a big namespace)."""
    monkeypatch.setattr(memory_repository, "CONTINUATION_LOOKAHEAD", lookahead)
    wallet = Account.create()
    other = ["The build broke on the arm runner", "Lunch is at noon on Fridays", "Rain all week"]
    turns = [(SEED, "s-1"), *[(c, "s-2") for c in other], (BRIDGE, "s-1")]
    r = await client.post("/v1/store/batch", headers=auth(wallet), json={"memories": [
        {"content": c, "namespace": "chat-2", "session_id": s} for c, s in turns]})  # fmt: skip
    assert r.status_code == 201, r.text
    ids = [UUID(i) for i in r.json()["ids"]]
    assert len(set(ids)) == len(turns)  # none merged as a duplicate
    conn = await asyncpg.connect(database_url)
    await register_vector(conn)
    try:
        f = MemoryFilter(wallet=wallet.address.lower())
        rows = await memory_repository.second_round_candidates(
            conn, f, [ids[0]], np.ones(LOCAL_EMBED_DIMS, np.float32), "sister", {},
            CONTINUATION_FOLLOW, CONTINUATION_MAX_GAP,
        )  # fmt: skip
    finally:
        await conn.close()
    assert ({row["id"] for row in rows} == {ids[-1]}) is found, rows
    assert all(row["id"] == ids[-1] for row in rows)  # never the other session's turns
