"""Wire structs for POST /v1/memories/consolidate: the request (docs/api-contract.md, "Endpoints",
"Limits") and the answer."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from app.core.schemas import Name, OptionalName, StrictStruct


class ConsolidateIn(StrictStruct):
    min_similarity: Annotated[float, Meta(ge=0.5, le=1.0)] = 0.85
    mode: Literal["rule", "llm"] = "rule"
    namespace: Name | None = None
    agent_id: OptionalName | None = None  # one agent's memories only (MemoClaw's MCP sends it)
    dry_run: bool = False


class ConsolidatedCluster(Struct):
    memory_ids: list[str]
    similarity: float  # mean similarity of the pairs that joined it
    merged_into: str | None  # the memory kept or written; null in a dry run


class ConsolidateAnswer(Struct):
    clusters_found: int
    memories_merged: int
    merged: int  # memories_merged, what MemoClaw's CLI prints and MCP server types
    memories_created: int
    clusters: list[ConsolidatedCluster]
    dry_run: bool
    tokens_used: int
