"""Identity over HTTP: which routes need a wallet, and the 401/402 each failure gets."""

from __future__ import annotations

import time

from eth_account import Account
from litestar.testing import AsyncTestClient

from tests.support.api import auth


def _error(r) -> dict:
    body = r.json()
    assert set(body) == {"error"} or "error" in body
    assert {"code", "message", "details"} <= set(body["error"])
    return body["error"]


async def test_public_routes_need_no_header(client: AsyncTestClient) -> None:
    for path in ("/health", "/v1/free-tier/info", "/docs/openapi.json"):
        r = await client.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.headers["x-request-id"]


async def test_free_route_without_identity_is_401(client: AsyncTestClient) -> None:
    r = await client.get("/v1/memories")
    assert r.status_code == 401
    err = _error(r)
    assert err["code"] == "UNAUTHORIZED" and "Missing x-wallet-auth" in err["message"]


async def test_paid_route_without_identity_is_402(client: AsyncTestClient) -> None:
    r = await client.post("/v1/store", json={"content": "hello"})
    assert r.status_code == 402
    assert _error(r)["code"] == "PAYMENT_REQUIRED"


async def test_bad_headers_are_401_on_free_and_paid_routes(client: AsyncTestClient, wallet) -> None:
    stale = auth(wallet, int(time.time()) - 1000)
    impostor = auth(Account.create())["x-wallet-auth"].split(":")
    forged = {"x-wallet-auth": f"{wallet.address}:{impostor[1]}:{impostor[2]}"}
    cases = [({"x-wallet-auth": "garbage"}, "Malformed"), (stale, "Stale"), (forged, "not made by")]
    for headers, says in cases:
        for method, path in (("GET", "/v1/memories"), ("POST", "/v1/store")):
            r = await client.request(method, path, headers=headers, json={"content": "x"})
            assert r.status_code == 401, (path, r.text)
            assert says in _error(r)["message"]


async def test_error_responses_carry_a_request_id(client: AsyncTestClient) -> None:
    r = await client.get("/v1/nope")
    assert r.status_code == 404
    assert _error(r)["code"] == "NOT_FOUND"
    assert r.headers["x-request-id"]


async def test_client_request_id_is_echoed(client: AsyncTestClient) -> None:
    r = await client.get("/health", headers={"x-request-id": "trace-1234-abcd"})
    assert r.headers["x-request-id"] == "trace-1234-abcd"
