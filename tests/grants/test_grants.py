"""Team memory, part 2: namespaces shared between wallets. An owner grants another wallet read
or write on one namespace; the grantee reaches it by naming the owner (x-memory-owner) on
recall, list, get, store, update and context, and nowhere else; it pays with its own free
tier; history records it as the actor; revoking or expiry takes effect on the next request; a
grant never widens to another namespace. Every refusal is a 403 FORBIDDEN that changes
nothing, but for a memory asked for by id outside the grant's reach: that is a 404, as a missing
one (tests/grants/test_reach.py)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from tests.support.api import auth, store_memory
from tests.support.team import as_grantee, forbidden
from tests.support.team import grant as team_grant

TEAM = "team"


def acting(grantee: LocalAccount, owner: LocalAccount) -> dict[str, str]:
    return as_grantee(grantee, owner)


async def grant(client: AsyncTestClient, owner: LocalAccount, grantee: LocalAccount,
                access: str, namespace: str = TEAM, **extra: Any) -> dict[str, Any]:  # fmt: skip
    return await team_grant(client, owner, grantee, access, namespace, **extra)


async def owners_memories(client: AsyncTestClient, owner: LocalAccount) -> dict[str, str]:
    """The owner's memories, as they stand: content by id."""
    r = await client.get("/v1/memories", params={"limit": 100}, headers=auth(owner))
    return {m["id"]: m["content"] for m in r.json()["memories"]}


@pytest.fixture
async def team(client: AsyncTestClient) -> tuple[LocalAccount, LocalAccount, dict[str, str]]:
    """An owner with a memory in the shared namespace and one in a private one, and a teammate."""
    owner, teammate = Account.create(), Account.create()
    shared = await store_memory(client, owner, "The staging database is db-stg-2", namespace=TEAM)
    private = await store_memory(client, owner, "My salary review is in March",
                                 namespace="private")  # fmt: skip
    return owner, teammate, {"shared": shared["id"], "private": private["id"]}


async def test_grants_are_given_listed_and_revoked(client: AsyncTestClient) -> None:
    owner, teammate = Account.create(), Account.create()
    given = await grant(client, owner, teammate, "read", expires_at="2999-01-01T00:00:00Z")
    assert (given["owner"], given["grantee"], given["namespace"], given["access"]) == (
        owner.address.lower(), teammate.address.lower(), TEAM, "read")  # fmt: skip
    mine = (await client.get("/v1/grants", headers=auth(owner))).json()
    theirs = (await client.get("/v1/grants", headers=auth(teammate))).json()
    assert [g["id"] for g in mine["given"]] == [given["id"]] and mine["received"] == []
    assert [g["id"] for g in theirs["received"]] == [given["id"]] and theirs["given"] == []
    r = await client.delete(f"/v1/grants/{given['id']}", headers=auth(teammate))
    assert r.status_code == 404  # only the owner revokes
    r = await client.delete(f"/v1/grants/{given['id']}", headers=auth(owner))
    assert r.json() == {"id": given["id"], "revoked": True}
    assert (await client.get("/v1/grants", headers=auth(teammate))).json()["received"] == []
    for body in ({"grantee": owner.address, "namespace": TEAM, "access": "read"},
                 {"grantee": teammate.address, "namespace": TEAM, "access": "admin"},
                 {"grantee": teammate.address, "namespace": TEAM, "access": "read",
                  "expires_at": "2001-01-01T00:00:00Z"}):  # fmt: skip
        r = await client.post("/v1/grants", json=body, headers=auth(owner))
        assert r.status_code == 422, r.text


async def test_a_read_grant_reaches_its_namespace_for_reading_only(client, team) -> None:
    owner, teammate, ids = team
    await grant(client, owner, teammate, "read")
    h = acting(teammate, owner)
    r = await client.post("/v1/recall", json={"query": "staging database", "namespace": TEAM},
                          headers=h)  # fmt: skip
    assert [m["id"] for m in r.json()["memories"]] == [ids["shared"]]
    r = await client.get("/v1/memories", params={"namespace": TEAM}, headers=h)
    assert [m["id"] for m in r.json()["memories"]] == [ids["shared"]]
    r = await client.get(f"/v1/memories/{ids['shared']}", headers=h)
    assert r.status_code == 200 and r.json()["content"] == "The staging database is db-stg-2"
    r = await client.post("/v1/context", json={"query": "staging", "namespace": TEAM}, headers=h)
    assert r.status_code == 200 and "db-stg-2" in r.json()["context"]
    before = await owners_memories(client, owner)
    assert forbidden(await client.post("/v1/store", headers=h, json={
        "content": "The staging database moved", "namespace": TEAM}))  # fmt: skip
    assert forbidden(await client.patch(f"/v1/memories/{ids['shared']}", headers=h,
                                        json={"content": "changed"}))  # fmt: skip
    assert await owners_memories(client, owner) == before


