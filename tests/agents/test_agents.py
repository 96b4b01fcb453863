"""Team memory, part 3: agent keys that act for a wallet. An owner signs a delegation (agent,
scopes, namespaces, expiry); it is registered with POST /v1/agents once (its nonce) and for
this server (its Server line); the agent then signs its own x-wallet-auth and names the owner
in x-wallet-owner. Within the scopes the request is the owner's (memories, free tier), and the
agent is recorded in history and as agent_id. Outside them, or once revoked or expired, it is a
403 that changes nothing (a memory asked for by id outside its namespaces: a 404, as a missing
one)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from app.cli import main as engram
from tests.support.api import auth, store_memory
from tests.support.team import TEST_SERVER, as_agent, delegate, forbidden, signed_delegation

TEAM = "team"


async def memories_of(client: AsyncTestClient, owner: LocalAccount) -> dict[str, Any]:
    """The owner's memories as they stand: (content, version) by id."""
    r = await client.get("/v1/memories", params={"limit": 100}, headers=auth(owner))
    return {m["id"]: (m["content"], m["version"]) for m in r.json()["memories"]}


async def free_left(client: AsyncTestClient, wallet: LocalAccount) -> int:
    r = await client.get("/v1/free-tier/status", headers=auth(wallet))
    remaining: int = r.json()["free_tier_remaining"]
    return remaining


@pytest.fixture
async def pair(client: AsyncTestClient) -> tuple[LocalAccount, LocalAccount, dict[str, str]]:
    """An owner with a memory in `team` and one in `private`, and an agent key."""
    owner, agent = Account.create(), Account.create()
    shared = await store_memory(client, owner, "The staging database is db-stg-2", namespace=TEAM)
    private = await store_memory(client, owner, "My salary review is in March",
                                 namespace="private")  # fmt: skip
    return owner, agent, {"shared": shared["id"], "private": private["id"]}


async def test_an_agent_key_acts_for_its_owner(client: AsyncTestClient, pair) -> None:
    owner, agent, ids = pair
    given = await delegate(client, owner, agent, ["read", "write"])
    assert (given["owner"], given["agent"], given["scopes"]) == (
        owner.address.lower(), agent.address.lower(), ["read", "write"])  # fmt: skip
    assert "namespaces" not in given and "expires_at" not in given
    mine = (await client.get("/v1/agents", headers=auth(owner))).json()
    held = (await client.get("/v1/agents", headers=auth(agent))).json()
    assert [d["id"] for d in mine["given"]] == [given["id"]] and mine["held"] == []
    assert [d["id"] for d in held["held"]] == [given["id"]] and held["given"] == []

    h = as_agent(agent, owner)
    owner_free, agent_free = await free_left(client, owner), await free_left(client, agent)
    r = await client.post("/v1/store", headers=h, json={"content": "Deploys freeze on Fridays",
                                                        "namespace": TEAM})  # fmt: skip
    assert r.status_code == 201, r.text
    stored = r.json()["memory"]
    assert stored["agent_id"] == agent.address.lower()  # none given: the agent's address
    r = await client.post("/v1/store", headers=h, json={"content": "Tea is in the kitchen",
                                                        "agent_id": "claude-code"})  # fmt: skip
    assert r.json()["memory"]["agent_id"] == "claude-code"  # given: kept
    r = await client.post("/v1/recall", headers=h, json={"query": "salary review"})
    assert ids["private"] in [m["id"] for m in r.json()["memories"]]  # every namespace
    r = await client.get("/v1/memories", headers=h)
    assert r.json()["total"] == 4
    assert (await client.get(f"/v1/memories/{ids['shared']}", headers=h)).status_code == 200
    r = await client.patch(f"/v1/memories/{ids['shared']}", headers=h,
                           json={"content": "The staging database is db-stg-3"})  # fmt: skip
    assert r.status_code == 200 and r.json()["version"] == 2
    r = await client.post("/v1/context", headers=h, json={"query": "staging database"})
    assert "db-stg-3" in r.json()["context"]
    # the owner's memories and free tier: 5 paid calls (2 stores, recall, update, context)
    assert stored["id"] in await memories_of(client, owner)
    assert await free_left(client, owner) == owner_free - 5
    assert await free_left(client, agent) == agent_free
    history = (await client.get(f"/v1/memories/{ids['shared']}/history",
                                headers=auth(owner))).json()["history"]  # fmt: skip
    assert [e.get("actor") for e in history] == [None, agent.address.lower()]


