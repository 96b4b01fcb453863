"""MemoClaw's MCP server (npm `memoclaw-mcp` 1.17.1) against a served Engram: each request below
is the one a tool handler builds (src/handlers/*.ts, undefined arguments dropped as
JSON.stringify does), and each check is what the handler reads and what the tool's output schema
(src/tools.ts) demands of the structured result it builds from the answer."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.support.db import count_memories
from tests.support.facts import FACTS
from tests.support.memoclaw_clients import (
    UNDEFINED,
    McpClient,
    assert_mcp_memory,
    assert_mcp_relation,
    assert_no_nulls,
    viem_wallet_auth,
)


@pytest.fixture
def mcp(engram_url: str) -> Iterator[McpClient]:
    client = McpClient(engram_url)
    yield client
    client.close()


def arg(args: dict[str, Any], name: str) -> Any:
    return args.get(name, UNDEFINED)


def store(mcp: McpClient, **args: Any) -> dict[str, Any]:
    """memoclaw_store: the body from the given arguments, `result.memory || result` back."""
    body = {"content": args.pop("content"), **args}
    result = mcp.ok("POST", "/v1/store", body, status=201)
    memory: dict[str, Any] = result.get("memory") or result
    assert_mcp_memory(memory)  # structuredContent: {memory}
    return memory


def bulk_store(mcp: McpClient, memories: list[dict[str, Any]], **shared: str) -> list[dict]:
    """memoclaw_bulk_store / memoclaw_import: POST /v1/store/batch, `result.memories` back."""
    fields = ("content", "importance", "tags", "namespace", "memory_type", "pinned",
              "expires_at", "immutable", "metadata")  # fmt: skip
    batch = [{**{k: m[k] for k in fields if k in m}, **shared} for m in memories]
    result = mcp.ok("POST", "/v1/store/batch", {"memories": batch})
    stored: list[dict[str, Any]] = result.get("memories") or result.get("data") or []
    # the tool reports `${stored.length} stored, ${failed.length} failed`
    assert len(stored) == len(memories) and (result.get("failed") or []) == []
    for memory in stored:
        assert_mcp_memory(memory)
    return stored


def recall_body(**args: Any) -> dict[str, Any]:
    """memoclaw_recall's request: filters only when one is given."""
    filters = {k: args[k] for k in ("tags", "memory_type", "after", "before", "pinned",
                                    "metadata") if k in args}  # fmt: skip
    return {
        "query": args["query"],
        "limit": arg(args, "limit"),
        "min_similarity": arg(args, "min_similarity"),
        "filters": filters or UNDEFINED,
        "namespace": arg(args, "namespace"),
        "session_id": arg(args, "session_id"),
        "agent_id": arg(args, "agent_id"),
        "include_relations": arg(args, "include_relations"),
    }


def list_query(**args: Any) -> str:
    """memoclaw_list / memoclaw_count's query string (tags joined, metadata as JSON)."""
    params: dict[str, str] = {}
    for name in ("limit", "offset", "namespace", "memory_type", "tags", "session_id", "agent_id",
                 "after", "before", "sort", "order", "pinned", "metadata"):  # fmt: skip
        if name not in args:
            continue
        value = args[name]
        if name == "tags":
            value = ",".join(value)
        elif name == "pinned":
            value = "true" if value else "false"
        elif name == "metadata":
            value = json.dumps(value, separators=(",", ":"))
        params[name] = str(value)
    return urlencode(params)


def _distinct(n: int) -> list[str]:
    pairs = list(itertools.combinations(range(len(FACTS)), 2))[::2]
    return [f"{FACTS[i]}. Separately, {FACTS[j].lower()}" for i, j in pairs[:n]]


# ---- store, get, update, pin: the memory object ------------------------------------------------


