"""The optional rerank stage: a cross-encoder served in the rerank wire format orders recall's
best candidates. It brings in the memory the reranker finds most relevant, keeps a correct top
result on top, is asked per request or on by default, and a reranker that is missing or down
leaves recall in its own order, saying so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from eth_account import Account
from litestar.testing import AsyncTestClient

from tests.support.api import auth, store_memory
from tests.support.openai_wire import OpenAICompatibleServer

QUERY = "what did the plumber say about the boiler"
ANSWER = "He said the pressure valve is worn and must be replaced before winter"
MEMORIES = [
    "The plumber came round on Tuesday to look at the boiler",
    "The boiler is in the cupboard under the stairs",
    "The plumber charges 80 pounds an hour",
    ANSWER,  # says nothing of plumbers or boilers: the 4-signal score ranks it low
    "I repainted the cupboard under the stairs last spring",
]


@pytest.fixture(scope="module")
def reranker() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture
def reranker_reset(reranker: OpenAICompatibleServer) -> Iterator[OpenAICompatibleServer]:
    yield reranker
    reranker.relevance.clear()
    reranker.rerank_status = 200


async def recall(client: AsyncTestClient, wallet, **body: object) -> dict:
    r = await client.post("/v1/recall", json={"query": QUERY, **body}, headers=auth(wallet))
    assert r.status_code == 200, r.text
    return r.json()


async def stored(client: AsyncTestClient, wallet) -> dict[str, str]:
    return {c: (await store_memory(client, wallet, c))["memory"]["id"] for c in MEMORIES}


async def test_the_rerank_stage_brings_in_what_the_reranker_finds_relevant(
    make_app, reranker_reset: OpenAICompatibleServer
) -> None:
    reranker_reset.relevance[ANSWER] = 0.97
    wallet = Account.create()
    app = make_app(recall={"rerank_base_url": reranker_reset.base_url, "rerank_model": "ms-marco"})
    async with AsyncTestClient(app=app) as client:
        ids = await stored(client, wallet)
        plain = await recall(client, wallet, limit=2)
        assert ids[ANSWER] not in [m["id"] for m in plain["memories"]]
        assert "reranked" not in plain and "rerank" not in plain["memories"][0]["_signals"]
        reranked = await recall(client, wallet, limit=2, rerank=True)
    assert reranked["reranked"] is True
    first = reranked["memories"][0]
    assert first["id"] == ids[ANSWER] and first["_signals"]["rerank"] == 0.97
    assert len(reranked["memories"]) == 2
    sent = [r["body"] for r in reranker_reset.requests if r["path"] == "/v1/rerank"][-1]
    assert sent["query"] == QUERY and sent["model"] == "ms-marco"
    assert ANSWER in sent["documents"] and sent["top_n"] == len(sent["documents"])


async def test_a_correct_top_result_stays_on_top(
    make_app, reranker_reset: OpenAICompatibleServer
) -> None:
    """The reranker agrees with the first stage on the best result (word overlap here): the
    rerank stage keeps it first, and returns as many results."""
    wallet = Account.create()
    app = make_app(recall={"rerank_base_url": reranker_reset.base_url})
    async with AsyncTestClient(app=app) as client:
        ids = await stored(client, wallet)
        plain = await recall(client, wallet)
        reranked = await recall(client, wallet, rerank=True)
    best = ids["The plumber came round on Tuesday to look at the boiler"]
    assert plain["memories"][0]["id"] == best == reranked["memories"][0]["id"]
    assert len(reranked["memories"]) == len(plain["memories"])


async def test_on_by_default_and_off_per_request(
    make_app, reranker_reset: OpenAICompatibleServer
) -> None:
    reranker_reset.relevance[ANSWER] = 0.97
    wallet = Account.create()
    app = make_app(recall={"rerank_base_url": reranker_reset.base_url, "rerank": True})
    async with AsyncTestClient(app=app) as client:
        ids = await stored(client, wallet)
        default = await recall(client, wallet)
        off = await recall(client, wallet, rerank=False)
    assert default["reranked"] is True and default["memories"][0]["id"] == ids[ANSWER]
    assert "reranked" not in off and off["memories"][0]["id"] != ids[ANSWER]


async def test_a_reranker_down_or_missing_leaves_recall_in_its_own_order(
    make_app, reranker_reset: OpenAICompatibleServer
) -> None:
    wallet = Account.create()
    reranker_reset.rerank_status = 503
    async with AsyncTestClient(
        app=make_app(recall={"rerank_base_url": reranker_reset.base_url})
    ) as client:
        await stored(client, wallet)
        plain = await recall(client, wallet)
        down = await recall(client, wallet, rerank=True)
    assert down["reranked"] is False
    assert [m["id"] for m in down["memories"]] == [m["id"] for m in plain["memories"]]
    async with AsyncTestClient(app=make_app()) as client:  # no reranker configured
        missing = await recall(client, wallet, rerank=True)
    assert missing["reranked"] is False
    assert [m["id"] for m in missing["memories"]] == [m["id"] for m in plain["memories"]]


async def test_rerank_is_a_boolean(client: AsyncTestClient, wallet) -> None:
    r = await client.post(
        "/v1/recall", json={"query": QUERY, "rerank": "yes"}, headers=auth(wallet)
    )
    assert r.status_code == 422 and "rerank" in r.text
