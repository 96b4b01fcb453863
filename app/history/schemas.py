"""Wire structs for a memory's history."""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, Struct, UnsetType

# What a history entry records (app/history/service.py makes the changes).
Action = Literal["create", "update", "consolidate", "delete", "restore", "import"]


class HistoryEntry(Struct):
    id: str
    memory_id: str
    action: Action
    # per changed field `{before, after}`, also as `{old, new}` (app/history/service.py readable)
    changes: dict[str, Any]
    changed_fields: list[str]  # MemoClaw's MCP server shows it
    created_at: str
    actor: str | UnsetType = UNSET  # the wallet that acted, when not the owner (a grantee)


class MemoryHistory(Struct):
    history: list[HistoryEntry]  # oldest first
