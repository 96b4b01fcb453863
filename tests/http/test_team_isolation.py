"""Isolation stays absolute outside grants and delegations: a property-based test (hypothesis)
over random wallets, grants, delegations and operations, every read and write checked against
a model of who may do what.

Each example: three fresh wallets with a memory in each of two namespaces, and random relations
between them across the namespaces; random grants (read or write on one namespace; live,
expired or revoked) and delegations (scopes, namespaces or all; live, expired or revoked; a
later one to the same agent replaces the earlier); then random operations, each as the caller
itself, as a grantee naming an owner (x-memory-owner) or as an agent key naming its owner
(x-wallet-owner), on the REST routes and MCP's tools (an owner's own operations relate memories
too). The model says, for each, which wallet's memories it reaches, or its refusal: 404
NOT_FOUND for a memory asked for by id outside reach (as a missing one), 403 FORBIDDEN
otherwise. An allowed read must show that namespace's memories and no other, and each recalled
memory's relations (and their count) exactly as far as the caller reaches: its own wallet, or
the one namespace a grant or a namespaced agent key keeps it to. No answer, allowed or not,
holds the id or the content of a memory outside reach anywhere (but the id the call named). An
allowed write must land there; and after the operations every wallet's memories are exactly
what the model says (a refused call changed nothing).

ENGRAM_ISOLATION_EXAMPLES sets how many examples run (CI: 30; a session's longer run: 500)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient

from tests.support.api import auth, store_memory
from tests.support.team import delegate, grant

EXAMPLES = int(os.environ.get("ENGRAM_ISOLATION_EXAMPLES", "30"))
N_WALLETS = 3
NAMESPACES = ("a", "b")
COVERS = {"read": {"read", "write"}, "write": {"write"}}
# what a grant or a delegation covers, with what it needs; every other operation is refused
NEEDS = {"recall": "read", "list": "read", "get": "read", "by_key": "read", "context": "read",
         "store": "write", "update": "write", "move": "write"}  # fmt: skip
UNCOVERED = ("delete", "history", "relate", "search", "export", "mcp_recall", "mcp_store",
             "grants")  # fmt: skip
BY_ID = ("get", "update", "move", "delete", "history", "relate")  # the path names a memory
OPS = tuple(NEEDS) + UNCOVERED
STATES = ("live", "live", "expired", "revoked")  # live twice as often

wallet_index = st.integers(0, N_WALLETS - 1)
other_than = st.integers(1, N_WALLETS - 1)  # an offset: another wallet, without a filter
namespace = st.sampled_from(NAMESPACES)
grant_st = st.tuples(wallet_index, other_than, namespace, st.sampled_from(("read", "write")),
                     st.sampled_from(STATES))  # fmt: skip
# how each wallet's two first memories are related, across the namespaces: from `a` to `b`,
# back, or both ways (every wallet's are, so every read as a grantee or agent meets one)
relations_st = st.lists(st.sampled_from(("ab", "ba", "both")), min_size=N_WALLETS,
                        max_size=N_WALLETS)  # fmt: skip
delegation_st = st.tuples(
    wallet_index, other_than,
    st.sampled_from((("read",), ("write",), ("read", "write"))),
    st.one_of(st.none(), st.sampled_from((("a",), ("b",), ("a", "b")))),
    st.sampled_from(STATES),
)  # fmt: skip


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Any], list[Any], list[Any], list[str]]:
    """Grants, delegations, and operations that use them more often than chance would: three
    in four grantee and agent calls come from a pair that was given something (live or not)."""
    grants = [(o, (o + d) % N_WALLETS, *rest)
              for o, d, *rest in draw(st.lists(grant_st, min_size=1, max_size=4))]  # fmt: skip
    delegations = [(o, (o + d) % N_WALLETS, *rest)
                   for o, d, *rest in draw(st.lists(delegation_st, min_size=1,
                                                    max_size=3))]  # fmt: skip
    pairs = {"grant": [(g[1], g[0], g[2]) for g in grants],
             "agent": [(d[1], d[0], (d[3] or NAMESPACES)[0]) for d in delegations]}  # fmt: skip
    ops = []
    for _ in range(draw(st.integers(1, 10))):
        mode = draw(st.sampled_from(("own", "grant", "agent")))
        ns = draw(namespace)
        kind = draw(st.sampled_from(OPS))
        if pairs.get(mode) and draw(st.integers(0, 3)) > 0:
            caller, target, given_ns = draw(st.sampled_from(pairs[mode]))
            ns = given_ns if draw(st.booleans()) else ns
            kind = draw(st.sampled_from(tuple(NEEDS))) if draw(st.booleans()) else kind
        else:
            caller, target = draw(wallet_index), draw(wallet_index)
        ops.append((caller, mode, target, kind, ns, draw(st.integers(0, 50))))
    return grants, delegations, ops, draw(relations_st)


@dataclass
class Model:
    """Who holds which memories, and who may reach what."""

    memories: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # id: (w, ns, text)
    keys: dict[tuple[int, str, str], str] = field(default_factory=dict)  # (w, ns, key): id
    grants: set[tuple[int, int, str, str]] = field(default_factory=set)  # owner, grantee, ns, acc
    delegations: dict[tuple[int, int], tuple[set[str], set[str] | None]] = field(
        default_factory=dict
    )
    relations: list[tuple[str, str]] = field(default_factory=list)  # (source id, target id)

    def of(self, w: int, ns: str | None = None) -> dict[str, str]:
        return {i: text for i, (o, n, text) in self.memories.items()
                if o == w and (ns is None or n == ns)}  # fmt: skip

    def grant_allows(self, owner: int, grantee: int, ns: str, need: str) -> bool:
        return any((owner, grantee, ns, access) in self.grants for access in COVERS[need])

    def delegation_allows(self, owner: int, agent: int, ns: str, need: str) -> bool:
        scopes, namespaces = self.delegations[(owner, agent)]
        return bool(scopes & COVERS[need]) and (namespaces is None or ns in namespaces)

    def related(self, memory_id: str, reach: set[str]) -> list[str]:
        """The other ends of a memory's relations (both directions) within `reach`."""
        ends = [t if s == memory_id else s for s, t in self.relations if memory_id in (s, t)]
        return sorted(end for end in ends if end in reach)


