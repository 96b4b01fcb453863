"""Storing memories, each recorded in history: one item (`store`), a keyed one as a new version of
the memory holding its key (`upsert_by_key`), a batch (`store_batch`), and memories exactly as
given (`create_without_dedup`, `insert`). An item is checked into MemoryFields here
(`prepare_store`); what it then becomes, new or merged into a duplicate, is app/memory/dedup.py's.
"""

from __future__ import annotations

import logging
import unicodedata
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from app.access.rules import OWNER, Actor
from app.ai.embedders import Embedder
from app.ai.facts import FactModel, FactModelError
from app.ai.heuristics import HeuristicFactModel
from app.core.contract import DEFAULT_NAMESPACE
from app.core.errors import InvalidInput, MemoryImmutable, VersionConflict
from app.core.schemas import parse_future_time, parse_time
from app.history import service as history
from app.infra.metrics import phase
from app.memory.actor import check_owner_only
from app.memory.dates import event_time, now_utc
from app.memory.dedup import StoreOutcome, merge_tags, store_deduplicated
from app.memory.fields import MemoryFields, NewMemory
from app.memory.repository import reads, writes
from app.memory.schemas import DEFAULT_MEMORY_TYPE, MAX_TAGS, StoreIn, check_metadata, check_tags
from app.memory.settled import content_columns, insert_settled, new_memory, update_settled
from app.memory.sizes import RecentSizes

log = logging.getLogger("engram")


class StoreSetup(Protocol):
    """What a store reads of the memory service (app/memory/service.py)."""

    embedder: Embedder
    passage_embedder: Embedder | None  # what a long memory's passages are embedded with
    sizes: RecentSizes  # picks the near-duplicate lookup: a scan or an index walk
    fact_model: FactModel  # merges two versions of a keyed memory (on_conflict "merge")
    merge_namespaces: frozenset[str]  # where a stale keyed store merges unless it says otherwise


def store_history(outcome: StoreOutcome, action: history.Action) -> history.Change | None:
    """A stored item's history: `action` for a new memory, an update for what a merge changed."""
    if not outcome.deduplicated:
        return history.created(outcome.row, action)
    return history.updated(outcome.before, outcome.row) if outcome.before is not None else None


def prepare_store(item: StoreIn, now: datetime, field: str = "") -> MemoryFields:
    if not item.content.strip():
        raise InvalidInput(f"{field or ''}content must not be blank", {"field": f"{field}content"})
    metadata = dict(item.metadata or {})
    if item.tags is not None or "tags" in metadata:
        tags = merge_tags(check_tags(metadata.get("tags", []), f"{field}metadata.tags"), item.tags)
        if len(tags) > MAX_TAGS:
            raise InvalidInput(f"{field}tags: at most {MAX_TAGS} tags", {"field": f"{field}tags"})
        metadata["tags"] = tags
    check_metadata(metadata, f"{field}metadata")
    return MemoryFields(
        content=item.content,
        metadata=metadata,
        importance=item.importance,
        namespace=item.namespace or DEFAULT_NAMESPACE,
        memory_type=item.memory_type or DEFAULT_MEMORY_TYPE,
        session_id=item.session_id,
        agent_id=item.agent_id,
        expires_at=parse_future_time(item.expires_at, f"{field}expires_at", now),
        pinned=bool(item.pinned),
        immutable=bool(item.immutable),
        **_event_fields(item, now, field),
        key=_checked_key(item.key, field),
        source=item.source,
        written_by=None,  # the request's (app/guard/service.py); an import sets its own
        writer=None,
        surface=None,
    )


def _stored_over(fields: MemoryFields, item: StoreIn) -> dict[str, Any]:
    """The columns a keyed store sets on the memory it updates, beside the content: what it
    says (its metadata and tags, importance, type, ids, pinning), and its expiry, kept or
    cleared as it says (a store describes the memory as it now is)."""
    changes: dict[str, Any] = {"expires_at": fields.expires_at}
    if item.metadata is not None or item.tags is not None:
        changes["metadata"] = fields.metadata
    for column in ("importance", "memory_type", "session_id", "agent_id", "pinned", "immutable"):
        if getattr(item, column) is not None:
            changes[column] = getattr(fields, column)
    return changes


