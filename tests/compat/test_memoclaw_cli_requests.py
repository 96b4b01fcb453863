"""MemoClaw's command-line client (npm `memoclaw` 1.9.0) against a served Engram: each request
below is the one a CLI command sends (src/commands/*.ts), and each check is what that command
reads from the answer: status, the fields it prints, and counts matching what was written."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest

from tests.support.facts import FACTS
from tests.support.memoclaw_clients import CliClient, assert_no_nulls

COFFEE = [
    "I drink my coffee black, no sugar",
    "The office coffee machine is broken on Mondays",
    "Dark roast beans from the corner shop are my favourite coffee",
    "Espresso after lunch keeps me focused",
]
OTHER = [
    "The quarterly report is due on the first Friday of the month",
    "Deploys happen on Thursdays after the standup",
    "My editor theme is dark mode with a large font",
]


@pytest.fixture
def cli(engram_url: str) -> Iterator[CliClient]:
    client = CliClient(engram_url)
    yield client
    client.close()


def distinct_texts(n: int) -> list[str]:
    """`n` memory texts unlike each other enough that store's dedup keeps them all (two facts
    each, every pair of facts once: max cosine 0.92 for 150 of them)."""
    pairs = list(itertools.combinations(range(len(FACTS)), 2))[::2]
    assert n <= len(pairs)
    return [f"{FACTS[i]}. Separately, {FACTS[j].lower()}" for i, j in pairs[:n]]


def overfetch_limit(requested: int | None) -> int:
    """src/dates.ts overfetchLimit: 3x the limit, between 100 and 1,000 (--since/--until)."""
    return min(max((requested if requested is not None else 20) * 3, 100), 1000)


def iso_js(moment: datetime) -> str:
    """Date.prototype.toISOString(): milliseconds and Z."""
    return (
        moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    )


def store_batch(cli: CliClient, contents: list[str], **shared: object) -> list[str]:
    """`memoclaw store --batch` (cmdStoreBatch): chunks of 100, shared options on each item."""
    ids: list[str] = []
    for i in range(0, len(contents), 100):
        chunk = [{"content": c, **shared} for c in contents[i : i + 100]]
        result = cli.ok("POST", "/v1/store/batch", {"memories": chunk})
        assert isinstance(result["ids"], list) and len(result["ids"]) == len(chunk)
        ids.extend(result["ids"])
    return ids


def list_page(cli: CliClient, **params: object) -> dict:
    return cli.ok("GET", f"/v1/memories?{urlencode(params)}")


# ---- store, get, update ------------------------------------------------------------------------


def test_store_get_update_pin(cli: CliClient) -> None:
    # cmdStore: tags go in metadata; the CLI prints result.id
    body = {"content": COFFEE[0], "importance": 0.8, "metadata": {"tags": ["drinks", "daily"]},
            "namespace": "home", "memory_type": "preference", "pinned": True}  # fmt: skip
    result = cli.ok("POST", "/v1/store", body, status=201)
    assert set(result) == {"id", "stored", "deduplicated", "tokens_used", "memory"}
    assert result["stored"] is True and result["deduplicated"] is False
    assert_no_nulls(result)
    memory_id = result["id"]
    # cmdGet: result.memory || result, then its fields
    mem = cli.ok("GET", f"/v1/memories/{memory_id}")
    assert mem["content"] == COFFEE[0] and mem["metadata"]["tags"] == ["drinks", "daily"]
    assert mem["importance"] == 0.8 and mem["namespace"] == "home" and mem["pinned"] is True
    assert_no_nulls(mem)
    # cmdUpdate and cmdUnpin
    body = {"importance": 0.95, "memory_type": "decision", "metadata": {"tags": ["drinks"]}}
    updated = cli.ok("PATCH", f"/v1/memories/{memory_id}", body)
    assert updated["importance"] == 0.95 and updated["memory_type"] == "decision"
    assert cli.ok("PATCH", f"/v1/memories/{memory_id}", {"pinned": False})["pinned"] is False


def test_diff_reads_old_and_new(cli: CliClient) -> None:
    """cmdDiff prints `field: old → new` from changes[field].old / .new; `(none)` was all it
    could print before."""
    memory_id = cli.ok("POST", "/v1/store", {"content": OTHER[0], "importance": 0.8})["id"]
    cli.ok("PATCH", f"/v1/memories/{memory_id}", {"importance": 0.95})
    cli.ok("PATCH", f"/v1/memories/{memory_id}", {"content": OTHER[1]})
    history = cli.ok("GET", f"/v1/memories/{memory_id}/history")["history"]
    assert len(history) == 3
    importance = history[1]["changes"]["importance"]
    assert (importance["old"], importance["new"]) == (0.8, 0.95)
    content = history[2]["changes"]["content"]
    assert (content["old"], content["new"]) == (OTHER[0], OTHER[1])  # a line diff of these
    assert all(entry["created_at"] and entry["id"] for entry in history)


# ---- recall, list and search with --since: over-fetching up to 1,000 --------------------------


def test_recall_since_and_limit_above_100(cli: CliClient) -> None:
    store_batch(cli, COFFEE + OTHER)
    since = iso_js(datetime.now(UTC) - timedelta(minutes=5))
    # `memoclaw recall coffee --since 5m` (limit 20 by default: over-fetches 100)
    result = cli.ok("POST", "/v1/recall", {"query": "coffee", "limit": 100, "since": since})
    # every coffee memory, and of the others only what passes the default similarity floor
    coffee_and_relevant = {m["content"] for m in result["memories"]}
    assert set(COFFEE) <= coffee_and_relevant <= set(COFFEE + OTHER)
    assert all(m["similarity"] >= 0.2 for m in result["memories"])
    top = result["memories"][0]
    assert top["content"] in COFFEE and isinstance(top["similarity"], float)
    assert "tags" in top["metadata"] or top["metadata"] == {}
    # `--limit 50 --since 1w`: 150, more than the contract's 100
    result = cli.ok("POST", "/v1/recall", {"query": "coffee", "limit": 150, "since": since})
    assert {m["content"] for m in result["memories"]} == coffee_and_relevant
    # since is applied: nothing is newer than a moment from now
    future = iso_js(datetime.now(UTC) + timedelta(minutes=1))
    assert cli.ok("POST", "/v1/recall", {"query": "coffee", "limit": 100, "since": future}) == {
        "memories": [],
        "query_tokens": result["query_tokens"],
    }
    # and until, and relative forms as the CLI's own shorthand writes them
    until_past = iso_js(datetime.now(UTC) - timedelta(days=1))
    body = {"query": "coffee", "limit": 100, "until": until_past}
    assert cli.ok("POST", "/v1/recall", body)["memories"] == []
    body = {"query": "coffee", "limit": 100, "since": "1d"}
    assert {m["content"] for m in cli.ok("POST", "/v1/recall", body)["memories"]} == (
        coffee_and_relevant
    )
    body = {"query": "coffee", "limit": 100, "until": "2w"}
    assert cli.ok("POST", "/v1/recall", body)["memories"] == []


def test_list_search_and_core_over_fetch(cli: CliClient) -> None:
    store_batch(cli, COFFEE, metadata={"tags": ["coffee"]}, pinned=True)
    store_batch(cli, OTHER)
    since = iso_js(datetime.now(UTC) - timedelta(hours=1))
    # `memoclaw list --limit 40 --since 1h`: limit 120 plus since
    page = list_page(cli, limit=overfetch_limit(40), since=since)
    assert page["total"] == len(COFFEE + OTHER) and len(page["memories"]) == page["total"]
    assert all(m["created_at"] and isinstance(m["importance"], float) for m in page["memories"])
    page = list_page(cli, limit=overfetch_limit(400), since=iso_js(datetime.now(UTC)))
    assert page["memories"] == [] and page["total"] == 0
    # `memoclaw search coffee --since 1h --limit 400`: POST /v1/search with 1,000
    body = {"query": "coffee", "limit": overfetch_limit(400), "tags": ["coffee"]}
    found = cli.ok("POST", "/v1/search", body)["memories"]
    assert {m["content"] for m in found} == {c for c in COFFEE if "coffee" in c.lower()}
    # `memoclaw core --since 1h`: GET /v1/core with the over-fetched limit
    core = cli.ok("GET", f"/v1/core?limit={overfetch_limit(None)}")
    assert len(core["memories"]) == len(COFFEE)
    assert cli.request("GET", "/v1/core?limit=1000").status_code == 200
    assert cli.request("GET", "/v1/memories?limit=1001").status_code == 422


def test_watch_lists_newest_first(cli: CliClient) -> None:
    for content in OTHER:  # one by one: each its own created_at
        cli.ok("POST", "/v1/store", {"content": content}, status=201)
    # cmdWatch's query: sort=created_at&order=desc&limit=20
    newest = list_page(cli, sort="created_at", order="desc", limit=20)["memories"]
    oldest = list_page(cli, sort="created_at", order="asc", limit=20)["memories"]
    assert [m["id"] for m in newest] == [m["id"] for m in reversed(oldest)]
    assert [m["content"] for m in oldest] == OTHER
    by_importance = list_page(cli, sort="importance", order="desc", limit=20)["memories"]
    assert len(by_importance) == len(OTHER)
    assert cli.request("GET", "/v1/memories?sort=colour").status_code == 422


# ---- pages of 1,000: export, tags, namespaces, purge --------------------------------------------


def test_export_tags_and_namespaces_page_by_1000(cli: CliClient) -> None:
    written = distinct_texts(150)
    store_batch(cli, written[:100], metadata={"tags": ["garden", "even"]}, namespace="yard")
    store_batch(cli, written[100:], metadata={"tags": ["garden"]})
    # cmdExport: namespace, tags, limit=1000, then offset pages until a short one
    exported, offset = [], 0
    while True:
        page = list_page(cli, limit="1000", offset=offset)
        exported.extend(page["memories"])
        if len(page["memories"]) < 1000:
            break
        offset += 1000
    assert sorted(m["content"] for m in exported) == sorted(written)
    for m in exported:
        assert_no_nulls(m)  # what `export` writes to a file
    # fetchAllTags: the same pages, counting metadata.tags
    counts = Counter(t for m in exported for t in m["metadata"].get("tags", []))
    assert counts == {"garden": 150, "even": 100}
    # fetchNamespaces: GET /v1/namespaces, ns.name and ns.count
    namespaces = cli.ok("GET", "/v1/namespaces")["namespaces"]
    assert {n["name"]: n["count"] for n in namespaces} == {"yard": 100, "default": 50}
    # the namespace fallback pages too: limit=1000&offset=0
    assert len(list_page(cli, limit=1000, offset=0)["memories"]) == 150


def test_purge_since_pages_then_bulk_deletes(cli: CliClient) -> None:
    ids = store_batch(cli, distinct_texts(120), namespace="scratch")
    store_batch(cli, OTHER, namespace="keep")
    since = datetime.now(UTC) - timedelta(hours=1)
    # cmdPurge --since 1h --namespace scratch: collect ids from pages of 1,000, then 100 at a time
    to_delete: list[str] = []
    offset = 0
    while True:
        page = list_page(cli, limit="1000", namespace="scratch", offset=offset)
        memories = page["memories"]
        if not memories:
            break
        to_delete += [m["id"] for m in memories if datetime.fromisoformat(m["created_at"]) >= since]
        if len(memories) < 1000:
            break
        offset += 1000
    assert sorted(to_delete) == sorted(ids)
    deleted = 0
    for i in range(0, len(to_delete), 100):
        deleted += cli.ok("POST", "/v1/memories/bulk-delete", {"ids": to_delete[i : i + 100]})[
            "deleted"
        ]
    assert deleted == 120
    assert list_page(cli, limit=1, namespace="scratch")["total"] == 0
    assert list_page(cli, limit=1, namespace="keep")["total"] == len(OTHER)


def test_import_through_batch_store(cli: CliClient) -> None:
    """cmdImport: {memories:[...]} in batches of 100, each entry's known fields copied."""
    exported = [
        {
            "content": c,
            "importance": 0.6,
            "metadata": {"tags": ["imported"]},
            "namespace": "moved",
            "memory_type": "observation",
        }
        for c in OTHER
    ]
    result = cli.ok("POST", "/v1/store/batch", {"memories": exported})
    assert len(result["ids"]) == len(OTHER) and result["count"] == len(OTHER)
    assert list_page(cli, namespace="moved", limit=100)["total"] == len(OTHER)


