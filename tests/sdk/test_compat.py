"""The official `memoclaw` Python SDK (1.0.0), pointed at a served Engram over real HTTP, calls
every endpoint Engram implements without an exception and parses the values Engram meant."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from memoclaw import AsyncMemoClaw, MemoClaw
from memoclaw.errors import NotFoundError, ValidationError
from memoclaw.types import StoreInput, UpdateInput

from tests.support.sdk import sdk_kwargs


@pytest.fixture
def account() -> LocalAccount:
    return Account.create()


@pytest.fixture
def sdk(engram_url: str, account: LocalAccount, tmp_path: Path) -> Iterator[MemoClaw]:
    with MemoClaw(private_key=account.key.hex(), **sdk_kwargs(engram_url, tmp_path)) as client:
        yield client


@pytest.fixture
async def async_sdk(
    engram_url: str, account: LocalAccount, tmp_path: Path
) -> AsyncIterator[AsyncMemoClaw]:
    async with AsyncMemoClaw(
        private_key=account.key.hex(), **sdk_kwargs(engram_url, tmp_path)
    ) as client:
        yield client


def _future(days: int = 30) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat()


def test_store_batch_recall_list_get(sdk: MemoClaw, account: LocalAccount) -> None:
    stored = sdk.store(
        "The user prefers dark mode in every editor",
        importance=0.8,
        tags=["ui", "editor"],
        namespace="prefs",
        memory_type="preference",
        metadata={"source": "chat"},
    )
    assert stored.stored is True and stored.deduplicated is False and stored.tokens_used > 0

    batch = sdk.store_batch(
        [
            StoreInput(
                content="Quarterly revenue grew 12 percent",
                memory_type="observation",
                tags=["finance"],
            ),
            {"content": "We decided to ship the beta on Friday", "memory_type": "decision"},
            {"content": "Project Falcon uses PostgreSQL with pgvector", "memory_type": "project"},
        ]
    )
    assert batch.stored is True and batch.count == 3 and len(set(batch.ids)) == 3
    assert batch.deduplicated_count == 0 and batch.tokens_used > 0

    recalled = sdk.recall("what theme does the user like?")
    assert recalled.memories[0].id == stored.id
    top = recalled.memories[0]
    assert top.content == "The user prefers dark mode in every editor"
    assert top.memory_type == "preference" and top.namespace == "prefs"
    assert 0 < top.similarity <= 1 and top.importance == pytest.approx(0.8)
    assert top.metadata["tags"] == ["ui", "editor"] and top.metadata["source"] == "chat"
    assert top.signals is not None and top.signals.vector == pytest.approx(top.similarity)
    assert recalled.query_tokens > 0

    # The SDK sends filters nested under `filters`; each one must narrow the result.
    assert {m.id for m in sdk.recall("revenue", tags=["finance"]).memories} == {batch.ids[0]}
    only_decisions = sdk.recall("ship", memory_type="decision", limit=10).memories
    assert [m.id for m in only_decisions] == [batch.ids[1]]
    assert [m.id for m in sdk.recall("editor", namespace="prefs").memories] == [stored.id]
    with_relations = sdk.recall("dark mode", include_relations=True, limit=1).memories
    assert with_relations[0].relations == []

    page = sdk.list(limit=2, offset=1)
    assert page.total == 4 and page.limit == 2 and page.offset == 1 and len(page.memories) == 2
    assert sdk.list(namespace="prefs").total == 1
    assert [m.id for m in sdk.list(tags=["finance"]).memories] == [batch.ids[0]]
    assert [m.id for m in sdk.list(memory_type="project").memories] == [batch.ids[2]]

    # Pages of 3 over 4 memories: the iterator must follow offset/total to the second page.
    assert {m.id for m in sdk.iter_memories(batch_size=3)} == {stored.id, *batch.ids}

    memory = sdk.get(stored.id)
    assert memory.id == stored.id and memory.user_id == account.address.lower()
    assert memory.content == "The user prefers dark mode in every editor"
    assert memory.metadata == {"source": "chat", "tags": ["ui", "editor"]}
    assert memory.namespace == "prefs" and memory.memory_type == "preference"
    assert memory.embedding_model and memory.pinned is False and memory.immutable is False
    assert memory.deleted_at is None and memory.expires_at is None

    # The fluent builder is store() underneath; `search` is the SDK's alias for recall.
    built = sdk.store_builder().content("A memory about kayaks").importance(0.4).execute()
    assert sdk.search("kayaks", limit=1).memories[0].id == built.id


def test_updates(sdk: MemoClaw) -> None:
    memory_id = sdk.store("The staging server runs on port 8080", expires_at=_future()).id
    assert sdk.get(memory_id).expires_at is not None

    # Content change: re-embedded, so recall must find it by the new words.
    updated = sdk.update(memory_id, content="The staging server moved to port 9090")
    assert updated.id == memory_id and updated.content == "The staging server moved to port 9090"
    assert sdk.get(memory_id).content == "The staging server moved to port 9090"
    assert sdk.recall("which port does staging use now?").memories[0].id == memory_id

    updated = sdk.update(
        memory_id, importance=0.9, pinned=True, memory_type="project", metadata={"tags": ["infra"]}
    )
    assert updated.importance == pytest.approx(0.9) and updated.pinned is True
    assert updated.memory_type == "project" and updated.metadata["tags"] == ["infra"]
    assert updated.content == "The staging server moved to port 9090"

    # expires_at=None is sent as JSON null, which clears the expiry.
    assert sdk.update(memory_id, expires_at=None).expires_at is None
    assert sdk.get(memory_id).expires_at is None

    other_id = sdk.store("Deploys happen on Tuesdays").id
    result = sdk.update_batch(
        [
            {"id": memory_id, "importance": 0.3},
            UpdateInput(id=other_id, content="Deploys happen on Thursdays"),
            {"id": "00000000-0000-0000-0000-000000000000", "importance": 0.1},
        ]
    )
    assert result.updated == 2 and result.failed == 1 and result.tokens_used > 0
    by_id = {item.id: item for item in result.results}
    assert by_id[memory_id].updated and by_id[other_id].updated
    missing = by_id["00000000-0000-0000-0000-000000000000"]
    assert missing.updated is False and missing.error
    assert sdk.get(memory_id).importance == pytest.approx(0.3)
    assert sdk.get(other_id).content == "Deploys happen on Thursdays"


def test_delete_and_delete_batch(sdk: MemoClaw) -> None:
    ids = sdk.store_batch(
        [
            {"content": "alpha fact about llamas"},
            {"content": "beta fact about comets"},
            {"content": "gamma fact about volcanoes"},
        ]
    ).ids

    result = sdk.delete(ids[0])
    assert result.deleted is True and result.id == ids[0]
    with pytest.raises(NotFoundError) as raised:
        sdk.get(ids[0])
    assert raised.value.status_code == 404 and raised.value.code == "NOT_FOUND"

    results = sdk.delete_batch(ids[1:])
    assert sorted((r.id, r.deleted) for r in results) == sorted((i, True) for i in ids[1:])
    assert sdk.list().total == 0
    assert sdk.recall("facts about animals and comets").memories == []

    # The SDK's delete_namespace is list + batch-delete until the namespace is empty.
    sdk.store_batch(
        [
            {"content": "scratch one", "namespace": "scratch"},
            {"content": "scratch two about kites", "namespace": "scratch"},
        ]
    )
    kept = sdk.store("kept outside the scratch namespace").id
    assert sdk.delete_namespace("scratch").deleted_count == 2
    assert [m.id for m in sdk.list().memories] == [kept]


def test_search_stats_namespaces_status_ping(sdk: MemoClaw, account: LocalAccount) -> None:
    # A fresh wallet: stats must still parse (avg_importance 0, not null; empty lists).
    empty = sdk.stats()
    assert empty.total_memories == 0 and empty.avg_importance == 0
    assert empty.by_type == [] and empty.by_namespace == []
    assert sdk.list_namespaces().namespaces == []

    sdk.store("Alice likes green tea", importance=0.2, namespace="people", tags=["drinks"])
    sdk.store("Bob likes black coffee", importance=0.6, namespace="people")
    sdk.store("The office coffee machine is broken", importance=1.0, memory_type="observation")

    found = sdk.text_search("coffee")
    assert found.total == 2
    assert {m.content for m in found.memories} == {
        "Bob likes black coffee",
        "The office coffee machine is broken",
    }
    assert [m.content for m in sdk.text_search("coffee", namespace="people").memories] == [
        "Bob likes black coffee"
    ]
    # The SDK sends search tags as a JSON array.
    assert [m.content for m in sdk.text_search("tea", tags=["drinks"]).memories] == [
        "Alice likes green tea"
    ]

    stats = sdk.stats()
    assert stats.total_memories == 3 and stats.pinned_count == 0
    assert stats.avg_importance == pytest.approx(0.6)
    assert stats.oldest_memory and stats.newest_memory
    assert {(t.memory_type, t.count) for t in stats.by_type} == {("general", 2), ("observation", 1)}
    assert {(n.namespace, n.count) for n in stats.by_namespace} == {("people", 2), ("default", 1)}

    namespaces = sdk.list_namespaces()
    assert namespaces.total == 2
    assert {(n.name, n.count) for n in namespaces.namespaces} == {("people", 2), ("default", 1)}
    assert all(n.last_memory_at for n in namespaces.namespaces)

    # Paid calls so far: three stores. Searches, stats and namespaces are free.
    status = sdk.status()
    assert status.wallet.lower() == account.address.lower()
    assert (status.free_tier_total, status.free_tier_used) == (100, 3)
    assert status.free_tier_remaining == 97

    ping = sdk.ping()
    assert ping.ok is True and ping.auth == "signed" and ping.free_tier_remaining == 97


def test_errors_parse_into_sdk_types(sdk: MemoClaw, engram_url: str, tmp_path: Path) -> None:
    # Too many metadata keys passes the SDK's own checks, so the server's 422 must parse.
    with pytest.raises(ValidationError) as raised:
        sdk.store("too much metadata", metadata={f"k{i}": i for i in range(21)})
    assert raised.value.status_code == 422 and raised.value.code == "VALIDATION_ERROR"

    # Another wallet's memory is indistinguishable from a missing one.
    memory_id = sdk.store("a private note").id
    stranger = Account.create().key.hex()
    with MemoClaw(private_key=stranger, **sdk_kwargs(engram_url, tmp_path)) as other:
        with pytest.raises(NotFoundError):
            other.get(memory_id)
        with pytest.raises(NotFoundError):
            other.delete(memory_id)
    assert sdk.get(memory_id).content == "a private note"


async def test_async_client_store_recall(async_sdk: AsyncMemoClaw) -> None:
    stored = await async_sdk.store("The user's cat is called Miso", memory_type="preference")
    assert stored.stored is True and stored.deduplicated is False

    batch = await async_sdk.store_batch([{"content": "The user's car is a blue hatchback"}])
    assert batch.count == 1

    recalled = await async_sdk.recall("what is the name of the user's pet?")
    assert recalled.memories[0].id == stored.id
    assert recalled.memories[0].content == "The user's cat is called Miso"

    memory = await async_sdk.get(stored.id)
    assert memory.memory_type == "preference"
    updated = await async_sdk.update(stored.id, content="The user's cat is called Mochi")
    assert updated.content == "The user's cat is called Mochi"
    assert (await async_sdk.list()).total == 2
    assert (await async_sdk.delete(batch.ids[0])).deleted is True
    assert (await async_sdk.stats()).total_memories == 1
    assert (await async_sdk.ping()).ok is True