def _checked_key(key: str | None, field: str = "") -> str | None:
    """A store's key in NFC (as names are compared), refused when blank."""
    if key is None:
        return None
    if not key.strip():
        raise InvalidInput(f"{field}key must not be blank", {"field": f"{field}key"})
    return unicodedata.normalize("NFC", key)


def _event_fields(item: StoreIn, now: datetime, field: str) -> dict[str, datetime | None]:
    """occurred_at and mentioned_at of a new memory (app/memory/dates.py)."""
    found = event_time(item.content, parse_time(item.occurred_at, f"{field}occurred_at"), now)
    if found is None:
        return {"occurred_at": None, "mentioned_at": None}
    return {"occurred_at": found.occurred_at, "mentioned_at": found.mentioned_at}


async def store(
    setup: StoreSetup, conn: asyncpg.Connection, wallet: str, item: StoreIn, actor: Actor = OWNER
) -> tuple[StoreOutcome, int]:
    """`actor`: a grantee or an agent key sets no owner-only field (app/memory/actor.py)."""
    check_owner_only(actor, item)
    prepared = prepare_store(item, now_utc())
    if prepared.key is not None:
        return await upsert_by_key(setup, conn, wallet, prepared, item, actor=actor)
    with phase("store", "embed"):
        embedded = await setup.embedder.embed([prepared.content])
    with phase("store", "sql"):
        [outcome] = await store_deduplicated(
            conn, wallet, [prepared], embedded.vectors, True, sizes=setup.sizes,
            embedding_model=setup.embedder.model_name, passage_embedder=setup.passage_embedder,
        )  # fmt: skip
        await history.record(conn, wallet, [store_history(outcome, "create")])
    return outcome, embedded.tokens


async def upsert_by_key(
    setup: StoreSetup,
    conn: asyncpg.Connection,
    wallet: str,
    fields: MemoryFields,
    item: StoreIn,
    action: history.Action = "create",
    actor: Actor = OWNER,
) -> tuple[StoreOutcome, int]:
    """A keyed store: the memory holding the key in its namespace, as a new version, or a
    new memory at version 1 (no dedup: the key says which memory it is). Stores of one key
    take turns until commit, so none is lost; a writer that names the version it read meets
    a newer one as its `on_conflict` says. A grantee's or an agent key's store leaves the
    memory's expiry as the owner set it (it may not set one: app/memory/actor.py)."""
    assert fields.key is not None
    await writes.lock_key(conn, wallet, fields.namespace, fields.key)
    current = await reads.holding_key(conn, wallet, fields.namespace, fields.key, True)
    if current is None:
        embedded = await setup.embedder.embed([fields.content])
        new = new_memory(wallet, fields, embedded.vectors[0], setup.embedder.model_name)
        [row] = await insert(setup, conn, wallet, [new], action)
        return StoreOutcome(row, False), embedded.tokens
    if current["immutable"]:
        raise MemoryImmutable(current["id"], "changed")
    content, tokens, merged = await _content_for(setup, current, fields.content, item)
    embedded = await setup.embedder.embed([content])
    changes = content_columns(content, embedded.vectors[0], setup.embedder.model_name)
    changes |= _stored_over(fields, item)
    if actor.for_owner:
        del changes["expires_at"]
    after = await update_settled(conn, wallet, current, changes, setup.passage_embedder)
    change = history.versioned(current, after)
    if merged:
        change.changes["merged"] = {"stored": current["content"], "sent": fields.content}
    await history.record(conn, wallet, [change])
    return StoreOutcome(after, False), tokens + embedded.tokens


async def _content_for(
    setup: StoreSetup, current: asyncpg.Record, sent: str, item: StoreIn
) -> tuple[str, int, bool]:
    """What a keyed store writes over `current`: what it sent, unless it read an older
    version: then a 412 (reject, the default), what it sent (overwrite), or both merged
    (merge; the default in ENGRAM_MERGE_NAMESPACES) -> (content, tokens, merged)."""
    expected = item.expected_version
    if expected is None or expected == current["version"]:
        return sent, 0, False
    default = "merge" if current["namespace"] in setup.merge_namespaces else "reject"
    mode = item.on_conflict or default
    if mode == "reject":
        raise VersionConflict(current["id"], expected, current["version"])
    if mode == "overwrite":
        return sent, 0, False
    return (*await _merged(setup, [current["content"], sent]), True)


