"""What a grantee or an agent key reaches, through a real `engram serve`: every part of every
answer comes from its one namespace (relations, their counts, context blocks, pages); a memory
asked for by id outside it is not found, exactly as a missing one; and what removes or locks a
memory (`expires_at`, `immutable`) is the owner's alone, on PATCH and on store.

The owner keeps `shared` (a grantee may read or write it, an agent key is limited to it) and
`private`, with relations across the two in both directions."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.api import auth, store_memory
from tests.support.team import as_agent, as_grantee, forbidden, grant, signed_delegation

SHARED, PRIVATE = "shared", "private"
SOON = "2999-01-01T00:00:00Z"


@dataclass
class Team:
    owner: LocalAccount
    shared: dict[str, str]  # id by name: "s" (related across), "s2" (related within)
    private: dict[str, str]  # id: content, of the memories in `private`
    headers: dict[str, dict[str, str]]  # "grantee", "agent": how each acts for the owner


async def relate(client: httpx.AsyncClient, owner: LocalAccount, source: str, target: str) -> None:
    r = await client.post(f"/v1/memories/{source}/relations", headers=auth(owner),
                          json={"target_id": target, "relation_type": "related_to"})  # fmt: skip
    assert r.status_code == 201, r.text


async def set_up(client: httpx.AsyncClient, server: str, access: str) -> Team:
    """The owner's memories and relations; a grantee with `access` on `shared`, and an agent
    key limited to `shared` with the matching scopes."""
    owner, grantee, agent = Account.create(), Account.create(), Account.create()
    tag = uuid.uuid4().hex[:8]
    s = await store_memory(client, owner, f"The staging database is db-stg-2 ({tag})",
                           namespace=SHARED)  # fmt: skip
    s2 = await store_memory(client, owner, f"The staging cache is redis-stg-1 ({tag})",
                            namespace=SHARED)  # fmt: skip
    private = {}
    for text in (f"The staging database root password is hunter2 ({tag})",
                 f"My salary review about the staging database is in March ({tag})"):  # fmt: skip
        stored = await store_memory(client, owner, text, namespace=PRIVATE)
        private[stored["id"]] = text
    p1, p2 = list(private)
    await relate(client, owner, s["id"], p1)  # outgoing, into private
    await relate(client, owner, p2, s["id"])  # incoming, from private
    await relate(client, owner, s["id"], s2["id"])  # within shared
    await grant(client, owner, grantee, access, SHARED)
    scopes = ["read"] if access == "read" else ["read", "write"]
    body = signed_delegation(owner, agent, scopes, [SHARED], server=server)
    r = await client.post("/v1/agents", json=body, headers=auth(owner))
    assert r.status_code == 201, r.text
    return Team(owner, {"s": s["id"], "s2": s2["id"]}, private,
                {"grantee": as_grantee(grantee, owner), "agent": as_agent(agent, owner)})  # fmt: skip


@pytest.fixture
async def http(server: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server, timeout=60) as c:
        yield c


def assert_nothing_private(team: Team, r: httpx.Response) -> None:
    """No id or content of a private memory anywhere in the answer (nested ones too)."""
    assert r.status_code == 200, r.text
    for memory_id, content in team.private.items():
        assert memory_id not in r.text and content not in r.text, r.text


@pytest.mark.parametrize("who", ["grantee", "agent"])
async def test_answers_hold_nothing_from_outside_the_namespace(
    http: httpx.AsyncClient, server: str, who: str
) -> None:
    team = await set_up(http, server, "read")
    h = team.headers[who]
    ask = {"query": "staging database", "namespace": SHARED, "limit": 50}
    r = await http.post("/v1/recall", json={**ask, "include_relations": True}, headers=h)
    assert_nothing_private(team, r)
    found = {m["id"]: m for m in r.json()["memories"]}
    assert set(found) == set(team.shared.values())
    s = found[team.shared["s"]]
    assert [x["memory"]["id"] for x in s["relations"]] == [team.shared["s2"]]
    assert s["_signals"]["relation_count"] == 1  # the relations into private count for nothing
    for fmt in ("text", "structured"):
        r = await http.post("/v1/context", headers=h,
                              json={"query": "staging database", "namespace": SHARED,
                                    "format": fmt, "include_metadata": True})  # fmt: skip
        assert_nothing_private(team, r)
        assert all(m["_signals"]["relation_count"] <= 1 for m in r.json()["memories"])
    assert_nothing_private(team, await http.get("/v1/memories", headers=h,
                                                  params={"namespace": SHARED}))  # fmt: skip
    assert_nothing_private(team, await http.get(f"/v1/memories/{team.shared['s']}", headers=h))
    # the owner still sees every relation, and counts them all
    r = await http.post("/v1/recall", json={**ask, "include_relations": True},
                          headers=auth(team.owner))  # fmt: skip
    s = {m["id"]: m for m in r.json()["memories"]}[team.shared["s"]]
    assert {x["memory"]["id"] for x in s["relations"]} == {team.shared["s2"], *team.private}
    assert s["_signals"]["relation_count"] == 3


def without(body: dict[str, Any], memory_id: str) -> str:
    """An error body as text, the id it names taken out."""
    return httpx.Response(200, json=body).text.replace(memory_id, "<id>")


@pytest.mark.parametrize("who", ["grantee", "agent"])
async def test_an_id_outside_reach_is_not_found_as_a_missing_one(
    http: httpx.AsyncClient, server: str, who: str
) -> None:
    team = await set_up(http, server, "write")
    h = team.headers[who]
    hidden, missing = next(iter(team.private)), str(uuid.uuid4())
    calls = [("GET", {}), ("PATCH", {"content": "overwritten"}), ("PATCH", {"importance": 1.0})]
    for method, body in calls:
        kw: dict[str, Any] = {"json": body} if body else {}
        outside = await http.request(method, f"/v1/memories/{hidden}", headers=h, **kw)
        absent = await http.request(method, f"/v1/memories/{missing}", headers=h, **kw)
        assert outside.status_code == absent.status_code == 404, (outside.text, absent.text)
        assert without(outside.json(), hidden) == without(absent.json(), missing)
        assert PRIVATE not in outside.text and team.owner.address.lower() not in outside.text
    # the routes no grant or agent key covers refuse whatever the id: the answer says nothing
    for path in ("relations", "history"):
        outside = await http.get(f"/v1/memories/{hidden}/{path}", headers=h)
        absent = await http.get(f"/v1/memories/{missing}/{path}", headers=h)
        assert forbidden(outside) and outside.text == absent.text
    r = await http.get(f"/v1/memories/{hidden}", headers=auth(team.owner))
    assert r.json()["content"] == team.private[hidden]  # untouched


OWNER_ONLY_PATCHES = [{"expires_at": SOON}, {"expires_at": None}, {"immutable": True},
                      {"content": "The staging database is gone", "immutable": True}]  # fmt: skip
OWNER_ONLY_STORES = [{"expires_at": SOON}, {"immutable": True},
                     {"key": "staging/db", "immutable": True},
                     {"key": "staging/db", "expires_at": SOON}]  # fmt: skip


@pytest.mark.parametrize("who", ["grantee", "agent"])
async def test_only_the_owner_ends_or_locks_a_memory(
    http: httpx.AsyncClient, server: str, who: str
) -> None:
    team = await set_up(http, server, "write")
    h, s = team.headers[who], team.shared["s"]
    keyed = await store_memory(http, team.owner, "The staging database host is db-stg-2",
                               namespace=SHARED, key="staging/db", expires_at=SOON)  # fmt: skip
    before = {i: (await http.get(f"/v1/memories/{i}", headers=auth(team.owner))).json()
              for i in (s, keyed["id"])}  # fmt: skip
    for body in OWNER_ONLY_PATCHES:
        r = await http.patch(f"/v1/memories/{s}", json=body, headers=h)
        assert forbidden(r), (body, r.text)
        assert set(r.json()["error"]["details"]["fields"]) <= {"expires_at", "immutable"}
    for body in OWNER_ONLY_STORES:
        r = await http.post("/v1/store", headers=h,
                              json={"content": f"Stored by the {who}", "namespace": SHARED,
                                    **body})  # fmt: skip
        assert forbidden(r), (body, r.text)
    after = {i: (await http.get(f"/v1/memories/{i}", headers=auth(team.owner))).json()
             for i in before}  # fmt: skip
    assert after == {i: {**m, "access_count": after[i]["access_count"],
                         "accessed_at": after[i]["accessed_at"]}
                     for i, m in before.items()}  # fmt: skip
    owners = await http.get("/v1/memories", params={"namespace": SHARED},
                              headers=auth(team.owner))  # fmt: skip
    assert {m["content"] for m in owners.json()["memories"]}.isdisjoint({f"Stored by the {who}"})
    # what a write covers still goes through
    r = await http.patch(f"/v1/memories/{s}", headers=h,
                           json={"content": "The staging database is db-stg-3",
                                 "tags": ["infra"], "importance": 0.9, "pinned": True,
                                 "immutable": False})  # fmt: skip
    assert r.status_code == 200, r.text
    assert (r.json()["content"], r.json()["tags"], r.json()["importance"]) == (
        "The staging database is db-stg-3", ["infra"], 0.9)  # fmt: skip
    assert not r.json()["immutable"] and "expires_at" not in r.json()
    # a keyed store over the owner's memory leaves its expiry as the owner set it
    r = await http.post("/v1/store", headers=h, json={
        "content": "The staging database host is db-stg-3", "namespace": SHARED,
        "key": "staging/db"})  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["id"] == keyed["id"] and r.json()["memory"]["expires_at"].startswith("2999")
    # the owner sets them
    for body in ({"expires_at": "2998-01-01T00:00:00Z"}, {"immutable": True}):
        r = await http.patch(f"/v1/memories/{s}", json=body, headers=auth(team.owner))
        assert r.status_code == 200, r.text
    assert r.json()["immutable"] and r.json()["expires_at"].startswith("2998")
