"""Wire structs for the memory endpoints: request bodies with the contract's limits, and the
answers, stored rows rendered into the shapes MemoClaw's clients parse.

Limits come from docs/api-contract.md ("Memory object", "Limits").
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from app.core.errors import InvalidInput
from app.core.provenance import Source, Surface, WritableSource, Writer
from app.core.schemas import (
    MAX_PAGE,
    Metadata,
    Name,
    OptionalName,
    StrictStruct,
    absent_if_none,
    iso,
    parse_time,
    reject_nul,
)
from app.memory.scoring import Signals

MAX_CONTENT_CHARS = 8192
MAX_METADATA_BYTES = 4096
MAX_METADATA_KEYS = 20
MAX_METADATA_DEPTH = 3
MAX_TAGS = 10
MAX_TAG_CHARS = 64
MAX_BATCH = 100
MAX_RECALL_QUERY_CHARS = 32_768
MAX_SEARCH_QUERY_CHARS = 1000
DEFAULT_IMPORTANCE = 0.5
DEFAULT_MEMORY_TYPE = "general"

MemoryType = Literal["correction", "preference", "decision", "project", "observation", "general"]
Content = Annotated[str, Meta(min_length=1, max_length=MAX_CONTENT_CHARS)]
Version = Annotated[int, Meta(ge=1, le=2**31 - 1)]
# What a keyed store does when the memory changed since the version its writer read
OnConflict = Literal["reject", "overwrite", "merge"]
Importance = Annotated[float, Meta(ge=0.0, le=1.0)]
Tag = Annotated[str, Meta(min_length=1, max_length=MAX_TAG_CHARS)]
Tags = Annotated[list[Tag], Meta(max_length=MAX_TAGS)]


class StoreIn(StrictStruct):
    content: Content
    metadata: Metadata | None = None
    importance: Importance | None = None
    tags: Tags | None = None  # MemoClaw's CLI/MCP send top-level tags; stored at metadata.tags
    namespace: Name | None = None
    memory_type: MemoryType | None = None
    session_id: OptionalName | None = None
    agent_id: OptionalName | None = None
    expires_at: str | None = None
    pinned: bool | None = None
    immutable: bool | None = None
    # When the memory's event happened (ISO 8601); read off the content when not given, and
    # moved by a relative date in it ("yesterday"): app/memory/dates.py
    occurred_at: str | None = None
    # Team memory (docs: guides/team-memory.md): a stable name in the namespace; a store with a key
    # the namespace holds updates that memory (a new version) instead of adding one
    key: Name | None = None
    # the version the writer read; another one stored since is a conflict, met by on_conflict
    expected_version: Version | None = None
    on_conflict: OnConflict | None = None
    # where the content came from (app/core/provenance.py): user, assistant, tool or api;
    # unset: the route's (api on store). `flags` is the server's: a client's is ignored.
    source: WritableSource | None = None


class StoreBatchIn(StrictStruct):
    memories: Annotated[list[StoreIn], Meta(min_length=1, max_length=MAX_BATCH)]


class UpdateIn(StrictStruct):
    content: Content | None = None
    metadata: Metadata | None = None
    importance: Importance | None = None
    memory_type: MemoryType | None = None
    namespace: Name | None = None
    pinned: bool | None = None
    immutable: bool | None = None
    expires_at: str | msgspec.UnsetType | None = msgspec.UNSET  # null clears it
    tags: Tags | None = None
    session_id: OptionalName | None = None
    agent_id: OptionalName | None = None
    # the version the writer read (or the If-Match header): another one is a 412
    expected_version: Version | None = None


class BatchUpdateItem(UpdateIn, kw_only=True):
    id: Annotated[str, Meta(min_length=1, max_length=64)]


class BatchUpdateIn(StrictStruct):
    updates: Annotated[list[BatchUpdateItem], Meta(min_length=1, max_length=MAX_BATCH)]


class IdsIn(StrictStruct):
    ids: Annotated[list[str], Meta(min_length=1, max_length=1000)]


class RecallFilters(StrictStruct):
    tags: Tags | str | None = None
    after: str | None = None
    before: str | None = None
    memory_type: MemoryType | list[MemoryType] | None = None
    pinned: bool | None = None
    metadata: Metadata | None = None  # JSON containment: memories whose metadata holds all of it
    # event time (occurred_at): memories whose event happened in [occurred_after, occurred_before)
    occurred_after: str | None = None
    occurred_before: str | None = None


class RecallIn(StrictStruct):
    query: Annotated[str, Meta(min_length=1, max_length=MAX_RECALL_QUERY_CHARS)]
    # MemoClaw's published defaults: 10 results, and a similarity floor (0.5 on its embedder's
    # scale; unset here means the floor measured for the embedder in use: scoring.py)
    limit: Annotated[int, Meta(ge=1, le=MAX_PAGE)] = 10
    min_similarity: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    namespace: Name | None = None
    session_id: OptionalName | None = None
    agent_id: OptionalName | None = None
    include_relations: bool = False
    filters: RecallFilters | None = None
    # Flat filter forms some clients send beside `filters`.
    tags: Tags | str | None = None
    memory_type: MemoryType | list[MemoryType] | None = None
    after: str | None = None
    before: str | None = None
    # MemoClaw's CLI names them since/until (ISO 8601, or relative: 1d, 2w; see parse_moment)
    since: str | None = None
    until: str | None = None
    # the rerank stage (docs: concepts/recall.md): true / false overrides ENGRAM_RECALL_RERANK
    rerank: bool | None = None
    # trust (docs: guides/memory-poisoning.md): hold back memories the store-time classifier flagged
    # (unset: false, MemoClaw's recall, but true for a plugin's hook, x-engram-surface: hook;
    # context holds them back by default too), and keep to memories from these sources
    exclude_flagged: bool | None = None
    sources: Annotated[list[Source], Meta(min_length=1, max_length=7)] | None = None


class FeedbackIn(StrictStruct):
    helpful: bool = True  # false records nothing (a memory that did not help is not a use)


class SearchIn(StrictStruct):
    query: Annotated[str, Meta(min_length=1, max_length=MAX_SEARCH_QUERY_CHARS)]
    limit: Annotated[int, Meta(ge=1, le=MAX_PAGE)] = 10
    namespace: Name | None = None
    memory_type: MemoryType | None = None
    tags: Tags | str | None = None
    session_id: OptionalName | None = None
    agent_id: OptionalName | None = None
    after: str | None = None
    before: str | None = None


# ---- checks msgspec cannot express -------------------------------------------------------------


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_depth(v) for v in value), default=0)
    return 0


def check_metadata(metadata: Metadata, field: str = "metadata") -> None:
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidInput(
            f"{field} has {len(metadata)} keys; at most {MAX_METADATA_KEYS} are allowed",
            {"field": field},
        )
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise InvalidInput(
            f"{field} nests deeper than {MAX_METADATA_DEPTH} levels", {"field": field}
        )
    size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise InvalidInput(
            f"{field} is {size} bytes as JSON; at most {MAX_METADATA_BYTES} are allowed",
            {"field": field},
        )
    tags = metadata.get("tags")
    if tags is not None:
        check_tags(tags, f"{field}.tags")


def check_tags(tags: Any, field: str = "tags") -> list[str]:
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InvalidInput(f"{field} must be a list of strings", {"field": field})
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"{field} has {len(tags)} tags; at most {MAX_TAGS}", {"field": field})
    for tag in tags:
        if not tag or len(tag) > MAX_TAG_CHARS:
            raise InvalidInput(
                f"each tag in {field} must be 1..{MAX_TAG_CHARS} characters", {"field": field}
            )
    return list(tags)


# A relative time as MemoClaw's CLI writes it (src/dates.ts): an amount and a unit, meaning that
# long ago. `m` is minutes and `mo` months of 30 days, as there.
RELATIVE_TIME = re.compile(r"^(\d{1,6})(mo|m|h|d|w|y)$", re.IGNORECASE)
RELATIVE_UNITS = {
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
    "mo": timedelta(days=30),
    "y": timedelta(days=365),
}


def parse_moment(value: str | None, field: str, now: datetime) -> datetime | None:
    """A filter bound: an ISO 8601 time, or a relative one (`1d`, `2w`: that long before now)."""
    if value is None:
        return None
    relative = RELATIVE_TIME.match(value.strip())
    if not relative:
        return parse_time(value, field)
    try:
        return now - int(relative[1]) * RELATIVE_UNITS[relative[2].lower()]
    except OverflowError as exc:  # before year 1
        raise InvalidInput(f"{field} reaches back too far", {"field": field}) from exc


def parse_metadata_filter(value: Any, field: str) -> Metadata | None:
    """A metadata filter (JSON containment): an object within the metadata limits, or None."""
    if value is None:
        return None
    if isinstance(value, str):  # a query parameter: the object as JSON text
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InvalidInput(f"{field} must be a JSON object", {"field": field}) from exc
    if not isinstance(value, dict):
        raise InvalidInput(f"{field} must be a JSON object", {"field": field})
    reject_nul(value, f"$.{field}")
    check_metadata(value, field)
    return value


def split_tags(value: str | list[str] | None) -> list[str] | None:
    """Tags arrive as a list, a comma-separated string, or repeated query parameters."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    tags = [t.strip() for t in items if t and t.strip()]
    return tags or None