def test_store_get_update_pin_give_schema_valid_memories(mcp: McpClient) -> None:
    # no session/agent/expiry: the schema types them strings, so they must not be null
    memory = store(mcp, content=FACTS[0], tags=["ui"], importance=0.7)
    assert memory["content"] == FACTS[0] and memory["tags"] == ["ui"]
    assert not {"session_id", "agent_id", "expires_at"} & set(memory)
    full = store(mcp, content=FACTS[1], session_id="s1", agent_id="a1",
                 expires_at="2099-01-01T00:00:00Z", metadata={"source": "slack"})  # fmt: skip
    assert (full["session_id"], full["agent_id"]) == ("s1", "a1")
    assert full["expires_at"].startswith("2099-01-01")
    got = mcp.ok("GET", f"/v1/memories/{memory['id']}")
    assert_mcp_memory(got.get("memory") or got)
    assert_no_nulls(got)
    for body in ({"importance": 0.9, "tags": ["ui", "theme"]}, {"pinned": True}, {"pinned": False}):
        updated = mcp.ok("PATCH", f"/v1/memories/{memory['id']}", body)
        assert_mcp_memory(updated.get("memory") or updated)
    assert updated["tags"] == ["ui", "theme"] and updated["pinned"] is False


def test_bulk_store_reports_what_it_stored(mcp: McpClient) -> None:
    memories = [{"content": c, "tags": ["bulk"]} for c in FACTS[2:7]]
    stored = bulk_store(mcp, memories, session_id="s-bulk")
    assert [m["content"] for m in stored] == FACTS[2:7]
    assert all(m["session_id"] == "s-bulk" and m["tags"] == ["bulk"] for m in stored)


# ---- recall and search with the filters the tools send -----------------------------------------


def test_recall_filters_pinned_and_metadata(mcp: McpClient) -> None:
    bulk_store(mcp, [
        {"content": FACTS[0], "pinned": True, "metadata": {"source": "slack", "channel": "#ui"}},
        {"content": FACTS[11], "metadata": {"source": "slack"}},
        {"content": FACTS[14], "pinned": True, "metadata": {"source": "email"}},
    ])  # fmt: skip

    def recalled(**args: Any) -> list[str]:
        # min_similarity 0 (the tool's argument): the filters decide here, not relevance
        result = mcp.ok("POST", "/v1/recall", recall_body(query="dark", min_similarity=0, **args))
        for m in result["memories"]:
            assert_mcp_memory(m, recalled=True)
        return sorted(m["content"] for m in result["memories"])

    assert len(recalled()) == 3
    assert recalled(pinned=True) == sorted([FACTS[0], FACTS[14]])
    assert recalled(pinned=False) == [FACTS[11]]
    assert recalled(metadata={"source": "slack"}) == sorted([FACTS[0], FACTS[11]])
    assert recalled(metadata={"source": "slack", "channel": "#ui"}) == [FACTS[0]]
    assert recalled(metadata={"source": "slack"}, pinned=True) == [FACTS[0]]
    assert recalled(metadata={"source": "fax"}) == []
    # memoclaw_check_duplicates: {query: content, limit, min_similarity}
    body = {"query": FACTS[11], "limit": 5, "min_similarity": 0.7}
    duplicates = mcp.ok("POST", "/v1/recall", body)["memories"]
    assert duplicates[0]["content"] == FACTS[11] and duplicates[0]["similarity"] >= 0.9
    # a malformed known filter is still refused
    bad = recall_body(query="dark", metadata="source=slack")
    assert mcp.request("POST", "/v1/recall", bad).status_code == 422