@dataclass
class Op:
    caller: int
    mode: str  # own, grant, agent
    target: int
    kind: str
    ns: str
    pick: int

    def reached(self) -> int:
        return self.caller if self.mode == "own" else self.target


def reach(model: Model, op: Op) -> set[str]:
    """The memories an allowed operation may show: the caller's own wallet; the one namespace a
    grant keeps it to; an agent key's, or all the owner's when its delegation names none."""
    if op.mode == "own":
        return set(model.of(op.caller))
    if op.mode == "agent" and model.delegations[(op.target, op.caller)][1] is None:
        return set(model.of(op.target))
    return set(model.of(op.target, op.ns))


def refusal(model: Model, op: Op, memory_ns: str | None) -> int:
    """The status a refused operation answers: 404 for a memory it names on a route it may
    use but cannot read there (as if missing), 403 for everything else."""
    if op.mode == "own" or op.kind not in NEEDS or memory_ns is None:
        return 403
    if op.mode == "agent" and (op.target, op.caller) not in model.delegations:
        return 403  # no live delegation: refused before any route
    allows = model.grant_allows if op.mode == "grant" else model.delegation_allows
    return 403 if allows(op.target, op.caller, memory_ns, "read") else 404


def allowed(model: Model, op: Op, memory_ns: str | None, other_ns: str) -> bool:
    """The model's answer: may this operation reach the target's namespace?"""
    if op.mode == "own":
        return True
    if op.mode == "agent" and (op.target, op.caller) not in model.delegations:
        return False  # no live delegation: refused whatever the route
    if op.kind not in NEEDS:
        return False
    need, ns = NEEDS[op.kind], memory_ns or op.ns
    allows = model.grant_allows if op.mode == "grant" else model.delegation_allows
    if not allows(op.target, op.caller, ns, need):
        return False
    return op.kind != "move" or allows(op.target, op.caller, other_ns, "write")


def headers_for(wallets: list[LocalAccount], op: Op) -> dict[str, str]:
    h = auth(wallets[op.caller])
    if op.mode == "grant":
        h["x-memory-owner"] = wallets[op.target].address
    elif op.mode == "agent":
        h["x-wallet-owner"] = wallets[op.target].address
    return h


def mcp_call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}  # fmt: skip


MCP_ACCEPT = {"accept": "application/json, text/event-stream"}


