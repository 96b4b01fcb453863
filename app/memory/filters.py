"""Which memories a read is about: `MemoryFilter` (its WHERE is app/memory/sql.py `filter_sql`)
and the orders a list is read in; and the filters of a recall, and of list, count, search and
export, from what their request says (validated)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from app.core.schemas import nfc_names, parse_time
from app.memory.dates import now_utc
from app.memory.schemas import RecallIn, parse_metadata_filter, parse_moment, split_tags


@dataclass
class MemoryFilter:
    """Which of a wallet's memories a read is about."""

    wallet: str
    namespace: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    memory_types: list[str] | None = None
    tags: list[str] | None = None
    after: datetime | None = None
    before: datetime | None = None
    occurred_after: datetime | None = None  # event time (occurred_at), inclusive
    occurred_before: datetime | None = None  # event time, exclusive
    pinned: bool | None = None
    immutable: bool | None = None
    include_deleted: bool = False
    metadata: dict[str, Any] | None = None  # JSON containment: metadata holds all of it
    # the one namespace a grantee or an agent key reaches: relations whose other end lies
    # elsewhere count for nothing in what it reads (app/memory/actor.py)
    kept_to: str | None = None
    sources: list[str] | None = None  # memories from these sources only (provenance.py)
    quarantined: bool | None = None  # False: none held for review (recall: app/guard)


# The orders a list can be read in (MemoClaw's MCP server's `sort` values); ties by id.
ListSort = Literal["created_at", "updated_at", "importance"]

LIST_SORTS: tuple[str, ...] = get_args(ListSort)


@dataclass(frozen=True)
class ListOrder:
    sort: str = "created_at"  # one of LIST_SORTS
    descending: bool = True


NEWEST_FIRST = ListOrder()


def _as_list(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def recall_filter(wallet: str, req: RecallIn, kept_to: str | None = None) -> MemoryFilter:
    filters = req.filters
    now = now_utc()
    after = (filters.after if filters else None) or req.after or req.since
    before = (filters.before if filters else None) or req.before or req.until
    return MemoryFilter(
        wallet=wallet,
        namespace=req.namespace if kept_to is None else kept_to,
        session_id=req.session_id,
        agent_id=req.agent_id,
        memory_types=_as_list((filters.memory_type if filters else None) or req.memory_type),
        tags=split_tags((filters.tags if filters else None) or req.tags),
        after=parse_moment(after, "filters.after", now),
        before=parse_moment(before, "filters.before", now),
        pinned=filters.pinned if filters else None,
        metadata=parse_metadata_filter(filters.metadata if filters else None, "filters.metadata"),
        occurred_after=parse_time(filters.occurred_after if filters else None,
                                  "filters.occurred_after"),
        occurred_before=parse_time(filters.occurred_before if filters else None,
                                   "filters.occurred_before"),
        kept_to=kept_to,
        sources=list(req.sources) if req.sources else None,
        quarantined=False,  # a memory under review is recalled by no one (app/guard/service.py)
    )  # fmt: skip


def list_filter(
    wallet: str,
    *,
    namespace: str | None = None,
    session_id: str | None = None,
    agent_id: str | None = None,
    memory_type: str | None = None,
    tags: list[str] | None = None,
    after: str | None = None,
    before: str | None = None,
    pinned: bool | None = None,
    immutable: bool | None = None,
    include_deleted: bool = False,
    metadata: str | dict[str, Any] | None = None,
) -> MemoryFilter:
    """The filter of list, count, search and export from their query strings (validated).
    `after`/`before` may be relative (`7d`); `metadata` is a JSON object, or its text."""
    now = now_utc()
    return MemoryFilter(
        wallet=wallet,
        namespace=nfc_names(namespace),
        session_id=session_id,
        agent_id=agent_id,
        memory_types=[memory_type] if memory_type else None,
        tags=nfc_names(split_tags(",".join(tags))) if tags else None,
        after=parse_moment(after, "after", now),
        before=parse_moment(before, "before", now),
        pinned=pinned,
        immutable=immutable,
        include_deleted=include_deleted,
        metadata=parse_metadata_filter(metadata, "metadata"),
    )
