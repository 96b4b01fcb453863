"""Consolidation: fold near-duplicate memories of a wallet (per namespace) into one.

- rule mode: the most important member stays (ties: pinned, most accessed, newest); it takes the
  union of the members' tags; the others are soft-deleted, each linked from the keeper by a
  `supersedes` relation.
- llm mode: the fact model writes one synthesised memory (importance: the cluster's highest;
  tags: the union) linked by `derived_from` to every member; the members are soft-deleted.
- Pinned and immutable memories are never deleted (nor, if immutable, changed); dry_run reports
  what would happen and writes nothing.
- History: each folded-away memory gets a `consolidate` row naming the memory it was merged into;
  a rule-mode keeper gets one with the ids it absorbed and what changed (its tags). Memory's
  service writes the memories and records these (MemoryService.fold, create_without_dedup).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np

from app.ai.facts import FactModel
from app.consolidate.clustering import Cluster, clusters
from app.consolidate.schemas import ConsolidateIn
from app.history import service as history
from app.memory.fields import MemoryFields
from app.memory.repository import reads as memory_reads
from app.memory.schemas import MAX_TAGS
from app.memory.service import MemoryService
from app.relations import repository as relations_repo


@dataclass
class Report:
    clusters: list[dict[str, Any]] = field(default_factory=list)
    memories_merged: int = 0
    memories_created: int = 0
    tokens_used: int = 0


@dataclass
class Writes:
    """Everything a consolidation changes, written in a few statements at the end."""

    deletions: dict[UUID, UUID] = field(default_factory=dict)  # deleted -> the one it went into
    metadata: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    kept: list[history.Change] = field(default_factory=list)
    supersedes: list[tuple[UUID, UUID]] = field(default_factory=list)
    derived_from: list[tuple[UUID, UUID]] = field(default_factory=list)

    async def apply(self, conn: asyncpg.Connection, wallet: str, memories: MemoryService) -> None:
        await relations_repo.create_many(conn, wallet, self.supersedes, "supersedes")
        await relations_repo.create_many(conn, wallet, self.derived_from, "derived_from")
        # the memories' changes, and their history, through memory's service
        await memories.fold(conn, wallet, self.metadata, self.deletions, self.kept)


def _tags(row: asyncpg.Record) -> list[str]:
    return list((row["metadata"] or {}).get("tags") or [])


def _union_tags(rows: list[asyncpg.Record]) -> list[str]:
    tags: list[str] = []
    for row in rows:
        for tag in _tags(row):
            if tag not in tags:
                tags.append(tag)
    return tags[:MAX_TAGS]


def _keeper(rows: list[asyncpg.Record]) -> asyncpg.Record:
    return max(
        rows,
        key=lambda r: (
            float(r["importance"]),
            r["pinned"],
            int(r["access_count"]),
            r["created_at"],
        ),
    )


def _vector(value: Any) -> np.ndarray:
    """pgvector's codec hands back a Vector object (or an array, by version)."""
    array = value.to_numpy() if hasattr(value, "to_numpy") else value
    return np.asarray(array, dtype=np.float32)


def _protected(row: asyncpg.Record) -> bool:
    return bool(row["pinned"] or row["immutable"])


class ConsolidateService:
    def __init__(self, memories: MemoryService, fact_model: FactModel) -> None:
        self.memories = memories
        self.fact_model = fact_model

    async def consolidate(
        self, conn: asyncpg.Connection, wallet: str, req: ConsolidateIn
    ) -> Report:
        rows = await memory_reads.embeddings_of_wallet(conn, wallet, req.namespace, req.agent_id)
        by_namespace: dict[str, list[asyncpg.Record]] = {}
        for row in rows:
            by_namespace.setdefault(row["namespace"], []).append(row)
        report, writes = Report(), Writes()
        for group in by_namespace.values():
            vectors = np.stack([_vector(r["embedding"]) for r in group])
            for cluster in clusters(vectors, req.min_similarity):
                members = [group[i] for i in cluster.members]
                await self._fold(conn, wallet, members, cluster, req, report, writes)
        if not req.dry_run:
            await writes.apply(conn, wallet, self.memories)
        return report

    async def _fold(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        members: list[asyncpg.Record],
        cluster: Cluster,
        req: ConsolidateIn,
        report: Report,
        writes: Writes,
    ) -> None:
        deletable = [m for m in members if not _protected(m)]
        merged_into: str | None = None
        if req.mode == "rule":
            keeper = _keeper(members)
            deletable = [m for m in deletable if m["id"] != keeper["id"]]
            if not req.dry_run:
                tags = _union_tags([keeper, *members])
                changes: dict[str, Any] = {}
                if tags != _tags(keeper) and not keeper["immutable"]:
                    metadata = {**(keeper["metadata"] or {}), "tags": tags}
                    writes.metadata[keeper["id"]] = metadata
                    changes = history.diff(keeper, {"metadata": metadata}, ("tags", "metadata"))
                if deletable:
                    changes["merged_from"] = [str(m["id"]) for m in deletable]
                if changes:
                    writes.kept.append(history.Change(keeper["id"], "consolidate", changes))
                writes.supersedes.extend((keeper["id"], m["id"]) for m in deletable)
                merged_into = str(keeper["id"])
        else:
            report.memories_created += 1
            if not req.dry_run:
                merged_into = await self._synthesise(conn, wallet, members, report)
                writes.derived_from.extend((UUID(merged_into), m["id"]) for m in members)
        if merged_into is not None:  # None only in a dry run
            writes.deletions.update(dict.fromkeys((m["id"] for m in deletable), UUID(merged_into)))
        report.memories_merged += len(deletable)
        report.clusters.append(
            {
                "memory_ids": [str(m["id"]) for m in members],
                "similarity": cluster.similarity,
                "merged_into": merged_into,
            }
        )

    async def _synthesise(
        self, conn: asyncpg.Connection, wallet: str, members: list[asyncpg.Record], report: Report
    ) -> str:
        content, tokens = await self.fact_model.merge([m["content"] for m in members])
        report.tokens_used += tokens
        keeper = _keeper(members)
        tags = _union_tags(members)
        row, embed_tokens = await self.memories.create_without_dedup(
            conn,
            wallet,
            MemoryFields(
                content=content,
                metadata={"tags": tags} if tags else {},
                importance=max(float(m["importance"]) for m in members),
                namespace=keeper["namespace"],
                memory_type=keeper["memory_type"],
                session_id=None,
                agent_id=None,
                expires_at=None,
                pinned=False,
                immutable=False,
                source="extract",  # written by the model from the cluster's memories
            ),
        )
        report.tokens_used += embed_tokens
        return str(row["id"])
