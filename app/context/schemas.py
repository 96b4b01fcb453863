"""Wire structs for POST /v1/context: the request (limits: docs/api-contract.md, "Limits") and
the answer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from app.core.provenance import Source
from app.core.schemas import Name, OptionalName, StrictStruct
from app.memory.schemas import MAX_RECALL_QUERY_CHARS, RecalledMemory

MaxMemories = Annotated[int, Meta(ge=1, le=100)]
DEFAULT_MAX_MEMORIES = 10


class ContextIn(StrictStruct):
    query: Annotated[str, Meta(min_length=1, max_length=MAX_RECALL_QUERY_CHARS)]
    namespace: Name | None = None
    session_id: OptionalName | None = None
    agent_id: OptionalName | None = None
    max_memories: MaxMemories | None = None  # default DEFAULT_MAX_MEMORIES
    limit: MaxMemories | None = None  # MemoClaw's CLI and MCP server name max_memories so
    max_tokens: Annotated[int, Meta(ge=100, le=16_000)] = 2000
    format: Literal["text", "structured"] = "text"
    include_metadata: bool = False
    summarize: bool = False
    # trust (docs: guides/memory-poisoning.md): a block for a prompt holds back flagged memories
    # unless told otherwise, and may keep to some sources
    exclude_flagged: bool = True
    sources: Annotated[list[Source], Meta(min_length=1, max_length=7)] | None = None

    @property
    def memory_limit(self) -> int:
        """How many memories the block may use: max_memories, else its alias limit, else 10."""
        return self.max_memories or self.limit or DEFAULT_MAX_MEMORIES


class ContextAnswer(Struct):
    # format=text: the block as text; format=structured: {instructions, memories, summary?}
    context: str | dict[str, Any]
    memories_used: int
    tokens: int  # the block's size
    tokens_used: int  # what building it took (a summary's LLM call)
    # the memories in the block, for MemoClaw's MCP server (it maps over
    # `result.memories || result.context`); their content neutralised as in the block
    memories: list[RecalledMemory]
    held_back: int = 0  # flagged memories that ranked within the block but were held back
