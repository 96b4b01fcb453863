"""The JSON schema pieces Engram's MCP tools are declared with: the basic types, what a memory
looks like in a result, and the arguments several tools share, with memoclaw-mcp's names and
Engram's limits."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

# Values from the REST schemas (app/memory/schemas.py).
MEMORY_TYPES = ["correction", "preference", "decision", "project", "observation", "general"]


def string_arg(description: str, **extra: Any) -> JSON:
    return {"type": "string", "description": description, **extra}


def object_of(properties: JSON, required: list[str] | None = None, **extra: Any) -> JSON:
    schema: JSON = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = required
    return schema


STRING: JSON = {"type": "string"}
NUMBER: JSON = {"type": "number"}
INTEGER: JSON = {"type": "integer"}
BOOLEAN: JSON = {"type": "boolean"}
OBJECT: JSON = {"type": "object"}
STRINGS: JSON = {"type": "array", "items": STRING}

MEMORY: JSON = object_of(
    {
        "id": STRING,
        "content": STRING,
        "user_id": STRING,
        "namespace": STRING,
        "embedding_model": STRING,
        "metadata": OBJECT,
        "importance": NUMBER,
        "memory_type": STRING,
        "session_id": STRING,
        "agent_id": STRING,
        "created_at": STRING,
        "updated_at": STRING,
        "accessed_at": STRING,
        "access_count": INTEGER,
        "deleted_at": STRING,
        "expires_at": STRING,
        "pinned": BOOLEAN,
        "immutable": BOOLEAN,
        "tags": STRINGS,
    },
    ["id", "content"],
)
RECALLED: JSON = object_of(
    {
        **MEMORY["properties"],
        "similarity": NUMBER,
        "score": NUMBER,
        "_signals": OBJECT,
        "relations": {"type": "array", "items": OBJECT},
    },
    ["id", "content", "similarity"],
)
MEMORIES: JSON = {"type": "array", "items": MEMORY}

# Arguments, with memoclaw-mcp's names and Engram's limits.
MEMORY_ID = string_arg("The memory's ID (a UUID from store, recall, search or list).")
CONTENT = string_arg(
    "The text to remember. Make it specific and self-contained (one fact, with who and what):"
    " this is what gets embedded and searched.",
    minLength=1,
    maxLength=8192,
)
IMPORTANCE: JSON = {
    "type": "number",
    "minimum": 0,
    "maximum": 1,
    "description": "0.0 (trivial) to 1.0 (critical); higher ranks higher in recall. Default 0.5.",
}
TAGS: JSON = {"type": "array", "items": STRING, "description": 'Tags, e.g. ["project-x"].'}
NAMESPACE = string_arg(
    'Namespace that keeps memories apart, e.g. "work" or a project name. Default "default".'
)
MEMORY_TYPE = string_arg(
    "How fast the memory decays: correction and preference slowest, observation fastest.",
    enum=MEMORY_TYPES,
)
SESSION_ID = string_arg("Conversation/session the memory belongs to.")
AGENT_ID = string_arg("Agent the memory belongs to.")
METADATA: JSON = {"type": "object", "description": "Free-form JSON stored with the memory."}
EXPIRES_AT = string_arg('ISO 8601 time when the memory expires, e.g. "2027-01-01T00:00:00Z".')
AFTER = string_arg("Only memories created after this ISO 8601 time.")
BEFORE = string_arg("Only memories created before this ISO 8601 time.")


def limit_arg(default: int, maximum: int) -> JSON:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": maximum,
        "description": f"Maximum results. Default {default}, at most {maximum}.",
    }


SCOPE = {"namespace": NAMESPACE, "session_id": SESSION_ID, "agent_id": AGENT_ID}
FILTERS = {**SCOPE, "memory_type": MEMORY_TYPE, "tags": TAGS, "after": AFTER, "before": BEFORE}
# Trust (docs: guides/memory-poisoning.md): hold back what Engram flagged as instruction-like,
# keep to some sources
TRUST = {
    "exclude_flagged": {
        "type": "boolean",
        "description": "Leave out memories Engram flagged as instruction-like (prompt injection)."
        " Recall's default: false; context's: true.",
    },
    "sources": {
        "type": "array",
        "items": {"enum": ["user", "assistant", "tool", "import", "extract", "console", "api"]},
        "minItems": 1,
        "description": 'Only memories from these sources (e.g. ["user"]: what the user said).',
    },
}
MEMORY_FIELDS = {
    "importance": IMPORTANCE,
    "tags": TAGS,
    **SCOPE,
    "memory_type": MEMORY_TYPE,
    "metadata": METADATA,
    "expires_at": EXPIRES_AT,
    "pinned": {"type": "boolean", "description": "Pinned memories never decay."},
    "immutable": {
        "type": "boolean",
        "description": "One-way: an immutable memory can no longer change or be deleted.",
    },
}
