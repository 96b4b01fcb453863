"""Relation rules: both ends live memories of the caller, no self links, no duplicates; listing
in both directions; the breadth-first graph walk.

No SQL here (repository.py) and no HTTP types (controller.py); the caller's transaction is used.
Relations are free calls (docs/api-contract.md, "Prices").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from app.core.errors import (
    InvalidInput,
    MemoryNotFound,
    RelationExists,
    RelationNotFound,
    TargetMemoryNotFound,
)
from app.memory.repository import reads as memory_reads
from app.memory.schemas import check_metadata
from app.memory.service import parse_memory_id
from app.relations import repository as repo
from app.relations.schemas import RELATION_TYPES, RelationIn


@dataclass
class Graph:
    nodes: list[asyncpg.Record]  # root first, then by depth
    edges: list[asyncpg.Record]


def parse_relation_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidInput(
            f"'{raw}' is not a relation id (a UUID)", {"field": "relation_id"}
        ) from exc


def parse_relation_types(raw: Sequence[str] | None) -> list[str] | None:
    """`relation_types=a,b` (the SDK joins its list with commas) or repeated parameters."""
    if raw is None:
        return None
    wanted = [t.strip() for item in raw for t in item.split(",") if t.strip()]
    unknown = sorted({t for t in wanted if t not in RELATION_TYPES})
    if unknown:
        raise InvalidInput(
            f"unknown relation types {unknown}; expected any of {list(RELATION_TYPES)}",
            {"field": "relation_types"},
        )
    return wanted or None


class RelationService:
    async def _live_memory(self, conn: asyncpg.Connection, wallet: str, raw_id: str) -> UUID:
        memory_id = parse_memory_id(raw_id)
        if not await memory_reads.get_many(conn, wallet, [memory_id]):
            raise MemoryNotFound(raw_id)
        return memory_id

    async def create(
        self, conn: asyncpg.Connection, wallet: str, source_raw: str, body: RelationIn
    ) -> asyncpg.Record:
        """Relate memory `source_raw` to `body.target_id`.

        An identical relation (same source, target and type) is refused with 409 CONFLICT whose
        details name the existing relation (`relation_id`), rather than answered with it: a
        create that silently returned an older row would hide that its `metadata` was not
        written. The unique (source_id, target_id, relation_type) constraint makes a duplicate
        row impossible, also under concurrent identical creates (one 201, the rest 409).
        """
        source_id = parse_memory_id(source_raw)
        try:
            target_id = UUID(body.target_id)
        except ValueError as exc:
            raise InvalidInput(
                f"'{body.target_id}' is not a memory id (a UUID)", {"field": "target_id"}
            ) from exc
        if source_id == target_id:
            raise InvalidInput("a memory cannot be related to itself", {"field": "target_id"})
        metadata = dict(body.metadata or {})
        check_metadata(metadata)
        live = {r["id"] for r in await memory_reads.get_many(conn, wallet, [source_id, target_id])}
        if source_id not in live:
            raise MemoryNotFound(source_raw)
        if target_id not in live:
            raise TargetMemoryNotFound(body.target_id)
        row = await repo.insert(conn, wallet, source_id, target_id, body.relation_type, metadata)
        if row is not None:
            return row
        existing = await repo.find(conn, wallet, source_id, target_id, body.relation_type)
        raise RelationExists(
            source_id, body.relation_type, target_id, existing["id"] if existing else None
        )

    async def list_for(
        self, conn: asyncpg.Connection, wallet: str, memory_raw: str
    ) -> list[asyncpg.Record]:
        memory_id = await self._live_memory(conn, wallet, memory_raw)
        return await repo.linked(conn, wallet, [memory_id])

    async def of_memories(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        memory_ids: Sequence[UUID],
        kept_to: str | None = None,
    ) -> dict[UUID, list[asyncpg.Record]]:
        """The visible relations of several memories (recall's include_relations), one query;
        with `kept_to` (a grantee's or an agent key's namespace), only those whose other end
        is there: a relation never shows what the caller may not read."""
        by_memory: dict[UUID, list[asyncpg.Record]] = defaultdict(list)
        if memory_ids:
            for row in await repo.linked(conn, wallet, memory_ids, kept_to):
                by_memory[row["anchor_id"]].append(row)
        return by_memory

    async def delete(
        self, conn: asyncpg.Connection, wallet: str, memory_raw: str, relation_raw: str
    ) -> UUID:
        relation_id = parse_relation_id(relation_raw)
        memory_id = await self._live_memory(conn, wallet, memory_raw)
        deleted = await repo.delete(conn, wallet, memory_id, relation_id)
        if deleted is None:
            raise RelationNotFound(relation_raw, memory_raw)
        return deleted

    async def graph(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        root_raw: str,
        depth: int,
        limit: int,
        relation_types: Sequence[str] | None,
    ) -> Graph:
        """Breadth-first over relations in both directions from the root, up to `depth` hops and
        `limit` memories (the root is one of them); only live memories of the wallet, only
        relations of `relation_types` when given. Edges are those between returned nodes."""
        root_id = parse_memory_id(root_raw)
        types = parse_relation_types(relation_types)
        nodes = await repo.walk(conn, wallet, root_id, depth, limit, types)
        if not nodes:
            raise MemoryNotFound(root_raw)
        edges = await repo.edges_between(conn, wallet, [n["id"] for n in nodes], types)
        return Graph(nodes=nodes, edges=edges)
