"""Hostile input on /mcp, against a real `engram serve`: what the mount refuses before the MCP
transport sees it (GET streams, bodies too large, too deep or not UTF-8), and tool arguments
refused as the REST route they call refuses them. The mcp SDK's own client keeps working."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from eth_account import Account
from mcp.types import INVALID_REQUEST, PARSE_ERROR

from app.auth.signature import sign_header
from app.config import LimitsSettings
from tests.support.mcp import WalletAuth, http_session

ACCEPT = "application/json, text/event-stream"
# More GET streams than a server could hold for long without slowing everyone (2,000 held took
# /health to 1.3 s); each must be answered, not held.
GET_STREAMS = 200
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def signed(key: str | None = None, **extra: str) -> dict[str, str]:
    return {"x-wallet-auth": sign_header(key or Account.create().key.hex()), **extra}


def post_mcp(server: str, body: bytes, key: str | None = None) -> httpx.Response:
    headers = signed(key, accept=ACCEPT, **{"content-type": "application/json"})
    return httpx.post(f"{server}/mcp", content=body, headers=headers, timeout=30)


def assert_jsonrpc_error(r: httpx.Response, status: int, code: int) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.json()["jsonrpc"] == "2.0" and r.json()["error"]["code"] == code, r.text


def assert_alive(server: str) -> None:
    assert httpx.get(f"{server}/health", timeout=10).status_code == 200


async def test_get_streams_are_answered_405_not_held(server: str) -> None:
    key = Account.create().key.hex()
    async with httpx.AsyncClient(base_url=server, timeout=30) as client:
        answers = await asyncio.gather(*(
            client.get("/mcp", headers=signed(key, accept="text/event-stream"))
            for _ in range(GET_STREAMS)
        ))  # fmt: skip
        for r in answers:
            assert_jsonrpc_error(r, 405, INVALID_REQUEST)
            assert r.headers["allow"] == "POST"
        # the same for a GET that would resume a stream, or asks for JSON
        for headers in ({"last-event-id": "1", "accept": ACCEPT}, {"accept": "application/json"}):
            assert_jsonrpc_error(await client.get("/mcp", headers=signed(key, **headers)), 405,
                                 INVALID_REQUEST)  # fmt: skip
        anonymous = await client.get("/mcp", headers={"accept": "text/event-stream"})
        assert anonymous.status_code == 401, anonymous.text
    assert_alive(server)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 5000 + b"]" * 5000,
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b'{"a":' * 3000 + b"1" + b"}" * 3001,
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","x":"\xff"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","x":"\xc0\xaf"}',  # overlong '/'
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","x":"\xed\xa0\x80"}',  # a surrogate
        b"\xfe\xff\x00{",  # UTF-16
        b"{bad",  # not JSON at all: the transport's own answer, the same code
    ],
    ids=["deep-arrays", "deep-params", "0xff", "overlong", "surrogate", "utf16", "not-json"],
)  # fmt: skip
def test_an_unreadable_body_is_the_transports_parse_error(server: str, body: bytes) -> None:
    assert_jsonrpc_error(post_mcp(server, body), 400, PARSE_ERROR)
    assert_alive(server)


def test_a_body_over_the_limit_is_413_unread(server: str) -> None:
    limit = LimitsSettings().max_body_bytes
    padding = "x" * limit
    body = json.dumps({**LIST_TOOLS, "params": {"_meta": {"pad": padding}}}).encode()
    assert_jsonrpc_error(post_mcp(server, body), 413, INVALID_REQUEST)
    assert_alive(server)


def test_a_body_within_the_bounds_is_served(server: str) -> None:
    """The bounds refuse only what they name: nesting up to the limit, UTF-8 of any script."""
    nested = {"a": 1}
    for _ in range(40):
        nested = {"a": nested}
    body = {**LIST_TOOLS, "params": {"_meta": {"deep": nested, "text": "caf\u00e9 \u65e5\u672c"}}}
    r = post_mcp(server, json.dumps(body, ensure_ascii=False).encode())
    assert r.status_code == 200, r.text
    assert {t["name"] for t in r.json()["result"]["tools"]} >= {"memoclaw_store"}


def rest_error(server: str, key: str, path: str, body: bytes) -> dict[str, Any]:
    headers = signed(key, **{"content-type": "application/json"})
    r = httpx.post(f"{server}{path}", content=body, headers=headers, timeout=30)
    assert r.status_code == 422, r.text
    error: dict[str, Any] = r.json()["error"]
    return error


def call_tool_raw(server: str, key: str, name: str, arguments_json: str) -> dict[str, Any]:
    """A tools/call sent as raw JSON-RPC (the SDK's client cannot encode a lone surrogate)."""
    body = f'{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{name}","arguments":{arguments_json}}}}}'
    r = post_mcp(server, body.encode(), key)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()["result"]
    return result


def test_tool_arguments_are_refused_as_the_rest_route_would(server: str) -> None:
    """Within the transport's bounds, a tool's arguments reach the REST route it calls, which
    refuses them with its own answer: nesting past the metadata limit, a lone surrogate."""
    key = Account.create().key.hex()
    deep: Any = "leaf"
    for _ in range(30):
        deep = {"k": deep}
    for arguments in (
        json.dumps({"content": "deep metadata", "metadata": deep}),
        '{"content": "a \\ud800 b"}',
    ):
        result = call_tool_raw(server, key, "memoclaw_store", arguments)
        assert result["isError"] is True, result
        error = json.loads(result["content"][0]["text"])["error"]
        expected = rest_error(server, key, "/v1/store", arguments.encode())
        assert error["status"] == 422 and error["code"] == expected["code"], error
        assert error["message"] == expected["message"], (error, expected)
    count = httpx.get(f"{server}/v1/memories/count", headers=signed(key), timeout=30)
    assert count.json()["count"] == 0  # neither left a trace


async def test_the_sdk_client_works_without_a_stream(server: str) -> None:
    async with http_session(server, WalletAuth(Account.create().key.hex())) as session:
        stored = await session.call_tool("memoclaw_store", {"content": "served without a stream"})
        assert not stored.isError, stored.content
        recalled = await session.call_tool("memoclaw_recall", {"query": "without a stream"})
        assert "served without a stream" in json.dumps(recalled.structuredContent)


async def test_tools_that_read_dates_answer_a_date_past_the_calendar(server: str) -> None:
    text = "I saw it 1000000 days ago, and 5000 years ago"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memoclaw_store", {"content": text}),
        ("memoclaw_recall", {"query": text}),
        ("memoclaw_search", {"query": text}),
        ("memoclaw_context", {"query": text}),
        ("memoclaw_ingest", {"text": f"{text}. I like green tea."}),
        ("memoclaw_extract", {"messages": [{"role": "user", "content": f"{text}. I am Ann."}]}),
    ]
    async with http_session(server, WalletAuth(Account.create().key.hex())) as session:
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            assert not result.isError, (name, result.content)
        recalled = await session.call_tool("memoclaw_recall", {"query": text})
        assert text in json.dumps(recalled.structuredContent)
    assert_alive(server)
