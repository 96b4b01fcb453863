"""Bad input gets a clear 4xx in the contract's error shape and leaves no trace in the database."""

from __future__ import annotations

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from tests.support.api import auth, store_memory


async def _traces(database_url: str, address: str) -> tuple[int, int]:
    conn = await asyncpg.connect(database_url)
    try:
        memories = await conn.fetchval(
            "SELECT count(*) FROM memories WHERE user_id = $1", address.lower()
        )
        used = await conn.fetchval(
            "SELECT coalesce((SELECT free_calls_used FROM wallets WHERE address = $1), 0)",
            address.lower(),
        )
        return int(memories), int(used)
    finally:
        await conn.close()


def _deep(levels: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"n": value}
    return value


BAD_STORES = [
    ({"content": "a\x00b"}, "NUL"),
    ({"content": "ok", "metadata": {"k": "v\x00"}}, "NUL"),
    ({"content": "ok", "metadata": {"k\x00": "v"}}, "NUL"),
    ({"content": "ok", "tags": ["t\x00"]}, "NUL"),
    ({"content": "x" * 8193}, "8192"),
    ({"content": ""}, "length"),
    ({"content": "   "}, "blank"),
    ({"content": "ok", "namespace": "n" * 256}, "255"),
    ({"content": "ok", "session_id": "s" * 256}, "255"),
    ({"content": "ok", "agent_id": "a" * 256}, "255"),
    ({"content": "ok", "tags": ["t" * 65]}, "64"),
    ({"content": "ok", "tags": [f"t{i}" for i in range(11)]}, "10"),
    ({"content": "ok", "metadata": {"tags": [f"t{i}" for i in range(11)]}}, "10"),
    ({"content": "ok", "metadata": {"blob": "x" * 4100}}, "4096"),
    ({"content": "ok", "metadata": {f"k{i}": i for i in range(21)}}, "20"),
    ({"content": "ok", "metadata": _deep(4)}, "3 levels"),
    ({"content": "ok", "metadata": ["not", "an", "object"]}, "object"),
    ({"content": 123}, "str"),
    ({"content": "ok", "importance": "high"}, "float"),
    ({"content": "ok", "importance": 1.5}, "1.0"),
    ({"content": "ok", "importance": -0.1}, "0.0"),
    ({"content": "ok", "memory_type": "diary"}, "memory_type"),
    ({"content": "ok", "pinned": "yes"}, "bool"),
    ({"content": "ok", "expires_at": "tomorrow"}, "ISO 8601"),
    ({}, "content"),
]


@pytest.mark.parametrize(("body", "says"), BAD_STORES)
async def test_bad_store_is_422_and_writes_nothing(
    client: AsyncTestClient, wallet, database_url, body: dict, says: str
) -> None:
    r = await client.post("/v1/store", json=body, headers=auth(wallet))
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert says.lower() in r.text.lower(), r.text
    assert await _traces(database_url, wallet.address) == (0, 0)


async def test_body_over_64_kb_is_413(client: AsyncTestClient, wallet, database_url) -> None:
    body = {"memories": [{"content": "y" * 8000} for _ in range(9)]}
    r = await client.post("/v1/store/batch", json=body, headers=auth(wallet))
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert r.headers["x-request-id"]
    assert await _traces(database_url, wallet.address) == (0, 0)


async def test_malformed_json_is_a_client_error(client: AsyncTestClient, wallet) -> None:
    r = await client.post(
        "/v1/store",
        content=b"{not json",
        headers={**auth(wallet), "content-type": "application/json"},
    )
    assert r.status_code == 422  # malformed JSON: the contract's VALIDATION_ERROR
    assert r.json()["error"]["code"] == "VALIDATION_ERROR"


async def test_bad_updates_are_422_and_change_nothing(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    memory_id = (await store_memory(client, wallet, "keep me"))["id"]
    for patch in (
        {"content": "bad\x00"},
        {"importance": 3},
        {"memory_type": "x"},
        {"metadata": {"blob": "x" * 5000}},
        {"expires_at": "2000-01-01T00:00:00Z"},
    ):
        r = await client.patch(f"/v1/memories/{memory_id}", json=patch, headers=h)
        assert r.status_code == 422, (patch, r.text)
    m = (await client.get(f"/v1/memories/{memory_id}", headers=h)).json()
    assert (
        m["content"] == "keep me" and m["importance"] == 0.5 and m["updated_at"] == m["created_at"]
    )


async def test_bad_query_parameters_are_422(client: AsyncTestClient, wallet) -> None:
    h = auth(wallet)
    for path in (
        "/v1/memories?limit=0",
        "/v1/memories?offset=-1",
        "/v1/memories?limit=abc",
        "/v1/memories?memory_type=diary",
        "/v1/memories?after=yesterday",
        "/v1/memories/search?q=",
        "/v1/memories?namespace=a%00b",
        "/v1/memories/count?tags=x,%00",
        "/v1/memories/search?q=kettle&agent_id=%00",
        "/v1/memories?session_id=%00",
        "/v1/export?namespace=%00",
        "/v1/tags?namespace=%00",
        "/v1/suggested?agent_id=%00",
    ):
        r = await client.get(path, headers=h)
        assert r.status_code == 422, (path, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