async def test_a_grant_never_widens_to_another_namespace_or_route(client, team) -> None:
    owner, teammate, ids = team
    await grant(client, owner, teammate, "write")
    h = acting(teammate, owner)
    before = await owners_memories(client, owner)
    free = (await client.get("/v1/free-tier/status", headers=auth(teammate))).json()
    refused = [
        await client.post("/v1/recall", json={"query": "salary", "namespace": "private"},
                          headers=h),
        await client.post("/v1/recall", json={"query": "salary"}, headers=h),  # default
        await client.get("/v1/memories", params={"namespace": "private"}, headers=h),
        await client.get("/v1/memories", headers=h),
        await client.patch(f"/v1/memories/{ids['shared']}", json={"namespace": "private"},
                           headers=h),
        await client.post("/v1/store", json={"content": "x", "namespace": "private"},
                          headers=h),
        # routes no grant covers
        await client.delete(f"/v1/memories/{ids['shared']}", headers=h),
        await client.get(f"/v1/memories/{ids['shared']}/history", headers=h),
        await client.post("/v1/grants", headers=h, json={
            "grantee": Account.create().address, "namespace": TEAM, "access": "write"}),
        await client.get("/v1/grants", headers=h),
        await client.post("/v1/search", json={"query": "staging"}, headers=h),
        await client.get("/v1/export", headers=h),
    ]  # fmt: skip
    assert all(forbidden(r) for r in refused), [(r.status_code, r.text[:80]) for r in refused]
    hidden = [  # by id, outside the grant: not found, as a missing memory
        await client.get(f"/v1/memories/{ids['private']}", headers=h),
        await client.patch(f"/v1/memories/{ids['private']}", json={"importance": 1.0},
                           headers=h),
    ]  # fmt: skip
    assert [r.status_code for r in hidden] == [404, 404], [r.text[:80] for r in hidden]
    assert await owners_memories(client, owner) == before
    given = (await client.get("/v1/grants", headers=auth(owner))).json()["given"]
    assert [g["namespace"] for g in given] == [TEAM]
    # a refusal costs the caller nothing
    assert (await client.get("/v1/free-tier/status", headers=auth(teammate))).json() == free


async def test_a_write_grant_stores_and_updates_as_the_grantee(client, team) -> None:
    owner, teammate, ids = team
    await grant(client, owner, teammate, "write")
    h = acting(teammate, owner)
    before_owner = (await client.get("/v1/free-tier/status", headers=auth(owner))).json()
    before_mate = (await client.get("/v1/free-tier/status", headers=auth(teammate))).json()
    r = await client.post("/v1/store", json={"content": "The staging cache is redis-stg-1",
                                             "namespace": TEAM}, headers=h)  # fmt: skip
    assert r.status_code == 201, r.text
    stored = r.json()["id"]
    assert stored in await owners_memories(client, owner)
    r = await client.patch(f"/v1/memories/{ids['shared']}", headers=h,
                           json={"content": "The staging database is db-stg-3"})  # fmt: skip
    assert r.status_code == 200 and r.json()["content"] == "The staging database is db-stg-3"
    after_owner = (await client.get("/v1/free-tier/status", headers=auth(owner))).json()
    after_mate = (await client.get("/v1/free-tier/status", headers=auth(teammate))).json()
    assert after_owner["free_tier_remaining"] == before_owner["free_tier_remaining"]
    assert after_mate["free_tier_remaining"] == before_mate["free_tier_remaining"] - 2
    history = (await client.get(f"/v1/memories/{ids['shared']}/history",
                                headers=auth(owner))).json()["history"]  # fmt: skip
    assert [e.get("actor") for e in history] == [None, teammate.address.lower()]
    created = (await client.get(f"/v1/memories/{stored}/history", headers=auth(owner))).json()
    assert created["history"][0]["actor"] == teammate.address.lower()


async def test_revoked_and_expired_grants_end_on_the_next_request(
    client, team, database_url: str
) -> None:
    owner, teammate, ids = team
    h = acting(teammate, owner)
    ask = {"query": "staging database", "namespace": TEAM}
    given = await grant(client, owner, teammate, "read")
    assert (await client.post("/v1/recall", json=ask, headers=h)).status_code == 200
    await client.delete(f"/v1/grants/{given['id']}", headers=auth(owner))
    assert forbidden(await client.post("/v1/recall", json=ask, headers=h))
    expiring = await grant(client, owner, teammate, "read", expires_at="2999-01-01T00:00:00Z")
    assert (await client.post("/v1/recall", json=ask, headers=h)).status_code == 200
    conn = await asyncpg.connect(database_url)
    try:  # its expiry comes
        await conn.execute("UPDATE grants SET expires_at = now() - interval '1 second'"
                           " WHERE id = $1", expiring["id"])  # fmt: skip
    finally:
        await conn.close()
    assert forbidden(await client.post("/v1/recall", json=ask, headers=h))
    assert (await client.get(f"/v1/memories/{ids['shared']}", headers=h)).status_code == 404


async def test_no_grant_no_reach(client, team) -> None:
    owner, _, ids = team
    stranger = Account.create()
    await grant(client, owner, Account.create(), "write")  # someone else's grant
    h = acting(stranger, owner)
    assert forbidden(await client.post("/v1/recall", json={"query": "staging", "namespace": TEAM},
                                       headers=h))  # fmt: skip
    assert (await client.get(f"/v1/memories/{ids['shared']}", headers=h)).status_code == 404
    r = await client.post("/v1/recall", json={"query": "staging"},
                          headers={**auth(stranger), "x-memory-owner": "not-a-wallet"})  # fmt: skip
    assert r.status_code in (403, 422)
    # naming oneself is one's own wallet
    r = await client.post("/v1/recall", json={"query": "staging"}, headers=acting(owner, owner))
    assert r.status_code == 200


async def test_mcp_takes_no_owner(client, team) -> None:
    """MCP's tools are not among the routes a grant covers: naming an owner there is a 403,
    even with a write grant, and the owner's memories stay as they were."""
    owner, teammate, _ = team
    await grant(client, owner, teammate, "write")
    before = await owners_memories(client, owner)
    headers = {**acting(teammate, owner), "accept": "application/json, text/event-stream"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "memoclaw_store", "arguments": {"content": "x", "namespace": TEAM}}}  # fmt: skip
    for body in ({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, call):
        assert forbidden(await client.post("/mcp", json=body, headers=headers))
    assert await owners_memories(client, owner) == before