def test_search_and_list_and_count_apply_metadata_pinned_sort(mcp: McpClient) -> None:
    bulk_store(mcp, [
        {"content": FACTS[1], "importance": 0.9, "metadata": {"team": "ops"}, "pinned": True},
        {"content": FACTS[3], "importance": 0.2, "metadata": {"team": "ops"}},
        {"content": FACTS[9], "importance": 0.5, "metadata": {"team": "dev"}},
    ])  # fmt: skip
    # memoclaw_list: sort, order, metadata, pinned as query parameters
    page = mcp.ok("GET", f"/v1/memories?{list_query(metadata={'team': 'ops'})}")
    assert page["total"] == 2 and {m["content"] for m in page["memories"]} == {FACTS[1], FACTS[3]}
    ordered = mcp.ok("GET", f"/v1/memories?{list_query(sort='importance', order='asc')}")
    assert [m["importance"] for m in ordered["memories"]] == [0.2, 0.5, 0.9]
    for m in ordered["memories"]:
        assert_mcp_memory(m)
    pinned = mcp.ok("GET", f"/v1/memories?{list_query(pinned=True, metadata={'team': 'ops'})}")
    assert [m["content"] for m in pinned["memories"]] == [FACTS[1]]
    # memoclaw_count: GET /v1/memories/count with the same filters
    count = mcp.ok("GET", f"/v1/memories/count?{list_query(metadata={'team': 'ops'})}")
    assert count["count"] == 2
    # memoclaw_search: GET /v1/memories/search?q=... with the list's filters
    query = urlencode({"q": "the", "limit": 10, "metadata": '{"team":"dev"}'})
    found = mcp.ok("GET", f"/v1/memories/search?{query}")["memories"]
    assert [m["content"] for m in found] == [FACTS[9]]
    # and its sort/order (best match first without them)
    query = urlencode({"q": "the", "limit": 10, "sort": "importance", "order": "asc"})
    found = mcp.ok("GET", f"/v1/memories/search?{query}")["memories"]
    assert [m["importance"] for m in found] == sorted(m["importance"] for m in found)
    assert len(found) == 3
    # malformed metadata: a 422, not an unfiltered list
    assert mcp.request("GET", "/v1/memories?metadata=%7Bteam").status_code == 422
    assert mcp.request("GET", "/v1/memories?metadata=%5B1%5D").status_code == 422


# ---- context, suggested, tags, namespaces, core, stats, history --------------------------------


def test_context_answers_a_memories_array(mcp: McpClient) -> None:
    bulk_store(mcp, [{"content": c} for c in FACTS[:6]])
    # memoclaw_context: {query, limit}; maps over result.memories || result.context
    result = mcp.ok("POST", "/v1/context", {"query": "dark", "limit": 2})
    assert isinstance(result["memories"], list) and len(result["memories"]) == 2
    assert result["memories_used"] == 2
    for m in result["memories"]:
        assert_mcp_memory(m)


def test_suggested_tags_namespaces_core_stats(mcp: McpClient) -> None:
    empty = mcp.ok("GET", "/v1/stats")  # structuredContent is the answer itself
    assert_no_nulls(empty)
    bulk_store(mcp, [
        {"content": FACTS[0], "tags": ["ui", "editor"], "namespace": "work", "pinned": True},
        {"content": FACTS[1], "tags": ["ops"], "namespace": "work"},
        {"content": FACTS[2], "tags": ["ui"]},
    ])  # fmt: skip
    suggestions = mcp.ok("GET", "/v1/suggested?limit=10")["suggestions"]
    assert len(suggestions) == 3
    for m in suggestions:
        assert_mcp_memory(m)
    # memoclaw_tags: result.tags, each {tag, count} (a bare name would count 0)
    tags = mcp.ok("GET", "/v1/tags")["tags"]
    assert {t["tag"]: t["count"] for t in tags} == {"ui": 2, "editor": 1, "ops": 1}
    assert all(isinstance(t["count"], int) for t in tags)
    # memoclaw_namespaces: n.namespace || n.name, n.count
    namespaces = mcp.ok("GET", "/v1/namespaces")["namespaces"]
    assert {n["name"]: n["count"] for n in namespaces} == {"work": 2, "default": 1}
    # memoclaw_core_memories: /v1/core-memories
    core = mcp.ok("GET", "/v1/core-memories?limit=1000")["memories"]
    assert [m["content"] for m in core] == [FACTS[0]]
    for m in core:
        assert_mcp_memory(m)
    stats = mcp.ok("GET", "/v1/stats")
    assert stats["total_memories"] == 3 and isinstance(stats["oldest_memory"], str)
    assert_no_nulls(stats)


