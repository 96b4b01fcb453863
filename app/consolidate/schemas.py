"""Wire struct for POST /v1/memories/consolidate (docs/api-contract.md, "Endpoints", "Limits")."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from app.kit.schemas import Name, OptionalName, StrictStruct


class ConsolidateIn(StrictStruct):
    min_similarity: Annotated[float, Meta(ge=0.5, le=1.0)] = 0.85
    mode: Literal["rule", "llm"] = "rule"
    namespace: Name | None = None
    agent_id: OptionalName | None = None  # one agent's memories only (MemoClaw's MCP sends it)
    dry_run: bool = False
