"""Namespace guards (README, "Memory poisoning"): what a namespace does with memories the
store-time classifier flags, and with memories others write into it.

- `off`: nothing is flagged (the classifier's findings are dropped).
- `flag` (the default): flagged memories are stored with their flags; recall returns them
  unless asked to hold them back (`exclude_flagged`), context and the hooks hold them back.
- `refuse`: a store holding a flagged memory is refused (MemoryRefused, 422), nothing stored.
- `review`: as `flag`, and a memory a grantee or an agent key writes is quarantined: no recall
  returns it until the owner approves it (POST /v1/memories/{id}/approve, or the console).

Every new memory passes through `settle` just before it is inserted: it gets its provenance
(app/memory/provenance.py) and its flags here. No HTTP types here.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal, get_args
from uuid import UUID

import asyncpg

from app.core.errors import MemoryNotFound, MemoryRefused
from app.guard import repository as repo
from app.guard.classifier import classify
from app.history import service as history
from app.memory.fields import NewMemory
from app.memory.provenance import WRITING

GuardMode = Literal["off", "flag", "refuse", "review"]
GUARD_MODES: tuple[str, ...] = get_args(GuardMode)
DEFAULT_MODE: GuardMode = "flag"


def flags_of(content: str) -> list[dict[str, str]]:
    """The classifier's findings as stored (a list of {rule, reason})."""
    return [asdict(f) for f in classify(content)]


def _provenance(wallet: str, new: NewMemory) -> None:
    """A new memory's source, writer and surface: what it carries (an import), else the
    request's. A grantee's content is `api` whatever it says (app/memory/provenance.py)."""
    writing, fields = WRITING.get(), new.fields
    new.written_by = fields.written_by or writing.written_by or wallet
    new.writer = fields.writer or writing.writer
    new.surface = fields.surface or writing.surface
    new.source = "api" if writing.writer == "grantee" else fields.source or "api"


async def settle(conn: asyncpg.Connection, wallet: str, new: list[NewMemory]) -> None:
    """Provenance and flags of memories about to be inserted, as their namespaces' guards say:
    their flags dropped (off), the request refused (refuse), or quarantined when a grantee or an
    agent key writes them (review). Reads the guards only when a memory is flagged or someone
    other than the owner writes: an ordinary store costs no statement more."""
    for n in new:
        _provenance(wallet, n)
        n.flags = flags_of(n.fields.content)
    by_others = WRITING.get().writer != "owner"
    if not by_others and not any(n.flags for n in new):
        return
    set_modes = await repo.modes(conn, wallet, sorted({n.fields.namespace for n in new}))
    for i, n in enumerate(new):
        mode = set_modes.get(n.fields.namespace, DEFAULT_MODE)
        if mode == "off":
            n.flags = []
        elif mode == "refuse" and n.flags:
            raise MemoryRefused(
                n.fields.namespace, n.flags, f"memories[{i}]." if len(new) > 1 else ""
            )
        elif mode == "review" and by_others:
            n.quarantined = True


async def settle_change(
    conn: asyncpg.Connection, wallet: str, namespace: str, changes: dict[str, Any]
) -> None:
    """Changes to a stored memory (`changes`: its columns, a new content's `flags` among them),
    as the guard of the namespace it ends in says: a new content's flags dropped (off), the
    request refused when they are not empty (refuse), or the memory quarantined again when a
    grantee or an agent key changes its content or moves it there (review): an approved memory
    rewritten is a new one to approve."""
    if "content" not in changes and "namespace" not in changes:
        return
    landing = changes.get("namespace", namespace)
    by_others = WRITING.get().writer != "owner"
    flags = changes.get("flags") or []
    if not flags and not by_others:
        return
    mode = (await repo.modes(conn, wallet, [landing])).get(landing, DEFAULT_MODE)
    if mode == "off" and "flags" in changes:
        changes["flags"] = None
    elif mode == "refuse" and flags:
        raise MemoryRefused(landing, flags)
    elif mode == "review" and by_others:
        changes["quarantined"] = True


async def set_mode(conn: asyncpg.Connection, wallet: str, namespace: str, mode: str) -> None:
    await repo.set_mode(conn, wallet, namespace, mode)


async def mode_of(conn: asyncpg.Connection, wallet: str, namespace: str) -> str:
    return (await repo.modes(conn, wallet, [namespace])).get(namespace, DEFAULT_MODE)


async def approve(conn: asyncpg.Connection, wallet: str, memory_id: UUID) -> asyncpg.Record:
    """Release a quarantined memory (the owner's act), recorded in its history; approving one
    that is not quarantined changes nothing. Another wallet's memory is not found."""
    row, released = await repo.approve(conn, wallet, memory_id)
    if row is None:
        raise MemoryNotFound(memory_id)
    if released:
        change = history.Change(
            row["id"], "update", {"quarantined": {"before": True, "after": False}, "approved": True}
        )
        await history.record(conn, wallet, [change])
    return row
