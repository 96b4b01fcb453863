"""keyword_match counts a word less in a memory of several passages (issue 37; app/memory/
repository/recall.py KEYWORD_FORMS): each word its IDF less ln(passages), passages = the memory's
distinct lexemes / PASSAGE_LEXEMES, at least 1. Checked by hand, then against the earlier form
(ENGRAM_RECALL_KEYWORD_PASSAGES=0, the plain IDF sum) on the same memories: it brings in the
short memory a long one outscored, gives a long memory's common words nothing, and leaves a
correct top result (a rare word, in a short memory or a long one) where it was."""

from __future__ import annotations

import math
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.memory.repository.recall import PASSAGE_LEXEMES
from tests.support.api import auth

EARLIER = {"keyword_passages": False}

# One conversation about one project: every turn names the chat app, so those words are common.
CHAT = [
    "user: the chat app needs a login screen before the beta",
    "user: the chat app should load old conversations as I scroll up",
    "user: in the chat app I want typing indicators for each conversation",
    "user: for the chat app the beta goes to twenty testers next month",
    "user: the chat app crashed twice on my phone this morning",
    "user: the chat app icon should be a blue speech bubble",
]
# An assistant's long answer: several passages, holding every word of QUESTION among many.
LONG_ANSWER = (
    "assistant: Here is a plan for storing and delivering messages in your chat app. First, "
    "decide where each message is stored: a relational database keeps every conversation in "
    "order and lets you page through history, while a document store is flexible when a "
    "message carries attachments, reactions and edits. Second, think about delivery: a "
    "websocket connection pushes each new message to the conversation's members, and a queue "
    "retries delivery when a phone is offline. Third, consider search: indexing message text "
    "lets users find old conversations quickly. Fourth, plan for scale: partition "
    "conversations by id, cache the latest page of each, and archive conversations nobody has "
    "opened for a year. Fifth, security matters: encrypt traffic with TLS, hash passwords "
    "with a slow function, rotate tokens, rate limit logins, and audit administrator actions. "
    "Sixth, observability: emit structured logs, export metrics such as delivery latency and "
    "queue depth, trace requests across services, and alert on error budgets. Seventh, "
    "release carefully: feature flags, canary deployments, automated rollbacks, migrations "
    "that never lock large tables, and backups restored monthly to prove they work. Eighth, "
    "accessibility: readable contrast, screen reader labels, keyboard navigation, adjustable "
    "fonts and captions for voice notes. Ninth, moderation: report buttons, spam filters, "
    "blocking, and a review dashboard for volunteers. Finally, test the whole path with "
    "realistic traffic before launch, watching battery, bandwidth and memory on older "
    "devices, and write down which storage you prefer so that everyone agrees early."
)
# What the user said they prefer: short, holding the question's telling words but one.
PREFERENCE = "user: I prefer Postgres for chat messages"
QUESTION = "Which storage do I prefer for chat messages?"


async def _store(client: AsyncTestClient, wallet: Any, contents: list[str]) -> None:
    r = await client.post(
        "/v1/store/batch",
        headers=auth(wallet),
        json={"memories": [{"content": c, "namespace": "chat"} for c in contents]},
    )
    assert r.status_code == 201, r.text
    assert r.json()["deduplicated_count"] == 0


async def _recall(client: AsyncTestClient, wallet: Any, query: str) -> list[dict[str, Any]]:
    r = await client.post("/v1/recall", headers=auth(wallet), json={"query": query, "limit": 10})
    assert r.status_code == 200, r.text
    memories: list[dict[str, Any]] = r.json()["memories"]
    return memories


def _keyword(memories: list[dict[str, Any]], content: str) -> float:
    return float(next(m for m in memories if m["content"] == content)["_signals"]["keyword"])


def _order(memories: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in memories]