def parse_memory_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidInput(f"'{raw}' is not a memory id (a UUID)", {"field": "id"}) from exc


class MemoryFlag(Struct):
    """A store-time classifier finding (app/guard/classifier.py): the rule, and why."""

    rule: str
    reason: str


# ---- answers -----------------------------------------------------------------------------------
# A memory never carries a null: MemoClaw's MCP server declares its optional fields strings in
# its tools' output schemas, so a strict MCP client rejects a null, while the SDK's models default
# each of them to None, and break on a null metadata/pinned/accessed_at (docs/api-contract.md,
# "What MemoClaw's clients send"). A field without a value is left out instead
# (`X | UnsetType = UNSET`, app/core/schemas.py `absent_if_none`).


class Memory(Struct, kw_only=True):
    """A stored memory (docs/api-contract.md, "Memory object")."""

    id: str
    user_id: str
    namespace: str
    content: str
    embedding_model: str
    metadata: Metadata
    importance: float
    memory_type: MemoryType
    session_id: str | UnsetType = UNSET
    agent_id: str | UnsetType = UNSET
    created_at: str
    updated_at: str
    accessed_at: str
    access_count: int
    deleted_at: str | UnsetType = UNSET
    expires_at: str | UnsetType = UNSET
    pinned: bool
    immutable: bool
    tags: list[str]  # metadata.tags, or []
    # when the memory's event happened, and when it was said (app/memory/dates.py); both or none
    occurred_at: str | UnsetType = UNSET
    mentioned_at: str | UnsetType = UNSET
    key: str | UnsetType = UNSET  # its stable name in the namespace, when it has one
    version: int = 1  # 1 when stored, + 1 for every change since
    # provenance (app/core/provenance.py; left out for memories stored before it was kept)
    source: Source | UnsetType = UNSET
    written_by: str | UnsetType = UNSET
    writer: Writer | UnsetType = UNSET
    surface: Surface | UnsetType = UNSET
    flags: list[MemoryFlag] = msgspec.field(default_factory=list)  # the classifier's findings
    quarantined: bool | UnsetType = UNSET  # true: held for its owner's approval (review)