# ---- relations and graph -----------------------------------------------------------------------


def test_relations_list_and_graph_read_target_id(cli: CliClient) -> None:
    a, b, c = store_batch(cli, OTHER)
    # cmdRelations create: {target_id, relation_type}
    created = cli.ok("POST", f"/v1/memories/{a}/relations", {"target_id": b,
                                                              "relation_type": "supports"})  # fmt: skip
    cli.ok("POST", f"/v1/memories/{c}/relations", {"target_id": a, "relation_type": "related_to"})
    # cmdRelations list prints id, relation_type and target_id (cmdGraph too)
    relations = cli.ok("GET", f"/v1/memories/{a}/relations")["relations"]
    by_id = {r["id"]: r for r in relations}
    assert by_id[created["id"]]["target_id"] == b and by_id[created["id"]]["source_id"] == a
    incoming = next(r for r in relations if r["id"] != created["id"])
    assert (incoming["source_id"], incoming["target_id"]) == (c, a)
    assert incoming["relation_type"] == "related_to" and incoming["direction"] == "incoming"
    assert cli.ok("DELETE", f"/v1/memories/{a}/relations/{created['id']}")["deleted"] is True


# ---- context, ingest, extract, migrate, consolidate --------------------------------------------


def test_context_takes_limit(cli: CliClient) -> None:
    store_batch(cli, COFFEE + OTHER)
    # cmdContext: {query, limit}; prints result.context
    result = cli.ok("POST", "/v1/context", {"query": "dark", "limit": 2})
    assert result["memories_used"] == 2 and isinstance(result["context"], str)
    assert len(result["memories"]) == 2
    assert cli.ok("POST", "/v1/context", {"query": "dark"})["memories_used"] == len(COFFEE + OTHER)