async def _both_forms(
    client: AsyncTestClient, make_app: Any, wallet: Any, query: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The default's recall and the earlier form's, on the same memories."""
    async with AsyncTestClient(app=make_app(recall=EARLIER), timeout=60) as earlier:
        return await _recall(client, wallet, query), await _recall(earlier, wallet, query)


async def test_a_word_counts_its_idf_less_ln_passages_by_hand(
    client: AsyncTestClient, wallet: Any, database_url: str
) -> None:
    await _store(client, wallet, [*CHAT, LONG_ANSWER, PREFERENCE])
    conn = await asyncpg.connect(database_url)
    try:
        docs = await conn.fetch(
            "SELECT content, tsvector_to_array(tsv) AS lexemes, length(tsv) AS n FROM memories"
            " WHERE user_id = $1",
            wallet.address.lower(),
        )
        words = await conn.fetchval(
            "SELECT tsvector_to_array(to_tsvector('english', $1))", QUESTION
        )
    finally:
        await conn.close()
    idf = {}
    for word in words:
        held = sum(word in d["lexemes"] for d in docs)
        idf[word] = math.log(1 + (len(docs) - held + 0.5) / (held + 0.5))

    def by_hand(doc: asyncpg.Record) -> float:
        less = math.log(max(doc["n"] / PASSAGE_LEXEMES, 1.0))
        return sum(max(idf[w] - less, 0.0) for w in words if w in doc["lexemes"])

    raw = {d["content"]: by_hand(d) for d in docs}
    long = next(d for d in docs if d["content"] == LONG_ANSWER)
    assert long["n"] > 2 * PASSAGE_LEXEMES  # more than two passages: each word counts less
    memories = await _recall(client, wallet, QUESTION)
    for content, value in raw.items():
        if value > 0:
            assert _keyword(memories, content) == pytest.approx(value / max(raw.values()), abs=1e-5)


async def test_short_evidence_outranks_a_long_memory_holding_every_word(
    client: AsyncTestClient, make_app: Any, wallet: Any
) -> None:
    await _store(client, wallet, [*CHAT, LONG_ANSWER, PREFERENCE])
    now, before = await _both_forms(client, make_app, wallet, QUESTION)
    # the plain IDF sum: the long answer holds every word, the best keyword match
    assert _keyword(before, LONG_ANSWER) == 1.0 > _keyword(before, PREFERENCE)
    # by passages: the short memory holding the telling words is the best match, and first
    assert _keyword(now, PREFERENCE) == 1.0 > _keyword(now, LONG_ANSWER)
    assert _order(now)[0] == PREFERENCE


async def test_common_words_of_a_long_memory_count_nothing(
    client: AsyncTestClient, make_app: Any, wallet: Any
) -> None:
    """A question whose words every memory holds: the long memory holding them all no longer
    takes the keyword side's 1.0, and the memory about the question stays first."""
    await _store(client, wallet, [*CHAT, LONG_ANSWER])
    question = "what does the chat app need for the beta?"
    now, before = await _both_forms(client, make_app, wallet, question)
    assert _keyword(before, LONG_ANSWER) > 0
    assert _keyword(now, LONG_ANSWER) == 0.0  # chat and app: idf below ln(passages)
    assert _order(now)[0] == CHAT[0]


async def test_a_rare_word_keeps_its_top_result_even_in_a_long_memory(
    client: AsyncTestClient, make_app: Any, wallet: Any
) -> None:
    """A correct top result stays: the short memory that holds the question's rare word, and
    the long memory that alone holds another (its IDF outweighs ln(passages))."""
    await _store(client, wallet, [*CHAT, LONG_ANSWER, PREFERENCE])
    for question, expected in (
        ("Do I want Postgres?", PREFERENCE),
        ("How are messages delivered when a phone is offline?", LONG_ANSWER),
    ):
        now, before = await _both_forms(client, make_app, wallet, question)
        assert _order(before)[0] == expected
        assert _order(now)[0] == expected
        # the best keyword match (its 1.0 scaled by keyword_share, test_keyword_agreement.py)
        assert _keyword(now, expected) == max(float(m["_signals"]["keyword"]) for m in now)