class RecalledMemory(Struct, kw_only=True):
    """A recall result: the memory, how similar and how well it scored, and why."""

    id: str
    content: str
    similarity: float
    score: float
    metadata: Metadata
    tags: list[str]
    importance: float
    namespace: str
    memory_type: MemoryType
    session_id: str | UnsetType = UNSET
    agent_id: str | UnsetType = UNSET
    created_at: str
    updated_at: str
    access_count: int  # this recall's access included
    pinned: bool
    immutable: bool
    occurred_at: str | UnsetType = UNSET
    mentioned_at: str | UnsetType = UNSET
    signals: Signals = msgspec.field(name="_signals")
    source: Source | UnsetType = UNSET
    written_by: str | UnsetType = UNSET
    writer: Writer | UnsetType = UNSET
    surface: Surface | UnsetType = UNSET
    flags: list[MemoryFlag] = msgspec.field(default_factory=list)
    # with include_relations: GET /v1/memories/{id}/relations's list for the memory
    relations: list[LinkedRelation] | UnsetType = UNSET


class StoreAnswer(Struct):
    """The contract's answer, with `memory` beside it for MemoClaw's MCP server, which reads
    `result.memory || result` and needs the memory's id and content."""

    id: str
    stored: bool
    deduplicated: bool
    tokens_used: int
    memory: Memory