async def test_scopes_and_namespaces_are_kept(client: AsyncTestClient, pair) -> None:
    owner, agent, ids = pair
    await delegate(client, owner, agent, ["read"], [TEAM])
    h = as_agent(agent, owner)
    r = await client.post("/v1/recall", headers=h, json={"query": "staging", "namespace": TEAM})
    assert [m["id"] for m in r.json()["memories"]] == [ids["shared"]]
    r = await client.get("/v1/memories", params={"namespace": TEAM}, headers=h)
    assert [m["id"] for m in r.json()["memories"]] == [ids["shared"]]
    before = await memories_of(client, owner)
    refused = [
        # outside its namespaces
        await client.post("/v1/recall", headers=h, json={"query": "salary", "namespace": "x"}),
        await client.post("/v1/recall", headers=h, json={"query": "salary"}),  # default
        await client.get("/v1/memories", headers=h),
        # outside its scopes
        await client.post("/v1/store", headers=h, json={"content": "x", "namespace": TEAM}),
        await client.patch(f"/v1/memories/{ids['shared']}", json={"importance": 1.0}, headers=h),
        # routes no delegation covers
        await client.delete(f"/v1/memories/{ids['shared']}", headers=h),
        await client.get(f"/v1/memories/{ids['shared']}/history", headers=h),
        await client.post("/v1/search", json={"query": "staging"}, headers=h),
        await client.get("/v1/export", headers=h),
        await client.get("/v1/agents", headers=h),
        await client.post("/v1/agents", headers=h,
                          json=signed_delegation(owner, Account.create(), ["write"])),
        await client.post("/v1/grants", headers=h, json={
            "grantee": Account.create().address, "namespace": TEAM, "access": "write"}),
        await client.post("/mcp", headers={**h, "accept": "application/json, text/event-stream"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        # with a grant's owner header too
        await client.post("/v1/recall", json={"query": "staging", "namespace": TEAM},
                          headers={**h, "x-memory-owner": owner.address}),
    ]  # fmt: skip
    assert all(forbidden(r) for r in refused), [(r.status_code, r.text[:90]) for r in refused]
    # a memory outside its namespaces, asked for by id: not found, as a missing one
    assert (await client.get(f"/v1/memories/{ids['private']}", headers=h)).status_code == 404
    assert await memories_of(client, owner) == before
    assert (await client.get("/v1/agents", headers=auth(owner))).json()["given"][0]["scopes"] == [
        "read"
    ]


async def test_a_write_scope_kept_to_a_namespace_cannot_move_memories_out(
    client: AsyncTestClient, pair
) -> None:
    owner, agent, ids = pair
    await delegate(client, owner, agent, ["write"], [TEAM, "notes"])
    h = as_agent(agent, owner)
    before = await memories_of(client, owner)
    assert forbidden(await client.patch(f"/v1/memories/{ids['shared']}", headers=h,
                                        json={"namespace": "private"}))  # fmt: skip
    assert forbidden(await client.post("/v1/store", headers=h, json={
        "content": "x", "namespace": "private"}))  # fmt: skip
    assert await memories_of(client, owner) == before
    r = await client.patch(f"/v1/memories/{ids['shared']}", headers=h, json={"namespace": "notes"})
    assert r.status_code == 200 and r.json()["namespace"] == "notes"  # within its namespaces
    r = await client.post("/v1/store", headers=h, json={
        "content": "Runbooks live in the wiki", "namespace": "notes", "key": "runbooks"})  # fmt: skip
    assert r.status_code == 201
    r = await client.get("/v1/memories/by-key/runbooks", params={"namespace": "notes"}, headers=h)
    assert r.status_code == 200 and r.json()["content"] == "Runbooks live in the wiki"
    r = await client.get("/v1/memories/by-key/runbooks", params={"namespace": "private"},
                         headers=h)  # fmt: skip
    assert forbidden(r)


async def test_revoked_expired_and_foreign_delegations_reach_nothing(
    client: AsyncTestClient, pair, database_url: str
) -> None:
    owner, agent, ids = pair
    ask = {"query": "staging database", "namespace": TEAM}
    h = as_agent(agent, owner)
    assert forbidden(await client.post("/v1/recall", json=ask, headers=h))  # none given yet
    given = await delegate(client, owner, agent, ["read"])
    assert (await client.post("/v1/recall", json=ask, headers=h)).status_code == 200
    r = await client.delete(f"/v1/agents/{given['id']}", headers=auth(Account.create()))
    assert r.status_code == 404  # a stranger revokes nothing
    r = await client.delete(f"/v1/agents/{given['id']}", headers=auth(owner))
    assert r.json() == {"id": given["id"], "revoked": True}
    assert forbidden(await client.post("/v1/recall", json=ask, headers=h))

    # the agent gives one up itself
    given = await delegate(client, owner, agent, ["read"])
    r = await client.delete(f"/v1/agents/{given['id']}", headers=auth(agent))
    assert r.json()["revoked"] is True
    assert forbidden(await client.post("/v1/recall", json=ask, headers=h))

    expiring = await delegate(client, owner, agent, ["read"], expires_at="2999-01-01T00:00:00Z")
    assert (await client.post("/v1/recall", json=ask, headers=h)).status_code == 200
    conn = await asyncpg.connect(database_url)
    try:  # its expiry comes
        await conn.execute("UPDATE delegations SET expires_at = now() - interval '1 second'"
                           " WHERE id = $1", expiring["id"])  # fmt: skip
    finally:
        await conn.close()
    assert forbidden(await client.post("/v1/recall", json=ask, headers=h))
    assert forbidden(await client.get(f"/v1/memories/{ids['shared']}", headers=h))

    # a delegation of another owner lets the agent act for that one, not this one
    other = Account.create()
    await delegate(client, other, agent, ["read", "write"])
    assert forbidden(await client.post("/v1/recall", json=ask, headers=h))
    assert (
        await client.post("/v1/recall", json=ask, headers=as_agent(agent, other))
    ).status_code == 200
    # another agent holds nothing of the owner's
    assert forbidden(await client.post("/v1/recall", json=ask,
                                       headers=as_agent(Account.create(), owner)))  # fmt: skip


async def test_registration_is_signed_by_the_owner_once_for_this_server(
    client: AsyncTestClient,
) -> None:
    owner, agent, stranger = Account.create(), Account.create(), Account.create()

    async def register(body: dict[str, Any], caller: LocalAccount = owner) -> Any:
        return await client.post("/v1/agents", json=body, headers=auth(caller))

    for body in (
        signed_delegation(owner, agent, ["read"], signer=agent),  # not the owner's signature
        signed_delegation(owner, agent, ["read"], server="https://engram.example"),  # elsewhere
        {**signed_delegation(owner, agent, ["read"]), "scopes": ["read", "write"]},  # altered
        {**signed_delegation(owner, agent, ["read"], [TEAM]), "namespaces": [TEAM, "x"]},
        {**signed_delegation(owner, agent, ["read"], [TEAM]), "namespaces": None},
        signed_delegation(owner, agent, ["admin"]),
        signed_delegation(owner, agent, ["read", "read"]),
        signed_delegation(owner, agent, ["read"], expires_at="2001-01-01T00:00:00Z"),
        signed_delegation(owner, owner, ["read"]),
        {**signed_delegation(owner, agent, ["read"]), "nonce": "short"},
        {**signed_delegation(owner, agent, ["read"]), "signature": "0x1234"},
    ):
        r = await register(body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    r = await register(signed_delegation(owner, agent, ["read"]), caller=stranger)
    assert forbidden(r)  # only a party to it registers it
    assert (await client.get("/v1/agents", headers=auth(owner))).json()["given"] == []

    body = signed_delegation(owner, agent, ["read"])
    first = await register(body, caller=agent)  # the agent may register what the owner signed
    assert first.status_code == 201, first.text
    again = await register(body)  # the same signed delegation, replayed
    assert again.status_code == 409 and again.json()["error"]["code"] == "CONFLICT"
    await client.delete(f"/v1/agents/{first.json()['id']}", headers=auth(owner))
    assert (await register(body, caller=agent)).status_code == 409  # nor after its revocation
    assert (await client.get("/v1/agents", headers=auth(owner))).json()["given"] == []

    # a newer delegation to the same agent replaces the older one
    await delegate(client, owner, agent, ["read"])
    newer = await delegate(client, owner, agent, ["read", "write"], [TEAM])
    given = (await client.get("/v1/agents", headers=auth(owner))).json()["given"]
    assert [(d["id"], d["scopes"], d["namespaces"]) for d in given] == [
        (newer["id"], ["read", "write"], [TEAM])]  # fmt: skip


async def test_the_owner_header_needs_the_agent_identity(client: AsyncTestClient) -> None:
    owner = Account.create()
    r = await client.post("/v1/recall", json={"query": "x"},
                          headers={"x-wallet-owner": owner.address})  # fmt: skip
    assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
    r = await client.get("/v1/memories", headers={"x-wallet-owner": owner.address})
    assert r.status_code == 401
    r = await client.get("/v1/memories",
                         headers={**auth(Account.create()), "x-wallet-owner": "nobody"})  # fmt: skip
    assert r.status_code == 422
    # naming oneself is one's own wallet
    r = await client.get("/v1/memories", headers={**auth(owner), "x-wallet-owner": owner.address})
    assert r.status_code == 200


async def test_engram_wallet_delegate_prints_a_body_that_registers(
    client: AsyncTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, agent = Account.create(), Account.create()
    monkeypatch.setenv("ENGRAM_PRIVATE_KEY", owner.key.hex())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        engram(["wallet", "delegate", "--agent", agent.address, "--scopes", "read",
                "--namespaces", TEAM, "--days", "7", "--url", TEST_SERVER + "/"])  # fmt: skip
    body = json.loads(out.getvalue())
    r = await client.post("/v1/agents", json=body, headers=auth(owner))
    assert r.status_code == 201, r.text
    assert (r.json()["scopes"], r.json()["namespaces"]) == (["read"], [TEAM])
    assert r.json()["expires_at"] > "2026"


async def test_concurrent_registrations_leave_one_live_delegation(client: AsyncTestClient) -> None:
    owner, agent = Account.create(), Account.create()
    bodies = [signed_delegation(owner, agent, ["read"]) for _ in range(6)]
    answers = await asyncio.gather(
        *(client.post("/v1/agents", json=b, headers=auth(owner)) for b in bodies)
    )
    assert {r.status_code for r in answers} <= {201, 409}, [r.text for r in answers]
    assert any(r.status_code == 201 for r in answers)
    given = (await client.get("/v1/agents", headers=auth(owner))).json()["given"]
    assert len(given) == 1


async def test_the_owner_cancels_a_delegation_by_its_nonce(client: AsyncTestClient) -> None:
    """In process too (tests/agents/test_delegation_rules.py has the rules through a server)."""
    owner, agent = Account.create(), Account.create()
    body = signed_delegation(owner, agent, ["read"])
    r = await client.delete(f"/v1/agents/nonces/{body['nonce']}", headers=auth(owner))
    assert r.json() == {"nonce": body["nonce"], "cancelled": True}
    r = await client.post("/v1/agents", json=body, headers=auth(agent))
    assert r.status_code == 409 and r.json()["error"]["details"] == {"field": "nonce"}
    body = signed_delegation(owner, agent, ["read"])
    key = (await client.post("/v1/agents", json=body, headers=auth(owner))).json()
    r = await client.delete(f"/v1/agents/nonces/{body['nonce']}", headers=auth(owner))
    assert r.json() == {"nonce": body["nonce"], "cancelled": True, "revoked": key["id"]}
    assert (await client.get("/v1/agents", headers=auth(owner))).json()["given"] == []
