"""MCP's tools through the real `mcp` client with team memory in play: an agent key or a
grantee that names an owner is refused at /mcp (403, whatever the delegation or grant), the
owner's memories stay as they were, and the agent's own plain-wallet session keeps working
and sees only its own memories."""

from __future__ import annotations

from collections.abc import Generator

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from app.auth.siwx import origin_of
from tests.support.api import auth
from tests.support.mcp import WalletAuth, http_session
from tests.support.team import signed_delegation


class ActingAuth(WalletAuth):
    """x-wallet-auth signed afresh, plus a header naming the owner the caller acts for."""

    def __init__(self, key: str, header: str, owner: str) -> None:
        super().__init__(key)
        self.header, self.owner = header, owner

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers[self.header] = self.owner
        yield from super().auth_flow(request)


async def owners_memories(http: httpx.AsyncClient, owner: LocalAccount) -> dict[str, str]:
    r = await http.get("/v1/memories", params={"limit": 100}, headers=auth(owner))
    return {m["id"]: m["content"] for m in r.json()["memories"]}


@pytest.mark.parametrize("header", ["x-wallet-owner", "x-memory-owner"])
async def test_mcp_sessions_that_name_an_owner_are_refused(engram_url: str, header: str) -> None:
    owner, agent = Account.create(), Account.create()
    async with httpx.AsyncClient(base_url=engram_url, timeout=60) as http:
        await http.post("/v1/store", headers=auth(owner), json={
            "content": "The release train leaves on Wednesdays", "namespace": "team"})  # fmt: skip
        body = signed_delegation(owner, agent, ["read", "write"], server=origin_of(engram_url))
        assert (await http.post("/v1/agents", json=body, headers=auth(owner))).status_code == 201
        r = await http.post("/v1/grants", headers=auth(owner), json={
            "grantee": agent.address, "namespace": "team", "access": "write"})  # fmt: skip
        assert r.status_code == 201
        before = await owners_memories(http, owner)
    refused = ActingAuth(agent.key.hex(), header, owner.address)
    with pytest.raises(Exception) as caught:  # the client gives up on the 403 to initialize
        async with http_session(engram_url, refused) as session:
            await session.call_tool("memoclaw_store", {"content": "x", "namespace": "team"})
    assert "403" in repr(caught.value) or "Forbidden" in repr(caught.value), repr(caught.value)
    async with httpx.AsyncClient(base_url=engram_url, timeout=60) as http:
        assert await owners_memories(http, owner) == before
    async with http_session(engram_url, WalletAuth(agent.key.hex())) as session:  # its own
        listed = await session.call_tool("memoclaw_list", {"namespace": "team"})
        assert listed.structuredContent is not None
        assert listed.structuredContent["memories"] == []
