"""Every public method of the official `memoclaw` 1.0.0 SDK, sync and async, driven against a
served Engram over real HTTP, with the values checked (not just "no exception").

Each test runs twice, once with `MemoClaw` and once with `AsyncMemoClaw` (the `client` fixture):
`await done(client.x(...))` awaits the async client's coroutine and passes the sync client's
value through, so one body checks both. `COVERAGE` maps every public method to the test that
calls it; `test_every_public_sdk_method_is_exercised` lists the classes' methods with `inspect`,
so an SDK upgrade that adds a method fails here until a test drives it.
"""

from __future__ import annotations

import inspect
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from memoclaw import AsyncMemoClaw, MemoClaw
from memoclaw.errors import APIError, AuthenticationError, NotFoundError
from memoclaw.types import Message, StoreInput, UpdateInput

from tests.support.sdk import sdk_kwargs
from tests.support.server import start_serve, stop_serve

T = TypeVar("T")
Client = MemoClaw | AsyncMemoClaw


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Engram started as the README says (`engram serve`: embedded PostgreSQL, local embedder),
    in a fresh data directory; the overall per-wallet rate limit is lifted, since one test makes
    more than 100 calls a minute with one wallet."""
    data_dir = tmp_path_factory.mktemp("engram-sdk")
    proc, url = start_serve(
        data_dir, data_dir / "serve.log", ENGRAM_RATE_LIMIT_PER_MINUTE="0",
        ENGRAM_ACCESS_COUNTED_ONCE_PER_SECONDS="0",  # every read counts (test_suggested)
    )  # fmt: skip
    try:
        yield url
    finally:
        stop_serve(proc, data_dir, data_dir / "serve.log")


@pytest.fixture
def account() -> LocalAccount:
    return Account.create()


@pytest.fixture(params=["sync", "async"])
async def client(
    request: pytest.FixtureRequest, base_url: str, account: LocalAccount, tmp_path: Path
) -> AsyncIterator[Client]:
    kwargs = sdk_kwargs(base_url, tmp_path)
    if request.param == "sync":
        with MemoClaw(private_key=account.key.hex(), **kwargs) as sync_client:
            yield sync_client
    else:
        async with AsyncMemoClaw(private_key=account.key.hex(), **kwargs) as async_client:
            yield async_client


async def done(value: T | Awaitable[T]) -> T:
    """The async client's result awaited, the sync client's as it is."""
    if inspect.isawaitable(value):
        return await value  # type: ignore[no-any-return]
    return value


async def collect(items: Iterator[T] | AsyncIterator[T]) -> list[T]:
    if isinstance(items, AsyncIterator):
        return [item async for item in items]
    return list(items)


def _ago(hours: int = 1) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).isoformat()


def _ahead(hours: int = 1) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat()


async def _store_many(client: Client, contents: list[str], **fields: Any) -> list[str]:
    batch = await done(client.store_batch([{"content": c, **fields} for c in contents]))
    assert batch.count == len(contents) and batch.deduplicated_count == 0
    return batch.ids


# ---- store, read back, list, search ------------------------------------------------------------


async def test_store_recall_get_list(client: Client, account: LocalAccount) -> None:
    stored = await done(
        client.store(
            "The user prefers dark mode in every editor",
            importance=0.8,
            tags=["ui"],
            namespace="prefs",
            memory_type="preference",
            session_id="s-1",
            agent_id="agent-7",
            metadata={"source": "chat"},
        )
    )
    # (no check on tokens_used: the other client's run embedded the same text, and a cached
    # embedding costs no tokens)
    assert stored.stored is True and stored.deduplicated is False
    batch = await done(
        client.store_batch(
            [
                StoreInput(content="Quarterly revenue grew 12 percent", tags=["finance"]),
                # a dict item goes out as it is: top-level `tags`, the CLI's form
                {
                    "content": "We decided to ship the beta on Friday",
                    "memory_type": "decision",
                    "tags": ["release"],
                },
            ]
        )
    )
    assert batch.stored is True and batch.count == 2 and len(set(batch.ids)) == 2
    assert (await done(client.get(batch.ids[1]))).metadata == {"tags": ["release"]}
    built = await done(
        client.store_builder()
        .content("The user paddles a red kayak on weekends")
        .importance(0.4)
        .tags(["sport"])
        .namespace("hobbies")
        .execute()
    )
    assert built.stored is True

    # the same content in the same namespace is merged into the first (dedup is per namespace)
    again = await done(
        client.store("The user prefers dark mode in every editor", namespace="prefs")
    )
    assert again.deduplicated is True and again.id == stored.id

    memory = await done(client.get(stored.id))
    assert memory.id == stored.id and memory.user_id == account.address.lower()
    assert memory.content == "The user prefers dark mode in every editor"
    assert memory.metadata == {"source": "chat", "tags": ["ui"]}
    assert (memory.namespace, memory.memory_type) == ("prefs", "preference")
    assert (memory.session_id, memory.agent_id) == ("s-1", "agent-7")
    assert memory.importance == pytest.approx(0.8)
    kayak = await done(client.get(built.id))
    assert kayak.namespace == "hobbies" and kayak.metadata["tags"] == ["sport"]
    assert kayak.importance == pytest.approx(0.4)

    recalled = await done(client.recall("which colour theme does the user like?", limit=2))
    assert recalled.memories[0].id == stored.id
    assert recalled.memories[0].signals is not None
    # `search` is the SDK's alias of recall, filters included
    found = await done(client.search("what does the user do on weekends?", namespace="hobbies"))
    assert [m.id for m in found.memories] == [built.id]
    only_finance = await done(client.recall("money", tags=["finance"], min_similarity=0.0))
    assert [m.id for m in only_finance.memories] == [batch.ids[0]]
    scoped = await done(client.recall("editor", session_id="s-1", agent_id="agent-7", after=_ago()))
    assert [m.id for m in scoped.memories] == [stored.id]
    assert (await done(client.recall("editor", after=_ahead()))).memories == []

    page = await done(client.list(limit=2, offset=0))
    assert page.total == 4 and page.limit == 2 and len(page.memories) == 2
    assert [m.id for m in (await done(client.list(memory_type="decision"))).memories] == [
        batch.ids[1]
    ]
    assert [m.id for m in (await done(client.list(agent_id="agent-7"))).memories] == [stored.id]
    assert [m.id for m in (await done(client.list(session_id="s-1"))).memories] == [stored.id]
    assert [m.id for m in (await done(client.list(tags=["release", "ui"]))).memories] == [
        batch.ids[1],
        stored.id,
    ]  # any of the tags, newest first
    assert (await done(client.list(after=_ago(), before=_ahead()))).total == 4
    assert (await done(client.list(after=_ahead()))).total == 0
    assert (await done(client.list(before=_ago()))).total == 0

    texts = await done(client.text_search("kayak"))
    assert texts.total == 1 and [m.id for m in texts.memories] == [built.id]
    texts = await done(client.text_search("beta", memory_type="decision", limit=5))
    assert [m.id for m in texts.memories] == [batch.ids[1]]
    texts = await done(client.text_search("dark", session_id="s-1", agent_id="agent-7"))
    assert [m.id for m in texts.memories] == [stored.id]
    assert (await done(client.text_search("dark", after=_ahead()))).total == 0
    assert (await done(client.text_search("dark", after=_ago()))).total == 1


async def test_iterators_page_through_every_memory(client: Client) -> None:
    ids = await _store_many(
        client,
        [
            "The cat sleeps on the windowsill",
            "The build server is in Frankfurt",
            "Lunch is at noon on Mondays",
            "The Wi-Fi password rotates monthly",
            "Invoices are due on the 5th",
        ],
        namespace="paged",
    )
    other = await done(client.store("A memory in another namespace", namespace="elsewhere"))
    requests: list[tuple[str, str]] = []
    client.on_before_request(lambda method, path, body: requests.append((method, path)) or None)

    everything = await collect(client.iter_memories(batch_size=2))
    assert sorted(m.id for m in everything) == sorted([*ids, other.id])
    assert requests.count(("GET", "/v1/memories")) == 3  # pages of 2, 2 and 2

    requests.clear()
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # list_all is deprecated for iter_memories
        listed = await collect(client.list_all(batch_size=2, namespace="paged"))
    assert sorted(m.id for m in listed) == sorted(ids)
    assert requests.count(("GET", "/v1/memories")) == 3  # 2 + 2 + 1

    requests.clear()
    exported = await collect(client.iter_export(batch_size=3, namespace="paged"))
    assert sorted(m.id for m in exported) == sorted(ids)
    assert all(m.namespace == "paged" for m in exported)
    assert requests.count(("GET", "/v1/memories")) == 2  # 3 + 2

    # deleted memories only with include_deleted
    await done(client.delete(ids[0]))
    live = await collect(client.iter_export(batch_size=2, namespace="paged"))
    assert ids[0] not in {m.id for m in live} and len(live) == 4
    with_deleted = await collect(
        client.iter_export(batch_size=2, namespace="paged", include_deleted=True)
    )
    assert {m.id for m in with_deleted} == set(ids)
    assert next(m for m in with_deleted if m.id == ids[0]).deleted_at is not None


async def test_export(client: Client) -> None:
    ids = await _store_many(
        client, ["The user lives in Porto", "The user works as a baker"], namespace="me"
    )
    elsewhere = await done(
        client.store(
            "Tea is served at four",
            memory_type="observation",
            tags=["office"],
            session_id="s-9",
            agent_id="agent-9",
        )
    )

    everything = await done(client.export())
    assert everything.format == "json" and everything.count == 3
    assert {m["id"] for m in everything.memories} == {*ids, elsewhere.id}
    by_id = {m["id"]: m for m in everything.memories}
    assert by_id[ids[0]]["content"] == "The user lives in Porto"
    assert by_id[elsewhere.id]["memory_type"] == "observation"

    mine = await done(client.export(namespace="me"))
    assert mine.count == 2 and {m["id"] for m in mine.memories} == set(ids)
    observations = await done(client.export(memory_type="observation"))
    assert [m["id"] for m in observations.memories] == [elsewhere.id]
    for narrowed in (
        await done(client.export(tags=["office", "other"])),
        await done(client.export(session_id="s-9", agent_id="agent-9")),
    ):
        assert [m["id"] for m in narrowed.memories] == [elsewhere.id]
    assert (await done(client.export(after=_ago(), before=_ahead()))).count == 3
    assert (await done(client.export(before=_ago()))).count == 0

    await done(client.delete(ids[1]))
    assert {m["id"] for m in (await done(client.export(namespace="me"))).memories} == {ids[0]}
    with_deleted = await done(client.export(namespace="me", include_deleted=True))
    assert {m["id"] for m in with_deleted.memories} == set(ids)
    assert next(m for m in with_deleted.memories if m["id"] == ids[1])["deleted_at"]

    markdown = await done(client.export(format="markdown", namespace="me"))
    assert markdown.format == "markdown" and markdown.count == 1
    assert "The user lives in Porto" in "".join(markdown.memories)
    csv = await done(client.export(format="csv"))
    assert csv.format == "csv" and csv.count == 2 and "Tea is served at four" in csv.memories[0]


# ---- updates and history -----------------------------------------------------------------------


async def test_update_update_batch_and_history(client: Client) -> None:
    memory_id = (await done(client.store("The staging server runs on port 8080"))).id
    updated = await done(client.update(memory_id, content="The staging server moved to port 9090"))
    assert updated.content == "The staging server moved to port 9090"
    updated = await done(client.update(memory_id, importance=0.9, memory_type="project"))
    assert updated.importance == pytest.approx(0.9) and updated.memory_type == "project"
    assert updated.content == "The staging server moved to port 9090"

    other_id = (await done(client.store("Deploys happen on Tuesdays"))).id
    result = await done(
        client.update_batch(
            [
                UpdateInput(id=memory_id, importance=0.3),
                {"id": other_id, "content": "Deploys happen on Thursdays"},
            ]
        )
    )
    assert result.updated == 2 and result.failed == 0
    assert {r.id for r in result.results if r.updated} == {memory_id, other_id}
    assert (await done(client.get(other_id))).content == "Deploys happen on Thursdays"

    history = await done(client.get_history(memory_id))
    assert [h.memory_id for h in history] == [memory_id] * 4
    created, content_change, fields_change, batch_change = history
    assert created.changes["content"] == "The staging server runs on port 8080"
    old, new = "The staging server runs on port 8080", "The staging server moved to port 9090"
    # before/after, and old/new for MemoClaw's CLI diff
    assert content_change.changes == {
        "content": {"before": old, "after": new, "old": old, "new": new}
    }
    assert fields_change.changes["memory_type"] == {
        "before": "general",
        "after": "project",
        "old": "general",
        "new": "project",
    }
    assert fields_change.changes["importance"]["after"] == pytest.approx(0.9)
    assert batch_change.changes["importance"]["after"] == pytest.approx(0.3)
    assert created.created_at <= content_change.created_at <= batch_change.created_at
    assert len(await done(client.get_history(other_id))) == 2

    # namespace and metadata move; immutable is one-way, and then every change is a 409
    frozen = await done(
        client.update(other_id, namespace="ops", metadata={"owner": "sre"}, immutable=True)
    )
    assert (frozen.namespace, frozen.metadata, frozen.immutable) == ("ops", {"owner": "sre"}, True)
    for attempt in (
        lambda: client.update(other_id, importance=0.1),
        lambda: client.delete(other_id),
    ):
        with pytest.raises(APIError) as raised:
            await done(attempt())
        assert raised.value.status_code == 409 and raised.value.code == "CONFLICT"
    assert (await done(client.get(other_id))).importance == pytest.approx(0.5)


# ---- relations and the graph -------------------------------------------------------------------


async def test_relations_graph_find_related(client: Client) -> None:
    a, b, c, d = await _store_many(
        client,
        [
            "Project Falcon uses PostgreSQL",
            "PostgreSQL 18 was released in 2025",
            "Falcon's database runs on pgvector",
            "The team picked Litestar for Falcon",
        ],
    )
    ab = await done(client.create_relation(a, b, "related_to", metadata={"why": "database"}))
    assert (ab.source_id, ab.target_id, ab.relation_type) == (a, b, "related_to")
    assert ab.metadata == {"why": "database"} and ab.created_at
    ca = await done(client.create_relation(c, a, "supports"))
    bd = await done(client.create_relation(b, d, "contradicts"))

    relations = await done(client.list_relations(a))
    assert {(r.id, r.direction, r.memory.id) for r in relations} == {
        (ab.id, "outgoing", b),
        (ca.id, "incoming", c),
    }
    outgoing = next(r for r in relations if r.direction == "outgoing")
    assert outgoing.memory.content == "PostgreSQL 18 was released in 2025"
    assert outgoing.metadata == {"why": "database"}

    supporters = await done(client.find_related(a, relation_type="supports"))
    assert [(r.memory.id, r.direction) for r in supporters] == [(c, "incoming")]
    assert [r.memory.id for r in await done(client.find_related(a, direction="outgoing"))] == [b]
    assert await done(client.find_related(a, relation_type="contradicts")) == []

    near = await done(client.get_memory_graph(a, depth=1))
    assert near.root.id == a and near.depth == 1
    assert {n.id for n in near.nodes} == {a, b, c}
    assert {(e.source_id, e.target_id, e.relation_type) for e in near.edges} == {
        (a, b, "related_to"),
        (c, a, "supports"),
    }
    far = await done(client.get_memory_graph(a, depth=2, limit=10))
    assert {n.id for n in far.nodes} == {a, b, c, d}
    assert (b, d, "contradicts") in {(e.source_id, e.target_id, e.relation_type) for e in far.edges}
    # the SDK sends relation_types comma-joined
    typed = await done(
        client.get_memory_graph(a, depth=2, relation_types=["related_to", "contradicts"])
    )
    assert {n.id for n in typed.nodes} == {a, b, d}
    assert (
        next(n for n in typed.nodes if n.id == d).content == "The team picked Litestar for Falcon"
    )

    # recall's include_relations carries the same list shape, parsed by the SDK
    recalled = await done(
        client.recall("Project Falcon uses PostgreSQL", limit=1, include_relations=True)
    )
    assert recalled.memories[0].id == a and recalled.memories[0].relations is not None
    assert {(r.memory.id, r.direction) for r in recalled.memories[0].relations} == {
        (b, "outgoing"),
        (c, "incoming"),
    }

    deleted = await done(client.delete_relation(a, ab.id))
    assert deleted.deleted is True and deleted.id == ab.id
    assert [r.id for r in await done(client.list_relations(a))] == [ca.id]
    assert [r.id for r in await done(client.list_relations(d))] == [bd.id]
    with pytest.raises(NotFoundError):
        await done(client.delete_relation(a, ab.id))


# ---- core memories and suggestions ------------------------------------------------------------


async def test_core_memories_pin_unpin(client: Client) -> None:
    rule, note = await _store_many(
        client,
        ["Always answer in British English", "The printer is on floor 2"],
        agent_id="agent-1",
    )
    assert (await done(client.core_memories())).total == 0

    pinned = await done(client.pin_core_memory(rule))
    assert pinned.pinned is True and pinned.id == rule
    core = await done(client.core_memories(limit=10))
    assert core.total == 1 and [m.id for m in core.memories] == [rule]
    assert core.memories[0].pinned is True
    assert (await done(client.core_memories(namespace="elsewhere"))).total == 0
    assert (await done(client.core_memories(namespace="default", agent_id="agent-1"))).total == 1
    assert (await done(client.core_memories(agent_id="agent-2"))).total == 0
    assert (await done(client.get(rule))).pinned is True and not (
        await done(client.get(note))
    ).pinned

    unpinned = await done(client.unpin_core_memory(rule))
    assert unpinned.unpinned is True and unpinned.id == rule
    assert (await done(client.get(rule))).pinned is False
    assert (await done(client.core_memories())).memories == []


async def test_suggested(client: Client) -> None:
    hot, fresh = await _store_many(
        client,
        ["The user's dog is called Pretzel", "The user's flat is on Rua Augusta"],
        session_id="s-3",
        agent_id="agent-3",
    )
    recalled = await done(client.recall("what is the name of the user's dog?", limit=1))
    assert recalled.memories[0].id == hot
    for _ in range(5):  # five reads: used often and lately (the server counts every use)
        assert (await done(client.get(hot))).id == hot

    everything = await done(client.suggested())
    assert everything.categories == {"stale": 0, "fresh": 1, "hot": 1, "decaying": 0}
    assert everything.total == 2
    by_id = {s.id: s for s in everything.suggested}
    assert by_id[hot].category == "hot" and by_id[hot].access_count == 5
    assert by_id[fresh].category == "fresh" and by_id[fresh].relation_count == 0
    assert all(0 <= s.review_score <= 1 for s in everything.suggested)

    only_fresh = await done(client.suggested(category="fresh", limit=5))
    assert [s.id for s in only_fresh.suggested] == [fresh] and only_fresh.total == 1
    assert (await done(client.suggested(namespace="elsewhere"))).suggested == []
    assert (await done(client.suggested(session_id="s-3", agent_id="agent-3"))).total == 2
    assert (await done(client.suggested(agent_id="agent-4"))).total == 0


# ---- deletes and namespaces --------------------------------------------------------------------


async def test_delete_delete_batch_delete_namespace(
    client: Client, base_url: str, tmp_path: Path
) -> None:
    one, two, three = await _store_many(
        client, ["alpha fact about llamas", "beta fact about comets", "gamma fact about volcanoes"]
    )
    deleted = await done(client.delete(one))
    assert deleted.deleted is True and deleted.id == one
    with pytest.raises(NotFoundError):
        await done(client.get(one))
    # 60 ids go out in two requests of 50 and 10; unknown ids are reported, not fatal
    unknown = [str(uuid.uuid4()) for _ in range(58)]
    results = await done(client.delete_batch([two, *unknown, three]))
    assert len(results) == 60
    assert sorted(r.id for r in results if r.deleted) == sorted([two, three])
    assert all(r.error for r in results if not r.deleted)
    assert (await done(client.list())).total == 0

    scratch = await _store_many(
        client,
        [f"scratch note number {i} about topic {i * 7}" for i in range(5)],
        namespace="scratch",
    )
    kept = await done(client.store("kept outside the scratch namespace", namespace="keep"))
    # Another wallet's memories in a namespace of the same name are not touched.
    stranger = Account.create().key.hex()
    with MemoClaw(private_key=stranger, **sdk_kwargs(base_url, tmp_path)) as other:
        theirs = other.store("the stranger's scratch note", namespace="scratch").id

    namespaces = await done(client.list_namespaces())
    assert {(n.name, n.count) for n in namespaces.namespaces} == {("scratch", 5), ("keep", 1)}
    result = await done(client.delete_namespace("scratch", batch_size=2))
    assert result.deleted is True and result.deleted_count == 5
    assert [m.id for m in (await done(client.list())).memories] == [kept.id]
    namespaces = await done(client.list_namespaces())
    assert namespaces.total == 1 and namespaces.namespaces[0].name == "keep"
    for memory_id in scratch:
        with pytest.raises(NotFoundError):
            await done(client.get(memory_id))
    with MemoClaw(private_key=stranger, **sdk_kwargs(base_url, tmp_path)) as other:
        assert other.get(theirs).content == "the stranger's scratch note"

    empty = await done(client.delete_namespace("scratch"))
    assert empty.deleted is False and empty.deleted_count == 0


async def test_another_wallets_ids_are_not_found(
    client: Client, base_url: str, tmp_path: Path
) -> None:
    mine = (await done(client.store("my own note about the garden"))).id
    with MemoClaw(
        private_key=Account.create().key.hex(), **sdk_kwargs(base_url, tmp_path)
    ) as other:
        theirs, their_target = other.store_batch(
            [{"content": "the stranger's note about boats"}, {"content": "and about harbours"}]
        ).ids
        their_relation = other.create_relation(theirs, their_target, "related_to").id

        for attempt in (
            lambda: client.get(theirs),
            lambda: client.update(theirs, importance=0.1),
            lambda: client.delete(theirs),
            lambda: client.get_history(theirs),
            lambda: client.list_relations(theirs),
            lambda: client.find_related(theirs),
            lambda: client.get_memory_graph(theirs),
            lambda: client.create_relation(theirs, mine, "related_to"),
            lambda: client.create_relation(mine, theirs, "related_to"),
            lambda: client.delete_relation(theirs, their_relation),
            lambda: client.pin_core_memory(theirs),
            lambda: client.unpin_core_memory(theirs),
        ):
            with pytest.raises(NotFoundError):
                await done(attempt())
        results = await done(client.delete_batch([theirs]))
        assert [(r.id, r.deleted) for r in results] == [(theirs, False)]

        untouched = other.get(theirs)
        assert untouched.importance == pytest.approx(0.5) and untouched.pinned is False
        assert [r.id for r in other.list_relations(theirs)] == [their_relation]
    assert await done(client.list_relations(mine)) == []


async def test_stats_status_ping(client: Client, account: LocalAccount) -> None:
    await done(client.store("Alice likes green tea", importance=0.2, namespace="people"))
    await done(client.store("Bob likes coffee", importance=0.6, memory_type="preference"))
    stats = await done(client.stats())
    assert stats.total_memories == 2 and stats.avg_importance == pytest.approx(0.4)
    assert {(t.memory_type, t.count) for t in stats.by_type} == {("general", 1), ("preference", 1)}
    assert {(n.namespace, n.count) for n in stats.by_namespace} == {("people", 1), ("default", 1)}

    status = await done(client.status())
    assert status.wallet.lower() == account.address.lower()
    assert (status.free_tier_used, status.free_tier_remaining) == (2, 98)
    ping = await done(client.ping())
    assert ping.ok is True and ping.auth == "signed" and ping.free_tier_remaining == 98


# ---- conversations, consolidation, context, migration ------------------------------------------


async def test_extract_and_ingest(client: Client) -> None:
    extracted = await done(
        client.extract(
            [
                Message(role="user", content="I prefer tabs over spaces. The office is in Lisbon."),
                {"role": "assistant", "content": "Noted!"},
            ],
            namespace="chat",
            session_id="s-5",
            agent_id="agent-5",
        )
    )
    assert extracted.facts_extracted == extracted.facts_stored == 2
    assert extracted.facts_deduplicated == 0 and len(extracted.memory_ids) == 2
    facts = [await done(client.get(i)) for i in extracted.memory_ids]
    assert {m.content for m in facts} == {"I prefer tabs over spaces", "The office is in Lisbon"}
    assert {(m.namespace, m.session_id, m.agent_id) for m in facts} == {("chat", "s-5", "agent-5")}
    again = await done(
        client.extract([{"role": "user", "content": "The office is in Lisbon."}], namespace="chat")
    )
    assert again.facts_stored == 0 and again.facts_deduplicated == 1

    known = (await done(client.store("Mia has a severe peanut allergy"))).id
    ingested = await done(
        client.ingest(
            text="My daughter Mia is allergic to peanuts and tree nuts.", auto_relate=True
        )
    )
    assert ingested.facts_stored == 1 and ingested.relations_created == 1
    related = await done(client.find_related(ingested.memory_ids[0]))
    assert [(r.memory.id, r.relation_type, r.direction) for r in related] == [
        (known, "related_to", "outgoing")
    ]
    from_messages = await done(
        client.ingest(
            messages=[{"role": "user", "content": "The garage door code changed to 4471."}],
            namespace="home",
            session_id="s-6",
            agent_id="agent-6",
        )
    )
    assert from_messages.facts_stored == 1 and from_messages.relations_created == 0
    garage = await done(client.get(from_messages.memory_ids[0]))
    assert (garage.namespace, garage.session_id, garage.agent_id) == ("home", "s-6", "agent-6")


async def test_consolidate(client: Client) -> None:
    keeper, *others = await _store_many(
        client,
        [
            "The user drinks an oat milk flat white every morning",
            "Every morning the user orders a flat white with oat milk",
            "The user has a flat white with oat milk each morning",
        ],
        namespace="coffee",
    )
    await done(client.update(keeper, importance=0.9))
    unrelated = (await done(client.store("The garage door code is 4471", namespace="coffee"))).id

    dry = await done(client.consolidate(namespace="coffee", min_similarity=0.8, dry_run=True))
    assert dry.clusters_found == 1 and dry.memories_merged == 2 and dry.memories_created == 0
    assert set(dry.clusters[0].memory_ids) == {keeper, *others}
    llm_dry = await done(
        client.consolidate(namespace="coffee", min_similarity=0.8, mode="llm", dry_run=True)
    )
    assert llm_dry.clusters_found == 1 and set(llm_dry.clusters[0].memory_ids) == {keeper, *others}
    assert (await done(client.list(namespace="coffee"))).total == 4  # a dry run writes nothing

    merged = await done(client.consolidate(namespace="coffee", min_similarity=0.8, mode="rule"))
    assert merged.clusters_found == 1 and merged.memories_merged == 2
    assert merged.clusters[0].merged_into == keeper and merged.clusters[0].similarity >= 0.8
    live = {m.id for m in (await done(client.list(namespace="coffee"))).memories}
    assert live == {keeper, unrelated}
    # The folded memories are soft-deleted (so out of relation lists); their history says where
    # they went, and the keeper's what it absorbed.
    for folded in others:
        last = (await done(client.get_history(folded)))[-1]
        assert last.changes["merged_into"] == keeper and last.changes["deleted"]["after"] is True
    assert set((await done(client.get_history(keeper)))[-1].changes["merged_from"]) == set(others)


async def test_assemble_context(client: Client) -> None:
    await _store_many(
        client,
        ["The user prefers dark mode in every editor", "The user's cat is called Miso"],
        namespace="prefs",
    )
    await done(client.store("The user's secret plan is elsewhere", namespace="other"))
    await done(client.store("The user loves jazz records", session_id="s-2", agent_id="agent-2"))
    text = await done(
        client.assemble_context("which editor theme does the user like?", namespace="prefs")
    )
    assert isinstance(text.context, str) and text.memories_used == 2 and text.tokens > 0
    assert "The user prefers dark mode in every editor" in text.context
    assert "secret plan" not in text.context

    structured = await done(
        client.assemble_context(
            "what is the user's cat called?",
            namespace="prefs",
            max_memories=1,
            max_tokens=500,
            format="structured",
            include_metadata=True,
        )
    )
    assert isinstance(structured.context, dict) and structured.memories_used == 1
    assert "The user's cat is called Miso" in str(structured.context)

    scoped = await done(
        client.assemble_context(
            "what does the user like?", session_id="s-2", agent_id="agent-2", summarize=True
        )
    )
    assert scoped.memories_used == 1 and "Summary:" in scoped.context
    assert "The user loves jazz records" in scoped.context and "Miso" not in scoped.context


async def test_migrate_and_migrate_directory(client: Client, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "people.md").write_text(
        "# Alice\nAlice runs the Lisbon office.\n\n# Bob\nBob owns the billing service.\n",
        encoding="utf-8",
    )
    (notes / "infra.md").write_text("# Servers\nThe build server is in Frankfurt.\n")
    (notes / "ignored.txt").write_text("Not markdown, not migrated.")

    result = await done(client.migrate_directory(notes, namespace="imported", auto_tag=True))
    assert result.files_processed == 2 and result.memories_created == 3
    assert result.memories_deduplicated == 0 and len(result.memory_ids) == 3
    migrated = (await done(client.list(namespace="imported"))).memories
    contents = " | ".join(m.content for m in migrated)
    assert "Alice runs the Lisbon office." in contents and "Frankfurt" in contents
    assert "Not markdown" not in contents
    assert all(m.metadata.get("tags") for m in migrated)  # auto_tag

    # The same sections again are exact duplicates; a new file adds only its own.
    again = await done(
        client.migrate(
            [
                {
                    "filename": "infra.md",
                    "content": "# Servers\nThe build server is in Frankfurt.\n",
                },
                {"filename": "pets.md", "content": "The office dog is called Biscuit."},
            ],
            namespace="imported",
            session_id="import-2",
            agent_id="importer",
        )
    )
    assert again.files_processed == 2 and again.memories_created == 1
    assert again.memories_deduplicated == 1
    biscuit = await done(client.get(again.memory_ids[-1]))
    assert "Biscuit" in biscuit.content
    assert (biscuit.session_id, biscuit.agent_id) == ("import-2", "importer")


# ---- hooks, errors, lifecycle ------------------------------------------------------------------


async def test_hooks(client: Client) -> None:
    calls: list[tuple[str, str, str]] = []
    errors: list[tuple[str, str, Exception]] = []

    def before(method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any] | None:
        calls.append(("before", method, path))
        if path == "/v1/store" and body is not None:
            return {**body, "namespace": "hooked"}  # a hook may rewrite the body
        return None

    def after(method: str, path: str, result: Any) -> Any:
        calls.append(("after", method, path))
        return None

    assert client.on_before_request(before) is client
    assert client.on_after_response(after) is client
    assert client.on_error(lambda method, path, exc: errors.append((method, path, exc))) is client

    stored = await done(client.store("A memory that passed through hooks"))
    assert calls == [("before", "POST", "/v1/store"), ("after", "POST", "/v1/store")]
    assert (await done(client.get(stored.id))).namespace == "hooked"

    missing = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(NotFoundError):
        await done(client.get(missing))
    assert [(m, p) for m, p, _ in errors] == [("GET", f"/v1/memories/{missing}")]
    assert isinstance(errors[0][2], NotFoundError) and errors[0][2].status_code == 404
    assert calls[-1] == ("before", "GET", f"/v1/memories/{missing}")  # no after on an error


async def test_close(client: Client) -> None:
    assert (await done(client.ping())).ok is True
    await done(client.close())
    with pytest.raises(RuntimeError, match="closed"):
        await done(client.list())


async def test_wallet_only_mode_is_refused(base_url: str, tmp_path: Path) -> None:
    """The SDK's wallet-only mode sends a bare address as x-wallet-auth. Engram refuses it on
    purpose (docs/api-contract.md, "Identity rules": a malformed header is a 401 whatever the
    endpoint): an unsigned address would let anyone read and delete any wallet's memories."""
    address = Account.create().address
    kwargs = sdk_kwargs(base_url, tmp_path)
    with MemoClaw(wallet_address=address, **kwargs) as sync_client:
        with pytest.raises(AuthenticationError) as raised:
            sync_client.list()
        assert raised.value.status_code == 401 and raised.value.code == "UNAUTHORIZED"
    async with AsyncMemoClaw(wallet_address=address, **kwargs) as async_client:
        with pytest.raises(AuthenticationError):
            await async_client.stats()
        assert (await async_client.ping()).ok is False


