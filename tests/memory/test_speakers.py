"""Recall's speaker boost: a memory said by someone the query names ranks above one equally
about the query said by someone else, and a query naming no one changes nothing."""

from __future__ import annotations

import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient

from app.memory.speakers import named_in, speaker_of
from tests.support.api import auth, store_memory


@pytest.mark.parametrize(
    ("content", "speaker"),
    [("[1:56 pm on 8 May, 2023] John: I'm reading Dune", "john"),
     ("Ann Lee: the flat is sold", "ann lee"),
     ("John said: nothing", None),  # not a transcript line: "John said" is no name
     ("Reminder: renew the passport", "reminder"),  # a name for all it knows; no query names it
     ("the boiler is serviced in October", None),
     ("[8 May, 2023] I went: there", None)],
)  # fmt: skip
def test_the_speaker_of_a_transcript_line(content: str, speaker: str | None) -> None:
    assert speaker_of(content) == speaker


def test_the_names_a_query_holds() -> None:
    assert named_in("What books has John read?") == {"what", "john"}
    assert named_in("Where did Caroline's friend move?") == {"where", "caroline"}
    assert named_in("what did we decide about the deploy?") == set()


async def test_what_the_named_person_said_ranks_first(client: AsyncTestClient) -> None:
    wallet = Account.create()
    said_by_tim = (await store_memory(
        client, wallet, "[16 November, 2023] Tim: I have been reading a fantasy novel lately"
    ))["memory"]  # fmt: skip
    said_by_john = (await store_memory(
        client, wallet, "[16 November, 2023] John: I have been reading a fantasy novel lately too"
    ))["memory"]  # fmt: skip
    for query, first in (("What has John been reading lately?", said_by_john),
                         ("What has Tim been reading lately?", said_by_tim)):  # fmt: skip
        r = await client.post("/v1/recall", json={"query": query}, headers=auth(wallet))
        hits = r.json()["memories"]
        assert [h["id"] for h in hits] == [
            first["id"],
            ({said_by_tim["id"], said_by_john["id"]} - {first["id"]}).pop(),
        ]
        assert [h["_signals"]["speaker_boost"] for h in hits] == [1.25, 1.0]
    r = await client.post("/v1/recall", json={"query": "who has been reading a fantasy novel?"},
                          headers=auth(wallet))  # fmt: skip
    assert {h["_signals"]["speaker_boost"] for h in r.json()["memories"]} == {1.0}
