"""Store and recall through HTTP against real PostgreSQL+pgvector and the local embedder."""

from __future__ import annotations

from litestar.testing import AsyncTestClient

from tests.support.api import auth, store_memory


async def test_store_then_recall(client: AsyncTestClient, wallet) -> None:
    r = await client.post(
        "/v1/store",
        json={
            "content": "The user prefers dark mode in every editor",
            "importance": 0.8,
            "memory_type": "preference",
            "metadata": {"tags": ["ui"]},
        },
        headers=auth(wallet),
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["stored"] is True and body["deduplicated"] is False and body["tokens_used"] > 0
    assert r.headers["x-free-tier-remaining"] == "99"
    assert r.headers["x-request-id"]
    await store_memory(client, wallet, "Quarterly revenue grew 12 percent")
    r = await client.post(
        "/v1/recall", json={"query": "what theme does the user like?"}, headers=auth(wallet)
    )
    assert r.status_code == 200, r.text
    memories = r.json()["memories"]
    assert memories[0]["id"] == body["id"]
    assert set(memories[0]["_signals"]) >= {
        "vector",
        "keyword",
        "recency",
        "base_importance",
        "effective_importance",
        "context_importance",
        "relation_count",
        "type_decay",
    }
