"""Reading and changing stored memories: by id or key, counting a use, lists, counts and search;
update (one, or a batch item by item), delete and restore, and a consolidation's folds, each
change recorded in history. New memories are app/memory/store.py's."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import asyncpg
import msgspec

from app.access.rules import OWNER, Actor
from app.ai.embedders import Embedder
from app.core.errors import (
    InvalidInput,
    KeyTaken,
    MemoryImmutable,
    MemoryNotDeleted,
    MemoryNotFound,
    VersionConflict,
)
from app.core.schemas import parse_future_time
from app.history import service as history
from app.memory.actor import check_owner_only
from app.memory.dates import now_utc
from app.memory.filters import ListOrder, MemoryFilter
from app.memory.repository import reads, writes
from app.memory.schemas import UpdateIn, check_metadata, check_tags, parse_memory_id
from app.memory.settled import content_columns, update_settled


class UpdateSetup(Protocol):
    """What an update reads of the memory service (app/memory/service.py)."""

    embedder: Embedder  # embeds a new content
    passage_embedder: Embedder | None  # what a long memory's passages are embedded with


@dataclass(frozen=True)
class UpdateOutcome:
    """One item of a batch update: applied, or refused with the error that says why."""

    memory_id: str
    error: InvalidInput | MemoryNotFound | MemoryImmutable | VersionConflict | KeyTaken | None = (
        None
    )

    @property
    def updated(self) -> bool:
        return self.error is None


# ---- read --------------------------------------------------------------------------------------


async def get(conn: asyncpg.Connection, wallet: str, memory_id: str) -> asyncpg.Record:
    rows = await reads.get_many(conn, wallet, [parse_memory_id(memory_id)])
    if not rows:
        raise MemoryNotFound(memory_id)
    return rows[0]


async def by_key(conn: asyncpg.Connection, wallet: str, namespace: str, key: str) -> asyncpg.Record:
    """The live memory named `key` in the namespace (reading it by key counts no access)."""
    row = await reads.holding_key(conn, wallet, namespace, unicodedata.normalize("NFC", key))
    if row is None or (row["expires_at"] is not None and row["expires_at"] <= now_utc()):
        raise MemoryNotFound(f"with key {key!r} in namespace {namespace!r}")
    return row


async def use(
    conn: asyncpg.Connection, wallet: str, memory_id: str, once_per: timedelta
) -> tuple[asyncpg.Record, bool]:
    """A caller used the memory (read it by id, or said it helped): count the access, at most
    once per `once_per` (scoring.py). Returns the memory and whether this use was counted."""
    row, counted = await writes.use_one(conn, wallet, parse_memory_id(memory_id), once_per)
    if row is None:
        raise MemoryNotFound(memory_id)
    return row, counted


async def search(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    query: str,
    limit: int,
    order: ListOrder | None = None,
) -> tuple[list[asyncpg.Record], int]:
    if not query.strip():
        raise InvalidInput("query must not be blank", {"field": "query"})
    return await reads.keyword_search(conn, f, query, limit, order)


# ---- update / delete ---------------------------------------------------------------------------


async def update(
    setup: UpdateSetup,
    conn: asyncpg.Connection,
    wallet: str,
    memory_id: str,
    patch: UpdateIn,
    actor: Actor = OWNER,
) -> tuple[asyncpg.Record, int]:
    """`actor`: a grantee or an agent key sets no owner-only field (app/memory/actor.py)."""
    check_owner_only(actor, patch)
    before, after, tokens = await _apply_update(setup, conn, wallet, memory_id, patch)
    await history.record(conn, wallet, [history.updated(before, after)])
    return after, tokens


async def _apply_update(
    setup: UpdateSetup, conn: asyncpg.Connection, wallet: str, memory_id: str, patch: UpdateIn
) -> tuple[asyncpg.Record, asyncpg.Record, int]:
    """The memory before and after the update, and the tokens embedding its content took."""
    rows = await reads.get_many(conn, wallet, [parse_memory_id(memory_id)], for_update=True)
    if not rows:
        raise MemoryNotFound(memory_id)
    expected = patch.expected_version
    if expected is not None and expected != rows[0]["version"]:
        raise VersionConflict(rows[0]["id"], expected, rows[0]["version"])
    changes, new_content = changes_for(rows[0], patch, now_utc())
    if "namespace" in changes:
        await _key_free(conn, wallet, rows[0], changes["namespace"])
    tokens = 0
    if new_content is not None:
        embedded = await setup.embedder.embed([new_content])
        changes.update(content_columns(new_content, embedded.vectors[0], setup.embedder.model_name))
        tokens = embedded.tokens
    if not changes:
        return rows[0], rows[0], 0
    return (
        rows[0],
        await update_settled(conn, wallet, rows[0], changes, setup.passage_embedder),
        tokens,
    )


async def update_batch(
    setup: UpdateSetup, conn: asyncpg.Connection, wallet: str, patches: list[tuple[str, UpdateIn]]
) -> tuple[list[UpdateOutcome], int]:
    """Apply each update in its own savepoint: one bad item is reported, not fatal."""
    results: list[UpdateOutcome] = []
    changes: list[history.Change | None] = []
    tokens = 0
    for memory_id, patch in patches:
        try:
            async with conn.transaction():
                before, after, used = await _apply_update(setup, conn, wallet, memory_id, patch)
            tokens += used
            changes.append(history.updated(before, after))
            results.append(UpdateOutcome(memory_id))
        except (
            MemoryNotFound,
            MemoryImmutable,
            InvalidInput,
            VersionConflict,
            KeyTaken,
        ) as exc:
            results.append(UpdateOutcome(memory_id, exc))
    # the items that applied, in one statement (a failed item's savepoint left nothing)
    await history.record(conn, wallet, changes)
    return results, tokens


def changes_for(
    current: asyncpg.Record, patch: UpdateIn, now: datetime
) -> tuple[dict[str, Any], str | None]:
    """The column changes a PATCH asks for, and the new content if it differs."""
    if current["immutable"]:
        raise MemoryImmutable(current["id"], "changed")
    changes: dict[str, Any] = {}
    new_content = None
    if patch.content is not None and patch.content != current["content"]:
        if not patch.content.strip():
            raise InvalidInput("content must not be blank", {"field": "content"})
        new_content = patch.content
    metadata = None
    if patch.metadata is not None:
        metadata = dict(patch.metadata)
    if patch.tags is not None:
        metadata = dict(metadata if metadata is not None else current["metadata"] or {})
        metadata["tags"] = check_tags(patch.tags)
    if metadata is not None:
        check_metadata(metadata)
        changes["metadata"] = metadata
    for column in (
        "importance",
        "memory_type",
        "namespace",
        "pinned",
        "session_id",
        "agent_id",
    ):
        value = getattr(patch, column)
        if value is not None:
            changes[column] = value
    if patch.immutable:
        changes["immutable"] = True
    if patch.expires_at is not msgspec.UNSET:
        changes["expires_at"] = parse_future_time(patch.expires_at, "expires_at", now)
    return changes, new_content


async def delete(conn: asyncpg.Connection, wallet: str, memory_id: str) -> UUID:
    row = await get(conn, wallet, memory_id)
    if row["immutable"]:
        raise MemoryImmutable(memory_id, "deleted")
    deleted_id: UUID = row["id"]
    await writes.soft_delete(conn, wallet, [deleted_id])
    await history.record(conn, wallet, history.deleted([deleted_id]))
    return deleted_id


async def restore(conn: asyncpg.Connection, wallet: str, memory_id: str) -> asyncpg.Record:
    """Undelete a soft-deleted memory of the wallet (Engram's addition to the contract)."""
    row = await reads.get_including_deleted(conn, wallet, parse_memory_id(memory_id))
    if row is None:
        raise MemoryNotFound(memory_id)
    if row["deleted_at"] is None:
        raise MemoryNotDeleted(memory_id)
    await _key_free(conn, wallet, row, row["namespace"])
    restored = await writes.restore(conn, wallet, row["id"])
    await history.record(conn, wallet, [history.restored(row["id"])])
    return restored


async def approve(conn: asyncpg.Connection, wallet: str, memory_id: UUID) -> asyncpg.Record:
    """Release a quarantined memory (the owner's act), recorded in its history; approving one
    that is not quarantined changes nothing. Another wallet's memory is not found."""
    row, released = await writes.approve(conn, wallet, memory_id)
    if row is None:
        raise MemoryNotFound(memory_id)
    if released:
        change = history.Change(
            row["id"], "update", {"quarantined": {"before": True, "after": False}, "approved": True}
        )
        await history.record(conn, wallet, [change])
    return row


async def _key_free(
    conn: asyncpg.Connection, wallet: str, memory: asyncpg.Record, namespace: str
) -> None:
    """A keyed memory may go live in `namespace` (moved there, or restored) only if no other
    memory holds its key there; the key's lock keeps it so until commit."""
    key = memory["key"]
    if key is None:
        return
    await writes.lock_key(conn, wallet, namespace, key)
    holder = await reads.holding_key(conn, wallet, namespace, key)
    if holder is not None and holder["id"] != memory["id"]:
        raise KeyTaken(key, namespace)


async def fold(
    conn: asyncpg.Connection,
    wallet: str,
    retagged: dict[UUID, dict[str, Any]],
    merged_into: dict[UUID, UUID],
    kept: list[history.Change],
) -> None:
    """A consolidation's changes to memories (app/consolidate/service.py), with their history in
    one statement: the keepers' new metadata (`retagged`; an immutable memory keeps its own), and
    each memory of `merged_into` soft-deleted (an immutable one stays) and recorded as a
    `consolidate` change naming the memory it went into, after the keepers' own changes
    (`kept`)."""
    if retagged:
        await writes.set_metadata_many(conn, wallet, retagged)
    deleted = []
    if merged_into:
        deleted = await writes.soft_delete(conn, wallet, list(merged_into))
    folded = (
        history.Change(
            memory_id, "consolidate",
            {"merged_into": str(merged_into[memory_id]), **history.DELETED},
        )
        for memory_id in deleted
    )  # fmt: skip
    await history.record(conn, wallet, [*kept, *folded])


async def delete_many(
    conn: asyncpg.Connection, wallet: str, raw_ids: list[str]
) -> list[dict[str, Any]]:
    parsed: dict[str, UUID | None] = {}
    for raw in raw_ids:
        try:
            parsed[raw] = parse_memory_id(raw)
        except InvalidInput:
            parsed[raw] = None
    valid = [u for u in parsed.values() if u is not None]
    found = {r["id"]: r for r in await reads.get_many(conn, wallet, valid, for_update=True)}
    deleted_ids = await writes.soft_delete(conn, wallet, valid)
    await history.record(conn, wallet, history.deleted(deleted_ids))
    deleted = set(deleted_ids)
    results = []
    for raw, uid in parsed.items():
        if uid in deleted:
            results.append({"id": raw, "deleted": True})
        elif uid in found:
            results.append({"id": raw, "deleted": False, "error": "Memory is immutable"})
        else:
            results.append({"id": raw, "deleted": False, "error": "Memory not found"})
    return results