async def _merged(setup: StoreSetup, contents: list[str]) -> tuple[str, int]:
    """Two versions as one: the LLM's merge, or the offline one when it fails or is not
    configured."""
    try:
        return await setup.fact_model.merge(contents)
    except FactModelError as exc:
        log.warning("merging offline: %s", exc)
        return await HeuristicFactModel().merge(contents)


async def store_batch(
    setup: StoreSetup,
    conn: asyncpg.Connection,
    wallet: str,
    items: list[StoreIn],
    near_dedup: bool = True,
    history_action: history.Action = "create",
    exact_dedup: bool = True,
) -> tuple[list[StoreOutcome], int]:
    """`history_action` is what new memories are recorded as ("import" for the import API);
    without `exact_dedup` (and `near_dedup`) every item becomes a new memory."""
    now = now_utc()
    prepared = [prepare_store(item, now, f"memories[{i}].") for i, item in enumerate(items)]
    if any(p.key is not None for p in prepared):
        return await _store_batch_with_keys(
            setup, conn, wallet, items, prepared, near_dedup, history_action, exact_dedup
        )
    embedded = await setup.embedder.embed([p.content for p in prepared])
    if exact_dedup:
        outcomes = await store_deduplicated(
            conn, wallet, prepared, embedded.vectors, near_dedup, sizes=setup.sizes,
            embedding_model=setup.embedder.model_name, passage_embedder=setup.passage_embedder,
        )  # fmt: skip
    else:
        new = [
            new_memory(wallet, p, v, setup.embedder.model_name)
            for p, v in zip(prepared, embedded.vectors, strict=True)
        ]
        outcomes = [
            StoreOutcome(r, False)
            for r in await insert_settled(conn, wallet, new, setup.passage_embedder)
        ]
    # one statement for the whole batch's history
    await history.record(conn, wallet, [store_history(o, history_action) for o in outcomes])
    return outcomes, embedded.tokens


async def _store_batch_with_keys(
    setup: StoreSetup,
    conn: asyncpg.Connection,
    wallet: str,
    items: list[StoreIn],
    prepared: list[MemoryFields],
    near_dedup: bool,
    history_action: history.Action,
    exact_dedup: bool,
) -> tuple[list[StoreOutcome], int]:
    """A batch holding keyed items: each keyed one upserted in turn (as a keyed store), the
    others stored together as a batch is; outcomes in the items' order."""
    outcomes: list[StoreOutcome | None] = [None] * len(items)
    tokens = 0
    for i, (item, fields) in enumerate(zip(items, prepared, strict=True)):
        if fields.key is not None:
            outcomes[i], used = await upsert_by_key(
                setup, conn, wallet, fields, item, history_action
            )
            tokens += used
    plain = [i for i, fields in enumerate(prepared) if fields.key is None]
    if plain:
        stored, used = await store_batch(
            setup, conn, wallet, [items[i] for i in plain], near_dedup, history_action,
            exact_dedup,
        )  # fmt: skip
        tokens += used
        for i, outcome in zip(plain, stored, strict=True):
            outcomes[i] = outcome
    return [o for o in outcomes if o is not None], tokens


async def create_without_dedup(
    setup: StoreSetup,
    conn: asyncpg.Connection,
    wallet: str,
    fields: MemoryFields,
    history_action: history.Action = "create",
) -> tuple[asyncpg.Record, int]:
    """A new memory exactly as given, without dedup (consolidation's synthesised memory)."""
    embedded = await setup.embedder.embed([fields.content])
    new = new_memory(wallet, fields, embedded.vectors[0], setup.embedder.model_name)
    [row] = await insert(setup, conn, wallet, [new], history_action)
    return row, embedded.tokens


async def insert(
    setup: StoreSetup,
    conn: asyncpg.Connection,
    wallet: str,
    new: list[NewMemory],
    history_action: history.Action,
) -> list[asyncpg.Record]:
    """New memories exactly as given, without dedup, inserted once the namespace guard settled
    them (with a long one's passages), each recorded in history as `history_action`; an
    import's chunks, embedded by the import itself."""
    rows = await insert_settled(conn, wallet, new, setup.passage_embedder)
    await history.record(conn, wallet, [history.created(r, history_action) for r in rows])
    return rows
