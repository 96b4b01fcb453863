"""Per-wallet rate limits over MCP: each tool call is one REST request and is counted as one,
under the REST API's own limits (overall and per route); the MCP transport's own requests
(initialize, tools/list, notifications) are not counted, so they never eat a wallet's budget."""

from __future__ import annotations

import json

from eth_account import Account

from tests.support.mcp import WalletAuth, http_session
from tests.support.server import served

LIMIT = 3


async def test_tool_calls_are_rate_limited_like_rest(make_app) -> None:  # type: ignore[no-untyped-def]
    app = make_app(limits={"rate_limit_per_minute": LIMIT})
    wallet, other = Account.create(), Account.create()
    with served(app) as url:
        async with http_session(url, WalletAuth(wallet.key.hex())) as session:
            for _ in range(3):
                await session.list_tools()  # transport chatter: not counted
            for _ in range(LIMIT):
                ok = await session.call_tool("memoclaw_stats", {})
                assert not ok.isError, ok.content
            limited = await session.call_tool("memoclaw_stats", {})
            assert limited.isError
            error = json.loads(limited.content[0].text)["error"]  # type: ignore[union-attr]
            assert error["code"] == "RATE_LIMIT_EXCEEDED" and error["status"] == 429
        async with http_session(url, WalletAuth(other.key.hex())) as session:
            fresh = await session.call_tool("memoclaw_stats", {})  # counted per wallet
            assert not fresh.isError, fresh.content