class StoreBatchAnswer(Struct):
    ids: list[str]
    stored: bool
    count: int
    deduplicated_count: int
    tokens_used: int
    memories: list[Memory]  # the stored memories, in order: MemoClaw's MCP server shows these


class RecallAnswer(Struct):
    memories: list[RecalledMemory]
    query_tokens: int
    # present when the rerank stage was asked for: whether a reranker ordered the results
    reranked: bool | UnsetType = UNSET
    # with exclude_flagged: the flagged memories that ranked within the answer but were held
    # back (left out otherwise: MemoClaw's answer is unchanged)
    held_back: int | UnsetType = UNSET


class MemoryPage(Struct):
    memories: list[Memory]
    total: int  # how many match, beyond this page
    limit: int
    offset: int


class MemoryCount(Struct):
    count: int


class SearchAnswer(Struct):
    memories: list[Memory]
    total: int
    query: str


class FeedbackAnswer(Struct):
    id: str
    counted: bool  # false: not helpful, or already counted within the day
    access_count: int
    accessed_at: str


class UpdatedMemory(Memory, kw_only=True):
    tokens_used: int


class BatchUpdateResult(Struct, kw_only=True):
    id: str
    updated: bool
    error: str | UnsetType = UNSET


class BatchUpdateError(Struct):
    id: str
    status: int  # the HTTP status the error would have on its own
    message: str


class BatchUpdateAnswer(Struct):
    results: list[BatchUpdateResult]
    updated: int
    failed: int
    errors: list[BatchUpdateError]
    tokens_used: int


class MemoryDeleted(Struct):
    deleted: bool
    id: str


class DeleteResult(Struct, kw_only=True):
    id: str
    deleted: bool
    error: str | UnsetType = UNSET


class DeleteManyAnswer(Struct):
    deleted: int
    results: list[DeleteResult]


class NamespaceCount(Struct):
    name: str
    count: int
    last_memory_at: str


class NamespaceList(Struct):
    namespaces: list[NamespaceCount]
    total: int


class TypeCount(Struct):
    memory_type: MemoryType
    count: int


class NamespaceTotal(Struct):
    namespace: str
    count: int


class MemoryStats(Struct, kw_only=True):
    total_memories: int
    pinned_count: int
    never_accessed: int
    total_accesses: int
    avg_importance: float
    # no memories, no oldest/newest (MemoClaw's MCP server types them strings)
    oldest_memory: str | UnsetType = UNSET
    newest_memory: str | UnsetType = UNSET
    by_type: list[TypeCount]
    by_namespace: list[NamespaceTotal]


def tags_of(row: Any) -> list[str]:
    return list((row["metadata"] or {}).get("tags") or [])


def memory_fields(row: Any) -> dict[str, Any]:
    """A stored memory's fields as a Memory has them, for it and the answers that extend it."""
    return {
        "id": str(row["id"]),
        "user_id": row["user_id"],
        "namespace": row["namespace"],
        "content": row["content"],
        "embedding_model": row["embedding_model"],
        "metadata": row["metadata"] or {},
        "importance": float(row["importance"]),
        "memory_type": row["memory_type"],
        "session_id": absent_if_none(row["session_id"]),
        "agent_id": absent_if_none(row["agent_id"]),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
        "accessed_at": iso(row["accessed_at"]),
        "access_count": int(row["access_count"]),
        "deleted_at": absent_if_none(iso(row["deleted_at"])),
        "expires_at": absent_if_none(iso(row["expires_at"])),
        "pinned": bool(row["pinned"]),
        "immutable": bool(row["immutable"]),
        "tags": tags_of(row),
        **event_time_fields(row),
        "key": absent_if_none(row.get("key")),
        "version": int(row.get("version") or 1),
        **provenance_fields(row),
        "quarantined": True if row.get("quarantined") else UNSET,
    }


