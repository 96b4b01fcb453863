"""Memory history: what each change did to a memory, recorded in the transaction that makes it.

Write paths (app/memory/service.py, app/consolidate/service.py) build `Change`s with the helpers
here and hand them to `record`, once per request step, whatever the number of memories. `changes`
is readable without the action (MemoClaw's SDK drops it):
- create / import: the memory's own fields as stored;
- update / consolidate (the kept memory): `{field: {"before", "after"}}` for exactly the fields
  whose value changed (never the embedding), read back with `old`/`new` too (`readable`); a
  consolidation adds `merged_from`;
- delete / restore: `{"deleted": {"before", "after"}}`; a memory folded away by a consolidation
  adds `merged_into`.

No SQL here (repository.py) and no HTTP types (controller.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg

from app.core.errors import MemoryNotFound
from app.core.schemas import iso
from app.history import repository as repo
from app.history.schemas import Action as Action  # callers write history.Action


def _metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    return dict(row["metadata"] or {})


# The fields a caller sets on a memory, as they appear on the wire (what history shows).
FIELDS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "content": lambda r: r["content"],
    "importance": lambda r: float(r["importance"]),
    "memory_type": lambda r: r["memory_type"],
    "namespace": lambda r: r["namespace"],
    "tags": lambda r: list(_metadata(r).get("tags") or []),
    "metadata": _metadata,
    "pinned": lambda r: bool(r["pinned"]),
    "immutable": lambda r: bool(r["immutable"]),
    "session_id": lambda r: r["session_id"],
    "agent_id": lambda r: r["agent_id"],
    "expires_at": lambda r: iso(r["expires_at"]),
}
# The wallet acting when it is not the owner (a grantee): what history records as `actor`. Set
# by the request that acts for an owner (each request runs in a context of its own).
ACTOR: ContextVar[str | None] = ContextVar("engram_history_actor", default=None)
DELETED = {"deleted": {"before": False, "after": True}}
RESTORED = {"deleted": {"before": True, "after": False}}


@dataclass
class Change:
    memory_id: UUID
    action: Action
    changes: dict[str, Any] = field(default_factory=dict)


def created(row: Mapping[str, Any], action: Action = "create") -> Change:
    """A new memory: its fields as stored."""
    return Change(row["id"], action, {name: read(row) for name, read in FIELDS.items()})


def diff(
    before: Mapping[str, Any], after: Mapping[str, Any], fields: Iterable[str] = FIELDS
) -> dict[str, Any]:
    """`{field: {"before", "after"}}` for the fields whose value differs."""
    changes: dict[str, Any] = {}
    for name in fields:
        old, new = FIELDS[name](before), FIELDS[name](after)
        if old != new:
            changes[name] = {"before": old, "after": new}
    return changes


def updated(
    before: Mapping[str, Any], after: Mapping[str, Any], action: Action = "update"
) -> Change | None:
    """What an update changed, or None when it changed nothing (no history row then)."""
    changes = diff(before, after)
    return Change(before["id"], action, changes) if changes else None


def versioned(before: Mapping[str, Any], after: Mapping[str, Any]) -> Change:
    """A keyed store over a memory: what changed, and always its version (a store that changes
    nothing is still a new version, recorded)."""
    changes = diff(before, after)
    changes["version"] = {"before": int(before["version"]), "after": int(after["version"])}
    return Change(before["id"], "update", changes)


def deleted(memory_ids: Iterable[UUID]) -> list[Change]:
    return [Change(memory_id, "delete", dict(DELETED)) for memory_id in memory_ids]


def restored(memory_id: UUID) -> Change:
    return Change(memory_id, "restore", dict(RESTORED))


def readable(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Changes as they are read: each `{"before", "after"}` also as `{"old", "new"}`, the names
    MemoClaw's CLI `diff` reads (the SDK types `changes` as any mapping, so both fit)."""
    return {
        name: {**value, "old": value["before"], "new": value["after"]}
        if isinstance(value, dict) and value.keys() == {"before", "after"}
        else value
        for name, value in changes.items()
    }


async def record(conn: asyncpg.Connection, wallet: str, changes: Iterable[Change | None]) -> None:
    """Write these changes in one statement (none when there is nothing to record)."""
    entries = [c for c in changes if c is not None]
    if not entries:
        return
    await repo.insert_many(
        conn,
        wallet,
        [c.memory_id for c in entries],
        [c.action for c in entries],
        [c.changes for c in entries],
        ACTOR.get(),
    )


async def history_of(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID
) -> list[asyncpg.Record]:
    """Oldest first; MemoryNotFound when the wallet has no such memory."""
    rows = await repo.history_of(conn, wallet, memory_id)
    if rows is None:
        raise MemoryNotFound(memory_id)
    return rows
