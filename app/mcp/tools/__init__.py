"""Engram's MCP tools: names and argument names of `memoclaw-mcp` (so skills and prompts written
for MemoClaw port), each mapped onto the REST request it stands for, with input and output JSON
schemas and a description that tells an agent when to reach for it.

Only arguments the REST API knows are declared and forwarded. Results are the REST answers,
lightly shaped (a single memory under `memory`, as memoclaw-mcp returns it), with null-valued keys
dropped: a strict client validates `structuredContent` against the declared output schema, where
an optional string is absent rather than null. User data (`metadata`, history `changes`) is kept
as is.

The tools are grouped by what they touch: memories.py, flows.py (context, ingest, extract,
consolidate), relations.py (relations, graph, history) and account.py (the wallet's overviews);
tool.py says what a tool is, schemas.py holds the schema pieces they share. This module is the
one place that registers them all, in the order tools/list answers with.
"""

from __future__ import annotations

from app.mcp.tools.account import ACCOUNT_TOOLS
from app.mcp.tools.flows import FLOW_TOOLS
from app.mcp.tools.memories import MEMORY_TOOLS
from app.mcp.tools.relations import RELATION_TOOLS
from app.mcp.tools.tool import Tool

TOOLS: dict[str, Tool] = {
    t.name: t for t in (*MEMORY_TOOLS, *FLOW_TOOLS, *RELATION_TOOLS, *ACCOUNT_TOOLS)
}

__all__ = ["TOOLS"]
