"""The keyword side weighted by agreement (issue 37; app/memory/ranking.py keyword_share): its
weight in a recall is the share of the KEYWORD_AGREEMENT_TOP candidates nearest the query that
hold one of its words. A question whose evidence shares no word with it (an instruction the
user gave earlier) is one where the keyword side can only rank other memories, so it counts
less there; where the nearest memories hold the question's words it counts fully. Compared
with ENGRAM_RECALL_KEYWORD_AGREEMENT=0 (full weight in every recall) on the same memories."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.support.api import auth

FULL_WEIGHT = {"keyword_agreement": False}

# What the user said once, holding none of QUESTION's words: the memory that answers it.
INSTRUCTION = "user: I'm vegetarian, so keep every meal free of meat and fish"
# Memories about other things; DECOY holds QUESTION's word "cook".
OTHERS = [
    "user: my sister lives in Lisbon",
    "user: the train to work was late again",
    "user: I bought new running shoes",
    "user: my cat sleeps all day",
    "user: the printer at the office is out of toner",
]
DECOY = "user: I read a biography of Captain Cook"
QUESTION = "What should I cook for dinner?"


async def _store(client: AsyncTestClient, wallet: Any) -> None:
    r = await client.post(
        "/v1/store/batch",
        headers=auth(wallet),
        json={"memories": [{"content": c} for c in [INSTRUCTION, *OTHERS, DECOY]]},
    )
    assert r.status_code == 201, r.text


async def _order(client: AsyncTestClient, wallet: Any, query: str) -> list[dict[str, Any]]:
    r = await client.post("/v1/recall", headers=auth(wallet), json={"query": query, "limit": 10})
    assert r.status_code == 200, r.text
    memories: list[dict[str, Any]] = r.json()["memories"]
    return memories


async def _both(
    client: AsyncTestClient, make_app: Any, wallet: Any, query: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The default's recall and full weight's, on the same memories."""
    async with AsyncTestClient(app=make_app(recall=FULL_WEIGHT), timeout=60) as full:
        return await _order(client, wallet, query), await _order(full, wallet, query)


def _signals(memories: list[dict[str, Any]], content: str) -> dict[str, float]:
    found: dict[str, float] = next(m for m in memories if m["content"] == content)["_signals"]
    return found


async def test_evidence_sharing_no_word_outranks_a_keyword_decoy(
    client: AsyncTestClient, make_app: Any, wallet: Any
) -> None:
    await _store(client, wallet)
    now, full = await _both(client, make_app, wallet, QUESTION)
    # at full weight the decoy's one word puts it first, above the nearer instruction
    assert full[0]["content"] == DECOY
    assert _signals(full, INSTRUCTION)["vector"] > _signals(full, DECOY)["vector"]
    # one of the seven nearest holds a word: the keyword side counts 1/7, the instruction leads
    assert now[0]["content"] == INSTRUCTION
    assert _signals(now, DECOY)["keyword"] == pytest.approx(
        _signals(full, DECOY)["keyword"] / 7, abs=1e-5
    )


async def test_a_question_whose_nearest_memories_hold_its_words_keeps_its_top_result(
    client: AsyncTestClient, make_app: Any, wallet: Any
) -> None:
    await _store(client, wallet)
    for question, expected in (
        ("Which biography of Captain Cook did I read?", DECOY),
        ("Where does my sister live?", OTHERS[0]),
    ):
        now, full = await _both(client, make_app, wallet, question)
        assert full[0]["content"] == expected
        assert now[0]["content"] == expected