def test_ingest_reports_memories_created(cli: CliClient) -> None:
    text = "I moved to Lisbon in March. My sister Ana is a nurse. I prefer tea in the evening."
    # cmdIngest: {text, auto_relate: true}; prints memories_created
    result = cli.ok("POST", "/v1/ingest", {"text": text, "auto_relate": True}, status=201)
    assert isinstance(result["memories_created"], int) and result["memories_created"] >= 1
    assert result["memories_created"] == list_page(cli, limit=100)["total"]
    # cmdExtract: {text}
    result = cli.ok("POST", "/v1/memories/extract", {"text": "My dog is called Rex."})
    assert result["facts_stored"] == 1


def test_migrate_files(cli: CliClient) -> None:
    files = [
        {"filename": "notes/garden.md", "content": "# Garden\n\nTomatoes need sun.\n"},
        {"filename": "notes/work.md", "content": "# Work\n\nStandup at nine.\n"},
    ]
    result = cli.ok("POST", "/v1/migrate", {"files": files, "namespace": "notes"}, status=201)
    assert result["files_processed"] == 2 and result["memories_created"] == 2
    assert result["memories_deduplicated"] == 0 and "errors" not in result
    again = cli.ok("POST", "/v1/migrate", {"files": files, "namespace": "notes"}, status=201)
    assert again["memories_created"] == 0 and again["memories_deduplicated"] == 2