async def test_async_create_validates(base_url: str, account: LocalAccount, tmp_path: Path) -> None:
    created = await AsyncMemoClaw.create(
        private_key=account.key.hex(), validate_on_init=True, **sdk_kwargs(base_url, tmp_path)
    )
    try:
        stored = await created.store("Created through the async factory")
        assert (await created.get(stored.id)).content == "Created through the async factory"
    finally:
        await created.close()


# ---- every method is driven --------------------------------------------------------------------

COVERAGE: dict[str, str] = {
    "assemble_context": "test_assemble_context",
    "close": "test_close",
    "consolidate": "test_consolidate",
    "core_memories": "test_core_memories_pin_unpin",
    "create": "test_async_create_validates",  # AsyncMemoClaw only
    "create_relation": "test_relations_graph_find_related",
    "delete": "test_delete_delete_batch_delete_namespace",
    "delete_batch": "test_delete_delete_batch_delete_namespace",
    "delete_namespace": "test_delete_delete_batch_delete_namespace",
    "delete_relation": "test_relations_graph_find_related",
    "export": "test_export",
    "extract": "test_extract_and_ingest",
    "find_related": "test_relations_graph_find_related",
    "get": "test_store_recall_get_list",
    "get_history": "test_update_update_batch_and_history",
    "get_memory_graph": "test_relations_graph_find_related",
    "ingest": "test_extract_and_ingest",
    "iter_export": "test_iterators_page_through_every_memory",
    "iter_memories": "test_iterators_page_through_every_memory",
    "list": "test_store_recall_get_list",
    "list_all": "test_iterators_page_through_every_memory",
    "list_namespaces": "test_delete_delete_batch_delete_namespace",
    "list_relations": "test_relations_graph_find_related",
    "migrate": "test_migrate_and_migrate_directory",
    "migrate_directory": "test_migrate_and_migrate_directory",
    "on_after_response": "test_hooks",
    "on_before_request": "test_hooks",
    "on_error": "test_hooks",
    "pin_core_memory": "test_core_memories_pin_unpin",
    "ping": "test_stats_status_ping",
    "recall": "test_store_recall_get_list",
    "search": "test_store_recall_get_list",
    "stats": "test_stats_status_ping",
    "status": "test_stats_status_ping",
    "store": "test_store_recall_get_list",
    "store_batch": "test_store_recall_get_list",
    "store_builder": "test_store_recall_get_list",
    "suggested": "test_suggested",
    "text_search": "test_store_recall_get_list",
    "unpin_core_memory": "test_core_memories_pin_unpin",
    "update": "test_update_update_batch_and_history",
    "update_batch": "test_update_update_batch_and_history",
}


def _public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


@pytest.mark.parametrize("sdk_class", [MemoClaw, AsyncMemoClaw], ids=lambda c: c.__name__)
def test_every_public_sdk_method_is_exercised(sdk_class: type) -> None:
    methods = _public_methods(sdk_class)
    missing = sorted(methods - COVERAGE.keys())
    assert not missing, f"{sdk_class.__name__} methods no test drives (add to COVERAGE): {missing}"
    module = inspect.getmodule(test_every_public_sdk_method_is_exercised)
    for method in sorted(methods):
        test = getattr(module, COVERAGE[method], None)
        assert test is not None, f"{method}: no test named {COVERAGE[method]}"
        source = inspect.getsource(test)
        assert f".{method}(" in source, f"{COVERAGE[method]} does not call .{method}("
        if method != "create":
            # runs with both clients through the parametrized `client` fixture
            assert "client: Client" in source, f"{COVERAGE[method]} does not run on both clients"
    # No stale entries: a method the SDK dropped must leave the map.
    assert COVERAGE.keys() <= _public_methods(MemoClaw) | _public_methods(AsyncMemoClaw)
