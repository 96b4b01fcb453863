"""The tools that run one of Engram's flows over many memories, most with an LLM: a context block
for a task, facts extracted from a conversation (ingest, extract), near-duplicates merged
(consolidate)."""

from __future__ import annotations

from app.mcp.rest import RestCall
from app.mcp.tools.schemas import (
    BOOLEAN,
    INTEGER,
    JSON,
    NAMESPACE,
    SCOPE,
    STRING,
    STRINGS,
    TRUST,
    limit_arg,
    object_of,
    string_arg,
)
from app.mcp.tools.tool import Tool, without

MESSAGES: JSON = {
    "type": "array",
    "description": "Conversation turns, oldest first.",
    "items": object_of({"role": STRING, "content": STRING}, ["role", "content"]),
}
EXTRACTED: JSON = object_of(
    {
        "memory_ids": STRINGS,
        "facts_extracted": INTEGER,
        "facts_stored": INTEGER,
        "facts_deduplicated": INTEGER,
        "tokens_used": INTEGER,
    },
    ["memory_ids", "facts_extracted", "facts_stored"],
)


def _context_request(args: JSON) -> RestCall:
    body = without(args, "limit")
    if "max_memories" not in body and args.get("limit") is not None:
        body["max_memories"] = args["limit"]  # memoclaw-mcp's name for it
    return RestCall("POST", "/v1/context", body=body)


FLOW_TOOLS: tuple[Tool, ...] = (
    Tool(
        "memoclaw_context",
        "Build context",
        "A ready-to-read context block of the memories relevant to a situation, within a"
        " token budget. Use it at the start of a task instead of several recalls. Paid LLM"
        " call (free tier first).",
        {
            "query": string_arg("The task or situation you need context for.", minLength=1),
            **SCOPE,
            "limit": limit_arg(10, 100),
            "max_memories": limit_arg(10, 100),
            "max_tokens": {"type": "integer", "minimum": 100, "maximum": 16000},
            "format": string_arg("text or structured", enum=["text", "structured"]),
            "include_metadata": BOOLEAN,
            "summarize": BOOLEAN,
            **TRUST,
        },
        ("query",),
        object_of(
            {
                "context": {"type": ["string", "object", "array"]},
                "memories_used": INTEGER,
                "tokens": INTEGER,
                "tokens_used": INTEGER,
            },
            ["context", "memories_used"],
        ),
        _context_request,
        read_only=True,
    ),
    Tool(
        "memoclaw_ingest",
        "Ingest conversation",
        "Hand over a conversation (or raw text): Engram extracts the durable facts, drops"
        " duplicates and stores them. Use it at the end of a session or after a long"
        " exchange instead of storing facts one by one. Give messages or text. Paid LLM call"
        " (free tier first).",
        {
            "messages": MESSAGES,
            "text": string_arg("Raw text to extract facts from.", minLength=1),
            **SCOPE,
            "auto_relate": {
                "type": "boolean",
                "description": "Relate the extracted facts to each other.",
            },
        },
        (),
        object_of({**EXTRACTED["properties"], "relations_created": INTEGER}, EXTRACTED["required"]),
        lambda a: RestCall("POST", "/v1/ingest", body=a),
    ),
    Tool(
        "memoclaw_extract",
        "Extract facts",
        "Extract and store the facts in a conversation, without relating them. Use"
        " memoclaw_ingest unless you want to relate them yourself. Paid LLM call (free tier"
        " first).",
        {"messages": MESSAGES, **SCOPE},
        ("messages",),
        EXTRACTED,
        lambda a: RestCall("POST", "/v1/memories/extract", body=a),
    ),
    Tool(
        "memoclaw_consolidate",
        "Consolidate memories",
        "Merge near-duplicate memories into one. Run with dry_run=true first to see the"
        " clusters. Use it when recall keeps returning the same fact several times. Paid LLM"
        " call (free tier first).",
        {
            "namespace": NAMESPACE,
            "min_similarity": {
                "type": "number",
                "minimum": 0.5,
                "maximum": 1,
                "description": "How similar memories must be to merge.",
            },
            "mode": string_arg("rule (no LLM) or llm", enum=["rule", "llm"]),
            "dry_run": {"type": "boolean", "description": "Only report what would merge."},
        },
        (),
        object_of(
            {
                "clusters_found": INTEGER,
                "memories_merged": INTEGER,
                "memories_created": INTEGER,
                "clusters": {"type": "array"},
                "dry_run": BOOLEAN,
                "tokens_used": INTEGER,
            },
            ["clusters_found", "dry_run"],
        ),
        lambda a: RestCall("POST", "/v1/memories/consolidate", body=a),
        destructive=True,
    ),
)
