"""Namespace guards (docs/pages/guides/memory-poisoning.md): what a namespace does with memories the
store-time classifier flags, and with memories others write into it.

- `off`: nothing is flagged (the classifier's findings are dropped).
- `flag` (the default): flagged memories are stored with their flags; recall returns them
  unless asked to hold them back (`exclude_flagged`), context and the hooks hold them back.
- `refuse`: a store holding a flagged memory is refused (MemoryRefused, 422), nothing stored.
- `review`: as `flag`, and a memory a grantee or an agent key writes is quarantined: no recall
  returns it until the owner approves it (POST /v1/memories/{id}/approve, or the console).

Every new memory's content passes through `screen` just before it is inserted, and every changed
one through `screen_change`: memory's writes (app/memory/settled.py) ask, and apply the verdict.
Releasing a quarantined memory is memory's (app/memory/crud.py `approve`). No HTTP types here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

import asyncpg

from app.core.errors import MemoryRefused
from app.core.provenance import WRITING
from app.guard import repository as repo
from app.guard.classifier import classify

GuardMode = Literal["off", "flag", "refuse", "review"]
GUARD_MODES: tuple[str, ...] = get_args(GuardMode)
DEFAULT_MODE: GuardMode = "flag"


def flags_of(content: str) -> list[dict[str, str]]:
    """The classifier's findings as stored (a list of {rule, reason})."""
    return [asdict(f) for f in classify(content)]


@dataclass
class Verdict:
    """What a namespace's guard says of one new memory: the flags it is stored with, and whether
    it waits for the owner's approval."""

    flags: list[dict[str, str]]
    quarantined: bool = False


async def screen(
    conn: asyncpg.Connection, wallet: str, contents: list[tuple[str, str]]
) -> list[Verdict]:
    """The verdicts on memories about to be inserted, each given as (namespace, content), as
    their namespaces' guards say: their flags dropped (off), the request refused (refuse), or
    quarantined when a grantee or an agent key writes them (review). Reads the guards only when
    a memory is flagged or someone other than the owner writes: an ordinary store costs no
    statement more."""
    verdicts = [Verdict(flags_of(content)) for _, content in contents]
    by_others = WRITING.get().writer != "owner"
    if not by_others and not any(v.flags for v in verdicts):
        return verdicts
    set_modes = await repo.modes(conn, wallet, sorted({namespace for namespace, _ in contents}))
    for i, ((namespace, _), verdict) in enumerate(zip(contents, verdicts, strict=True)):
        mode = set_modes.get(namespace, DEFAULT_MODE)
        if mode == "off":
            verdict.flags = []
        elif mode == "refuse" and verdict.flags:
            raise MemoryRefused(
                namespace, verdict.flags, f"memories[{i}]." if len(contents) > 1 else ""
            )
        elif mode == "review" and by_others:
            verdict.quarantined = True
    return verdicts


async def screen_change(
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