async def perform(client: AsyncTestClient, h: dict[str, str], op: Op, memory_id: str | None,
                  other_ns: str, text: str, key: str, related: str) -> httpx.Response:  # fmt: skip
    ns = op.ns
    match op.kind:
        case "recall":
            return await client.post("/v1/recall", headers=h, json={
                "query": "memo note", "namespace": ns, "limit": 50, "include_relations": True})  # fmt: skip
        case "list":
            return await client.get(
                "/v1/memories", headers=h, params={"namespace": ns, "limit": 100}
            )
        case "get":
            return await client.get(f"/v1/memories/{memory_id}", headers=h)
        case "by_key":
            return await client.get(
                f"/v1/memories/by-key/{key}", headers=h, params={"namespace": ns}
            )
        case "context":
            return await client.post(
                "/v1/context", headers=h, json={"query": "memo note", "namespace": ns}
            )
        case "store":
            return await client.post(
                "/v1/store", headers=h, json={"content": text, "namespace": ns, "key": key}
            )
        case "update":
            return await client.patch(
                f"/v1/memories/{memory_id}", headers=h, json={"content": text}
            )
        case "move":
            return await client.patch(
                f"/v1/memories/{memory_id}", headers=h, json={"namespace": other_ns}
            )
        case "delete":
            return await client.delete(f"/v1/memories/{memory_id}", headers=h)
        case "history":
            return await client.get(f"/v1/memories/{memory_id}/history", headers=h)
        case "relate":
            return await client.post(f"/v1/memories/{memory_id}/relations", headers=h,
                                     json={"target_id": related, "relation_type": "related_to"})  # fmt: skip
        case "search":
            return await client.post(
                "/v1/search", headers=h, json={"query": "memo", "namespace": ns}
            )
        case "export":
            return await client.get("/v1/export", headers=h)
        case "mcp_recall":
            return await client.post(
                "/mcp",
                headers={**h, **MCP_ACCEPT},
                json=mcp_call("memoclaw_recall", query="memo note", namespace=ns, limit=50),
            )
        case "mcp_store":
            return await client.post(
                "/mcp",
                headers={**h, **MCP_ACCEPT},
                json=mcp_call("memoclaw_store", content=text, namespace=ns),
            )
        case "grants":
            return await client.get("/v1/grants", headers=h)
    raise AssertionError(op.kind)  # fmt: skip


def contents(items: list[dict[str, Any]]) -> set[str]:
    return {m["content"] for m in items}


def check_relations(model: Model, op: Op, recalled: list[dict[str, Any]]) -> None:
    """Each recalled memory's relations (when listed) and their count: exactly those within
    reach."""
    within = reach(model, op)
    for m in recalled:
        expected = model.related(m["id"], within)
        if "relations" in m:
            assert sorted(x["memory"]["id"] for x in m["relations"]) == expected, (op, m)
        assert m["_signals"]["relation_count"] == len(expected), (op, m)


def assert_nothing_beyond(r: httpx.Response, model: Model, visible: set[str],
                          named: str | None) -> None:  # fmt: skip
    """No id or content of a memory outside `visible` anywhere in the answer, but the id the
    call named itself."""
    for memory_id, (_, _, text) in model.memories.items():
        if memory_id not in visible:
            assert memory_id == named or memory_id not in r.text, (memory_id, r.text[:400])
            assert text not in r.text, (text, r.text[:400])


def check_allowed(r: httpx.Response, model: Model, op: Op, memory_id: str | None,
                  other_ns: str, text: str, key: str, related: str) -> None:  # fmt: skip
    """An allowed operation answered, showed only the reached namespace (and relations as far
    as the caller reaches), and the model follows its write."""
    assert r.status_code < 300, (op, r.status_code, r.text[:200])
    w, ns, body = op.reached(), op.ns, r.json()
    here = set(model.of(w, ns).values())
    match op.kind:
        case "recall":
            assert contents(body["memories"]) <= here, (op, body)
            check_relations(model, op, body["memories"])
        case "context":
            assert contents(body["memories"]) <= here, (op, body)
            check_relations(model, op, body["memories"])
        case "list":
            assert contents(body["memories"]) == here, (op, body)
        case "search":
            assert contents(body["memories"]) <= here, (op, body)
        case "get":
            assert body["content"] == model.memories[memory_id][2]
        case "by_key":
            assert body["id"] == model.keys[(w, ns, key)]
        case "export":
            assert contents(body["memories"]) == set(model.of(w).values()), (op, body)
        case "mcp_recall":
            found = body["result"]["structuredContent"]["memories"]
            assert contents(found) <= here, (op, found)
        case "store":
            model.memories[body["id"]] = (w, ns, text)
            model.keys[(w, ns, key)] = body["id"]
        case "mcp_store":
            model.memories[body["result"]["structuredContent"]["id"]] = (w, ns, text)
        case "update":
            owner, at, _ = model.memories[memory_id]
            model.memories[memory_id] = (owner, at, text)
        case "move":
            owner, _, old = model.memories[memory_id]
            model.memories[memory_id] = (owner, other_ns, old)
            model.keys = {k: i for k, i in model.keys.items() if i != memory_id}
        case "relate":
            model.relations.append((memory_id, related))
        case "history" | "grants":
            pass
        case _:
            raise AssertionError(op)


