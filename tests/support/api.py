"""Calling the API as a wallet: the signed `x-wallet-auth` header, and memories stored over HTTP
for a test to work on (a test of storing itself checks its own requests)."""

from __future__ import annotations

import time
from typing import Any

import httpx
from eth_account.signers.local import LocalAccount

from app.auth.signature import sign_header


def auth(account: LocalAccount, ts: int | None = None) -> dict[str, str]:
    return {
        "x-wallet-auth": sign_header(account.key.hex(), ts if ts is not None else int(time.time()))
    }


async def store_memory(
    client: httpx.AsyncClient,
    account: LocalAccount,
    content: str,
    *,
    deduplicated: bool = False,
    **fields: Any,
) -> dict[str, Any]:
    """POST /v1/store as `account` (`fields`: the other request fields); it must answer 201, with
    a new memory unless `deduplicated` says the store merges into one already there. The answer's
    body: `id`, `memory`, `deduplicated`, `tokens_used`."""
    r = await client.post("/v1/store", json={"content": content, **fields}, headers=auth(account))
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    assert body["deduplicated"] is deduplicated, body
    return body


async def store_batch(
    client: httpx.AsyncClient, account: LocalAccount, memories: list[dict[str, Any]]
) -> list[str]:
    """POST /v1/store/batch as `account`: 201, every item a new memory; their ids, in order."""
    r = await client.post("/v1/store/batch", json={"memories": memories}, headers=auth(account))
    assert r.status_code == 201, r.text
    assert r.json()["deduplicated_count"] == 0, r.text
    return list(r.json()["ids"])
