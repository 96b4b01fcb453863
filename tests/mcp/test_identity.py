"""Who a tool call acts for over MCP: the /mcp endpoint authenticates every HTTP request like
the REST API (x-wallet-auth or a bearer session token, else 401), a tool call can never reach
another wallet's memories, and `engram mcp` takes its identity from the environment only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from eth_account import Account

from tests.support.api import auth
from tests.support.db import count_memories
from tests.support.mcp import BearerAuth, WalletAuth, http_session, stdio_session
from tests.support.server import ENGRAM, engram_env

INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}},
}  # fmt: skip
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


def error_of(result: object) -> dict[str, object]:
    assert getattr(result, "isError", False), result
    return json.loads(result.content[0].text)["error"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "headers",
    [{}, {"x-wallet-auth": "0xabc:1:0xdef"}, {"authorization": "Bearer not-a-token"}],
    ids=["none", "bad-signature", "bad-token"],
)
def test_mcp_endpoint_refuses_unauthenticated_requests(
    engram_url: str, headers: dict[str, str]
) -> None:
    r = httpx.post(f"{engram_url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "UNAUTHORIZED"


def test_signed_initialize_is_answered(engram_url: str) -> None:
    r = httpx.post(
        f"{engram_url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth(Account.create())}
    )
    assert r.status_code == 200, r.text
    assert r.json()["result"]["serverInfo"]["name"] == "engram"
    assert "memoclaw_recall" in r.json()["result"]["instructions"]


def cli_session_token(url: str, key: str, data_dir: Path) -> str:
    done = subprocess.run(
        [str(ENGRAM), "wallet", "session", "--url", url], capture_output=True, text=True,
        timeout=60, env=engram_env(data_dir, ENGRAM_PRIVATE_KEY=key),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_bearer_session_token_identifies_the_wallet(engram_url: str, tmp_path: Path) -> None:
    """The README's recipe: `engram wallet session` (key from the env) gives the bearer token."""
    wallet = Account.create()
    token = cli_session_token(engram_url, wallet.key.hex(), tmp_path)
    async with http_session(engram_url, BearerAuth(token)) as session:
        status = await session.call_tool("memoclaw_status", {})
        assert status.structuredContent is not None
        assert status.structuredContent["wallet"] == wallet.address.lower()


async def test_a_tool_call_never_touches_another_wallets_memory(
    engram_url: str, database_url: str
) -> None:
    owner, intruder = Account.create(), Account.create()
    async with http_session(engram_url, WalletAuth(owner.key.hex())) as session:
        stored = await session.call_tool(
            "memoclaw_store", {"content": "The vault code is kept in the blue notebook"}
        )
        assert stored.structuredContent is not None
        memory_id = stored.structuredContent["id"]
    async with http_session(engram_url, WalletAuth(intruder.key.hex())) as other:
        for name, args in [
            ("memoclaw_get", {"id": memory_id}),
            ("memoclaw_update", {"id": memory_id, "content": "overwritten"}),
            ("memoclaw_delete", {"id": memory_id}),
            ("memoclaw_pin", {"id": memory_id}),
            ("memoclaw_history", {"id": memory_id}),
            ("memoclaw_list_relations", {"memory_id": memory_id}),
            ("memoclaw_graph", {"memory_id": memory_id}),
        ]:
            error = error_of(await other.call_tool(name, args))
            assert error["code"] == "NOT_FOUND" and error["status"] == 404, (name, error)
        recalled = await other.call_tool("memoclaw_recall", {"query": "vault code notebook"})
        assert recalled.structuredContent == {"memories": [], "query_tokens": 0} or (
            recalled.structuredContent is not None and recalled.structuredContent["memories"] == []
        )
        listed = await other.call_tool("memoclaw_list", {})
        assert listed.structuredContent is not None and listed.structuredContent["total"] == 0
    async with http_session(engram_url, WalletAuth(owner.key.hex())) as session:
        kept = await session.call_tool("memoclaw_get", {"id": memory_id})
        assert kept.structuredContent is not None
        assert kept.structuredContent["memory"]["content"].startswith("The vault code")
    assert await count_memories(database_url, intruder.address) == 0


async def test_bad_arguments_are_refused_and_leave_no_trace(
    engram_url: str, database_url: str
) -> None:
    wallet = Account.create()
    async with http_session(engram_url, WalletAuth(wallet.key.hex())) as session:
        # refused by the tool's input schema
        error = error_of(
            await session.call_tool("memoclaw_store", {"content": "x", "importance": 7})
        )
        assert error["code"] == "VALIDATION_ERROR" and error["details"] == {"field": "importance"}
        # refused by the REST API's own validation, in its error shape
        error = error_of(await session.call_tool("memoclaw_store", {"content": "a\u0000b"}))
        assert error["code"] == "VALIDATION_ERROR" and error["status"] == 422
        unknown = error_of(await session.call_tool("memoclaw_nope", {}))
        assert unknown["code"] == "NOT_FOUND" and "memoclaw_nope" in str(unknown["message"])
    assert await count_memories(database_url, wallet.address) == 0


async def test_engram_mcp_says_when_engram_is_unreachable(tmp_path: Path) -> None:
    key = Account.create().key.hex()
    async with stdio_session("http://127.0.0.1:9", tmp_path, ENGRAM_PRIVATE_KEY=key) as session:
        error = error_of(await session.call_tool("memoclaw_stats", {}))
        assert error["code"] == "SERVICE_UNAVAILABLE", error


def test_engram_mcp_needs_a_key_from_the_environment(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ENGRAM), "mcp", "--url", "http://127.0.0.1:9"], env=engram_env(tmp_path),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "ENGRAM_PRIVATE_KEY" in done.stderr and "never taken from arguments" in done.stderr
    help_text = subprocess.run([str(ENGRAM), "mcp", "--help"], capture_output=True, text=True,
                               timeout=60).stdout  # fmt: skip
    assert "--key" not in help_text