async def set_up(client: AsyncTestClient, database_url: str, grants: list[Any],
                 delegations: list[Any],
                 relations: list[str]) -> tuple[list[LocalAccount], Model]:  # fmt: skip
    wallets = [Account.create() for _ in range(N_WALLETS)]
    model = Model()
    first: dict[tuple[int, str], str] = {}
    for w, account in enumerate(wallets):
        for ns in NAMESPACES:
            text = f"memo note {uuid.uuid4().hex[:8]} of wallet {w} in {ns}"
            stored = await store_memory(client, account, text, namespace=ns)
            model.memories[stored["id"]] = (w, ns, text)
            first[(w, ns)] = stored["id"]
    for w, ways in enumerate(relations):
        a, b = first[(w, NAMESPACES[0])], first[(w, NAMESPACES[1])]
        for source, target in {"ab": [(a, b)], "ba": [(b, a)], "both": [(a, b), (b, a)]}[ways]:
            r = await client.post(f"/v1/memories/{source}/relations", headers=auth(wallets[w]),
                                  json={"target_id": target, "relation_type": "related_to"})  # fmt: skip
            assert r.status_code == 201, r.text
            model.relations.append((source, target))
    expired: list[tuple[str, str]] = []
    for owner, grantee, ns, access, state in grants:
        given = await grant(client, wallets[owner], wallets[grantee], access, ns)
        if state == "live":
            model.grants.add((owner, grantee, ns, access))
        elif state == "revoked":
            r = await client.delete(f"/v1/grants/{given['id']}", headers=auth(wallets[owner]))
            assert r.status_code == 200
        else:
            expired.append(("grants", given["id"]))
    for owner, agent, scopes, namespaces, state in delegations:
        given = await delegate(client, wallets[owner], wallets[agent], list(scopes),
                               None if namespaces is None else list(namespaces))  # fmt: skip
        model.delegations.pop((owner, agent), None)  # replaced, whatever becomes of the new one
        if state == "live":
            model.delegations[(owner, agent)] = (
                set(scopes), None if namespaces is None else set(namespaces))  # fmt: skip
        elif state == "revoked":
            r = await client.delete(f"/v1/agents/{given['id']}", headers=auth(wallets[owner]))
            assert r.status_code == 200
        else:
            expired.append(("delegations", given["id"]))
    if expired:
        conn = await asyncpg.connect(database_url)
        try:
            for table, row_id in expired:
                await conn.execute(f"UPDATE {table} SET expires_at = now() - interval '1 second'"
                                   " WHERE id = $1", row_id)  # fmt: skip
        finally:
            await conn.close()
    return wallets, model


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
async def test_every_read_and_write_follows_the_model(
    client: AsyncTestClient,
    database_url: str,
    scenario: tuple[list[Any], list[Any], list[Any], list[str]],
) -> None:
    grants, delegations, ops, relations = scenario
    wallets, model = await set_up(client, database_url, grants, delegations, relations)
    for i, raw in enumerate(ops):
        op = Op(*raw)
        if op.mode != "own" and op.target == op.caller:
            op.mode = "own"  # naming oneself is one's own wallet
        if op.mode == "own" and op.kind == "delete":
            op.kind = "history"  # the model keeps no deletions; one's own delete is tested apart
        target = sorted(model.of(op.reached()))
        memory_id = target[op.pick % len(target)]
        memory_ns = model.memories[memory_id][1] if op.kind in BY_ID else None
        if memory_ns is not None:
            op.ns = memory_ns
        other_ns = next(n for n in NAMESPACES if n != op.ns)
        keys = [k for (w, n, k) in model.keys if (w, n) == (op.reached(), op.ns)]
        key = keys[op.pick % len(keys)] if op.kind == "by_key" and keys else f"k{i}-{op.pick}"
        if op.kind == "by_key" and not keys:
            op.kind = "list"  # nothing keyed there yet
        others = [m for m in target if m != memory_id]
        related = others[op.pick % len(others)]
        if op.mode == "own" and op.kind == "relate" and (memory_id, related) in model.relations:
            op.kind = "history"  # related already
        text = f"memo note written {uuid.uuid4().hex[:8]}"
        r = await perform(client, headers_for(wallets, op), op, memory_id, other_ns, text, key,
                          related)  # fmt: skip
        ok = allowed(model, op, memory_ns, other_ns)
        event(f"{op.mode}: {'allowed' if ok else 'refused'}")  # --hypothesis-show-statistics
        named = memory_id if op.kind in BY_ID else None
        assert_nothing_beyond(r, model, reach(model, op) | {memory_id} if ok else set(), named)
        if ok:
            check_allowed(r, model, op, memory_id, other_ns, text, key, related)
        else:
            status = refusal(model, op, memory_ns)
            assert r.status_code == status, (op, model, r.status_code, r.text[:200])
            assert r.json()["error"]["code"] == {403: "FORBIDDEN", 404: "NOT_FOUND"}[status]
    for w, account in enumerate(wallets):  # a refused call changed nothing
        r = await client.get("/v1/memories", params={"limit": 100}, headers=auth(account))
        held = {m["id"]: (w, m["namespace"], m["content"]) for m in r.json()["memories"]}
        assert held == {i: m for i, m in model.memories.items() if m[0] == w}
