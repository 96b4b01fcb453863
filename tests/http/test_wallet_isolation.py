"""Two wallets, every endpoint: one wallet never sees, changes or learns of the other's memories."""

from __future__ import annotations

from litestar.testing import AsyncTestClient

from tests.support.api import auth, store_memory

SECRET = "The launch code for project Falcon is tangerine-42"


async def test_wallets_are_isolated_on_every_endpoint(
    client: AsyncTestClient, wallet, other_wallet
) -> None:
    mine, theirs = auth(wallet), auth(other_wallet)
    memory_id = (await store_memory(client, wallet, SECRET, namespace="secret", tags=["x"]))["id"]

    async def check(method: str, path: str, **kwargs) -> dict:
        r = await client.request(method, path, headers=theirs, **kwargs)
        assert "tangerine" not in r.text and "Falcon" not in r.text, (path, r.text)
        return {"status": r.status_code, "body": r.json()}

    for method, kwargs in (("GET", {}), ("PATCH", {"json": {"importance": 1}}), ("DELETE", {})):
        res = await check(method, f"/v1/memories/{memory_id}", **kwargs)
        assert res["status"] == 404 and res["body"]["error"]["code"] == "NOT_FOUND"
    assert (await check("GET", "/v1/memories"))["body"]["total"] == 0
    assert (await check("GET", "/v1/memories?namespace=secret"))["body"]["total"] == 0
    assert (await check("GET", "/v1/memories/count"))["body"] == {"count": 0}
    assert (await check("POST", "/v1/search", json={"query": "launch code"}))["body"]["total"] == 0
    assert (await check("GET", "/v1/memories/search?q=launch"))["body"]["total"] == 0
    recall = await check("POST", "/v1/recall", json={"query": "launch code Falcon", "limit": 100})
    assert recall["body"]["memories"] == []
    assert (await check("GET", "/v1/namespaces"))["body"]["total"] == 0
    assert (await check("GET", "/v1/stats"))["body"]["total_memories"] == 0
    bulk = await check("POST", "/v1/memories/bulk-delete", json={"ids": [memory_id]})
    assert bulk["body"]["deleted"] == 0
    batch = await check("POST", "/v1/memories/batch-delete", json={"ids": [memory_id]})
    assert batch["body"]["results"][0]["deleted"] is False
    upd = await check(
        "PATCH", "/v1/memories/batch", json={"updates": [{"id": memory_id, "content": "pwned"}]}
    )
    assert upd["body"]["updated"] == 0 and upd["body"]["errors"][0]["status"] == 404
    upd = await check(
        "POST", "/v1/memories/batch-update", json={"updates": [{"id": memory_id, "pinned": True}]}
    )
    assert upd["body"]["updated"] == 0
    status = await check("GET", "/v1/free-tier/status")
    assert status["body"]["wallet"] == other_wallet.address.lower()
    # the same content stored by the other wallet is its own memory, never a dedup into mine
    copy = await store_memory(client, other_wallet, SECRET, namespace="secret")
    assert copy["deduplicated"] is False and copy["id"] != memory_id

    # and mine is untouched
    m = (await client.get(f"/v1/memories/{memory_id}", headers=mine)).json()
    assert m["content"] == SECRET and m["importance"] == 0.5 and m["pinned"] is False
    assert "deleted_at" not in m