def test_consolidate_reports_merged(cli: CliClient) -> None:
    # two near-duplicates (cosine 0.93: store keeps both, consolidation at 0.85 folds them)
    store_batch(cli, ["I drink my coffee black, no sugar",
                      "I take my coffee black without any sugar", OTHER[0]])  # fmt: skip
    # cmdConsolidate --dry-run: prints merged_count ?? merged, and clusters.length
    body = {"min_similarity": 0.85, "dry_run": True}
    result = cli.ok("POST", "/v1/memories/consolidate", body)
    assert result["merged"] == result["memories_merged"] == 1 and len(result["clusters"]) == 1
    assert list_page(cli, limit=10)["total"] == 3  # a dry run
    result = cli.ok("POST", "/v1/memories/consolidate", {"min_similarity": 0.85})
    assert result["merged"] == 1 and list_page(cli, limit=10)["total"] == 2


# ---- status, stats, suggested ------------------------------------------------------------------


def test_status_stats_and_suggested(cli: CliClient) -> None:
    empty = cli.ok("GET", "/v1/stats")
    assert empty["total_memories"] == 0
    assert_no_nulls(empty)
    store_batch(cli, OTHER)
    status = cli.ok("GET", "/v1/free-tier/status")
    assert status["free_tier_remaining"] == status["free_tier_total"] - 1
    stats = cli.ok("GET", "/v1/stats")
    assert stats["total_memories"] == len(OTHER) and stats["oldest_memory"]
    suggested = cli.ok("GET", "/v1/suggested?limit=10")
    assert len(suggested["suggested"]) == len(OTHER) and isinstance(suggested["categories"], dict)