def provenance_fields(row: Any) -> dict[str, Any]:
    """source, written_by, writer, surface (each left out when not recorded) and flags."""
    return {
        "source": absent_if_none(row.get("source")),
        "written_by": absent_if_none(row.get("written_by")),
        "writer": absent_if_none(row.get("writer")),
        "surface": absent_if_none(row.get("surface")),
        "flags": [MemoryFlag(f["rule"], f["reason"]) for f in row.get("flags") or []],
    }


def event_time_fields(row: Any) -> dict[str, Any]:
    """occurred_at / mentioned_at when the memory has an event time (else left out)."""
    if row.get("occurred_at") is None:
        return {}
    return {"occurred_at": iso(row["occurred_at"]), "mentioned_at": iso(row["mentioned_at"])}


def memory_to_wire(row: Any) -> Memory:
    return Memory(**memory_fields(row))


def recalled_to_wire(item: Any, content: str | None = None) -> RecalledMemory:
    """A recall result (memory/ranking.py `Recalled`); `content` replaces the memory's own."""
    row, signals = item.row, item.signals
    return RecalledMemory(
        id=str(row["id"]),
        content=row["content"] if content is None else content,
        similarity=round(signals.vector, 6),
        score=round(signals.score, 6),
        metadata=row["metadata"] or {},
        tags=tags_of(row),
        importance=float(row["importance"]),
        namespace=row["namespace"],
        memory_type=row["memory_type"],
        session_id=absent_if_none(row["session_id"]),
        agent_id=absent_if_none(row["agent_id"]),
        created_at=iso(row["created_at"]),
        updated_at=iso(row["updated_at"]),
        access_count=int(row["access_count"]) + item.accesses_counted,
        pinned=bool(row["pinned"]),
        immutable=bool(row["immutable"]),
        **event_time_fields(row),
        signals=signals.rounded(),
        **provenance_fields(row),
    )


class Restored(Struct):
    """POST /v1/memories/{id}/restore's answer: the memory, live again."""

    restored: bool
    id: str
    memory: Memory


# ---- a memory's relations, as recall's include_relations and GET /v1/memories/{id}/relations
# show them (the relations feature, app/relations/, above memory, makes them)

# The contract's relation types (docs/api-contract.md, "Relations, graph and history"; the SDK's
# RelationType).
RelationType = Literal["related_to", "supersedes", "contradicts", "derived_from", "supports"]


class LinkedMemory(Struct):
    """The memory at the other end of a relation."""

    id: str
    content: str
    importance: float
    memory_type: str  # a MemoryType (above), as stored
    namespace: str


class LinkedRelation(Struct):
    """One relation as seen from one of its memories: the SDK's `RelationWithMemory`, with the
    memory at the other end, and the relation's own ends beside it (MemoClaw's CLI reads
    `target_id`; its MCP server's output schema requires `source_id` and `target_id`)."""

    id: str
    source_id: str
    target_id: str
    relation_type: RelationType
    direction: Literal["outgoing", "incoming"]
    memory: LinkedMemory
    metadata: Metadata
    created_at: str


def linked_to_wire(row: Any) -> LinkedRelation:
    anchor, other = str(row["anchor_id"]), str(row["other_id"])
    outgoing = row["direction"] == "outgoing"
    return LinkedRelation(
        id=str(row["id"]),
        source_id=anchor if outgoing else other,
        target_id=other if outgoing else anchor,
        relation_type=row["relation_type"],
        direction=row["direction"],
        memory=LinkedMemory(
            id=str(row["other_id"]),
            content=row["content"],
            importance=float(row["importance"]),
            memory_type=row["memory_type"],
            namespace=row["namespace"],
        ),
        metadata=row["metadata"] or {},
        created_at=iso(row["created_at"]),
    )