def test_history_lists_changed_fields(mcp: McpClient) -> None:
    memory = store(mcp, content=FACTS[5])
    mcp.ok("PATCH", f"/v1/memories/{memory['id']}", {"importance": 0.9})
    history = mcp.ok("GET", f"/v1/memories/{memory['id']}/history")["history"]
    assert len(history) == 2 and history[1]["changed_fields"] == ["importance"]
    assert all(isinstance(f, str) for entry in history for f in entry["changed_fields"])


# ---- relations and graph -----------------------------------------------------------------------


def test_relations_and_graph_carry_both_ends(mcp: McpClient) -> None:
    a, b, c = (m["id"] for m in bulk_store(mcp, [{"content": x} for x in FACTS[6:9]]))
    # memoclaw_create_relation: result.relation || result
    created = mcp.ok("POST", f"/v1/memories/{a}/relations",
                     {"target_id": b, "relation_type": "supports", "metadata": {"why": "x"}})  # fmt: skip
    assert_mcp_relation(created.get("relation") or created)
    mcp.ok("POST", f"/v1/memories/{c}/relations", {"target_id": a, "relation_type": "related_to"})
    # memoclaw_list_relations: the output schema requires source_id and target_id
    relations = mcp.ok("GET", f"/v1/memories/{a}/relations")["relations"]
    assert len(relations) == 2
    for r in relations:
        assert_mcp_relation(r)
    assert {(r["source_id"], r["target_id"]) for r in relations} == {(a, b), (c, a)}
    # memoclaw_graph walks neighbours: target_id === here ? source_id : target_id
    neighbours = {r["source_id"] if r["target_id"] == a else r["target_id"] for r in relations}
    assert neighbours == {b, c}


def test_consolidate_keeps_to_the_agent(mcp: McpClient) -> None:
    near = ["I drink my coffee black, no sugar", "I take my coffee black without any sugar"]
    bulk_store(mcp, [{"content": c} for c in near], agent_id="agent-a")
    bulk_store(mcp, [{"content": FACTS[20]}], agent_id="agent-b")
    # memoclaw_consolidate: {namespace?, agent_id?, min_similarity?, mode?, dry_run?}
    body = {"min_similarity": 0.85, "dry_run": True}
    assert len(mcp.ok("POST", "/v1/memories/consolidate", body)["clusters"]) == 1
    body = {"agent_id": "agent-b", "min_similarity": 0.85, "dry_run": True}
    assert mcp.ok("POST", "/v1/memories/consolidate", body)["clusters"] == []
    body = {"agent_id": "agent-a", "min_similarity": 0.85}
    result = mcp.ok("POST", "/v1/memories/consolidate", body)
    assert result["merged"] == 1 and len(result["clusters"]) == 1
    assert mcp.ok("GET", "/v1/memories/count?agent_id=agent-b")["count"] == 1
    body = {"agent_id": "a\u0000b"}
    assert mcp.request("POST", "/v1/memories/consolidate", body).status_code == 422


# ---- export, migrate, ingest, extract, batch update, delete namespace --------------------------


