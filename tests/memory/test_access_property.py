"""Recall does not feed on its own results: a memory that unrelated recalls return over and
over never comes to outrank a clearly more relevant fresh one (app/memory/scoring.py)."""

from __future__ import annotations

import pytest
from eth_account import Account
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from tests.support.api import auth, store_memory
from tests.support.settings import changed

# The question's answer (FRESH), and a memory on its edge (it pets a dog) that the unrelated
# recalls below keep returning (they are about coffee runs and mornings).
FRESH = "We adopted a grey cat and named her Miso"
POPULAR = "Every morning I pet the neighbours' dog on my coffee run"
QUESTION = "Which pet did we adopt?"
UNRELATED_WORDS = [
    "coffee", "morning", "run", "espresso", "latte", "breakfast", "commute", "street", "rain",
    "sunrise", "jog", "cafe", "barista", "mug", "neighbours", "early", "traffic", "bakery",
]  # fmt: skip
RECALLS = 1000


async def _ranks_after_unrelated_recalls(
    client: AsyncTestClient, queries: list[str], fresh_first: bool
) -> tuple[str, str, list[str], int]:
    wallet = Account.create()
    order = [FRESH, POPULAR] if fresh_first else [POPULAR, FRESH]
    ids = {content: (await store_memory(client, wallet, content))["id"] for content in order}
    returned = 0
    for query in queries:
        # no similarity floor: the popular memory comes back whatever the query
        r = await client.post(
            "/v1/recall",
            json={"query": query, "limit": 1, "min_similarity": 0},
            headers=auth(wallet),
        )
        assert r.status_code == 200, r.text
        returned += [m["id"] for m in r.json()["memories"]] == [ids[POPULAR]]
    r = await client.post("/v1/recall", json={"query": QUESTION, "limit": 2}, headers=auth(wallet))
    return ids[POPULAR], ids[FRESH], [m["id"] for m in r.json()["memories"]], returned


# A few dozen distinct unrelated queries, asked in turn until 1,000 recalls are made (an agent
# recalling on every turn of many conversations).
unrelated_queries = st.lists(
    st.lists(st.sampled_from(UNRELATED_WORDS), min_size=1, max_size=4).map(" ".join),
    min_size=10,
    max_size=40,
    unique=True,
).map(lambda distinct: [distinct[i % len(distinct)] for i in range(RECALLS)])


@pytest.fixture(scope="module")
def roomy_app(settings):  # type: ignore[no-untyped-def]
    """1,000 recalls from one wallet: more than the default free tier."""
    return create_app(changed(settings, limits={"free_tier_calls": 10**6}))


# Each example makes 1,000 recalls: a few examples, no shrinking (a failure is reported as
# drawn), no example database.
@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(queries=unrelated_queries, fresh_first=st.booleans())
async def test_a_frequently_returned_memory_never_outranks_a_more_relevant_fresh_one(
    roomy_app, queries: list[str], fresh_first: bool
) -> None:
    async with AsyncTestClient(app=roomy_app, timeout=60) as client:
        popular, fresh, ranked, returned = await _ranks_after_unrelated_recalls(
            client, queries, fresh_first
        )
    assert returned > RECALLS // 2  # the popular memory really was what those recalls returned
    assert ranked[0] == fresh, (ranked, popular, fresh)


async def test_with_memoclaw_accounting_the_popular_memory_does_outrank_it(make_app) -> None:
    """The property above is not trivially true: with every recalled memory counted as an
    access (MemoClaw's accounting), the same workload turns the ranking over."""
    app = make_app(recall={"counts_access": True}, limits={"free_tier_calls": 10**6})
    async with AsyncTestClient(app=app, timeout=60) as client:
        words = len(UNRELATED_WORDS)
        queries = [
            f"{UNRELATED_WORDS[i % words]} {UNRELATED_WORDS[i * 7 % words]}" for i in range(40)
        ]
        popular, fresh, ranked, returned = await _ranks_after_unrelated_recalls(
            client, queries, fresh_first=True
        )
    assert returned > 20
    assert ranked[0] == popular, (ranked, popular, fresh)