def test_export_jsonl(mcp: McpClient) -> None:
    bulk_store(mcp, [{"content": c, "namespace": "exp"} for c in FACTS[10:14]])
    # memoclaw_export with format jsonl: parses JSON, result.memories, then writes the lines
    result = mcp.ok("GET", f"/v1/export?{urlencode({'namespace': 'exp', 'format': 'jsonl'})}")
    assert result["format"] == "jsonl" and result["count"] == 4
    assert sorted(m["content"] for m in result["memories"]) == sorted(FACTS[10:14])
    for m in result["memories"]:
        assert_mcp_memory(m)
    # a caller asking for JSON lines outright gets them
    r = mcp.http.get(
        "/v1/export?format=jsonl&namespace=exp",
        headers={"x-wallet-auth": viem_wallet_auth(mcp.account), "accept": "application/x-ndjson"},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert sorted(m["content"] for m in lines) == sorted(FACTS[10:14])


def test_migrate_sends_deduplicate_and_dry_run(mcp: McpClient, database_url: str) -> None:
    files = [
        {"filename": "a.md", "content": "# Garden\n\nTomatoes need full sun.\n"},
        {"filename": "b.md", "content": "# Garden\n\nTomatoes need full sun.\n"},  # same text
    ]

    def migrate(**extra: Any) -> dict[str, Any]:
        # memoclaw_migrate: namespace defaults to 'migrated', deduplicate is always sent
        body = {"files": files, "namespace": "migrated", "deduplicate": True, **extra}
        result: dict[str, Any] = mcp.ok("POST", "/v1/migrate", body, status=201)
        assert isinstance(result["files_processed"], int)
        assert isinstance(result["memories_created"], int)
        return result

    preview = migrate(dry_run=True)
    assert preview["memories_created"] == 1 and preview["memories_deduplicated"] == 1
    assert asyncio.run(count_memories(database_url, mcp.account.address)) == 0  # stored nothing
    assert migrate()["memories_created"] == 1
    assert migrate(deduplicate=False)["memories_created"] == 2  # every section, repeats kept
    assert asyncio.run(count_memories(database_url, mcp.account.address)) == 3
    bad = {"files": files, "deduplicate": "yes"}
    assert mcp.request("POST", "/v1/migrate", bad).status_code == 422


def test_ingest_and_extract(mcp: McpClient) -> None:
    # memoclaw_ingest: {messages, text, namespace, session_id, agent_id, auto_relate}
    body = {"messages": UNDEFINED, "text": "My sister Ana is a nurse. I moved to Lisbon in March.",
            "namespace": UNDEFINED, "session_id": UNDEFINED, "agent_id": UNDEFINED,
            "auto_relate": True}  # fmt: skip
    result = mcp.ok("POST", "/v1/ingest", body, status=201)
    assert isinstance(result["memories_created"], int) and result["memories_created"] >= 1
    listed = mcp.ok("GET", "/v1/memories?limit=100")
    assert listed["total"] == result["memories_created"]
    # memoclaw_extract: structuredContent is the answer itself
    body = {"messages": [{"role": "user", "content": "My dog is called Rex."}]}
    extracted = mcp.ok("POST", "/v1/memories/extract", body)
    assert extracted["facts_stored"] == 1
    assert_no_nulls(extracted)


def test_batch_update_and_delete_namespace(mcp: McpClient) -> None:
    stored = bulk_store(mcp, [{"content": c, "namespace": "tmp"} for c in _distinct(5)])
    # memoclaw_batch_update: POST /v1/memories/batch-update {updates}
    updates = [{"id": m["id"], "importance": 0.9} for m in stored]
    result = mcp.ok("POST", "/v1/memories/batch-update", {"updates": updates})
    assert result["updated"] == 5
    # memoclaw_delete_namespace: pages of 100 at offset = failures so far, DELETE each
    deleted = 0
    while True:
        page = mcp.ok(
            "GET", f"/v1/memories?{urlencode({'limit': 100, 'offset': 0, 'namespace': 'tmp'})}"
        )
        if not page["memories"]:
            break
        for m in page["memories"]:
            assert mcp.ok("DELETE", f"/v1/memories/{m['id']}")["deleted"] is True
            deleted += 1
        if len(page["memories"]) < 100:
            break
    assert deleted == 5
    assert mcp.ok("GET", "/v1/memories/count?namespace=tmp")["count"] == 0
