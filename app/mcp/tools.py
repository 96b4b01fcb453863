"""Engram's MCP tools: names and argument names of `memoclaw-mcp` (so skills and prompts written
for MemoClaw port), each mapped onto the REST request it stands for, with input and output JSON
schemas and a description that tells an agent when to reach for it.

Only arguments the REST API knows are declared and forwarded. Results are the REST answers,
lightly shaped (a single memory under `memory`, as memoclaw-mcp returns it), with null-valued keys
dropped: a strict client validates `structuredContent` against the declared output schema, where
an optional string is absent rather than null. User data (`metadata`, history `changes`) is kept
as is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from app.mcp.rest import RestCall

# Values from the REST schemas (app/memory/schemas.py, app/relations/schemas.py).
MEMORY_TYPES = ["correction", "preference", "decision", "project", "observation", "general"]
RELATION_TYPES = ["related_to", "derived_from", "contradicts", "supersedes", "supports"]
# Where user data sits in a result: kept as stored, nulls included.
USER_DATA_KEYS = frozenset({"metadata", "changes"})

JSON = dict[str, Any]


def drop_nulls(value: Any) -> Any:
    """`value` without null-valued keys, at every depth except inside user data."""
    if isinstance(value, dict):
        return {
            k: (v if k in USER_DATA_KEYS else drop_nulls(v))
            for k, v in value.items()
            if v is not None
        }
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


# ---- schema pieces -----------------------------------------------------------------------------


def _s(description: str, **extra: Any) -> JSON:
    return {"type": "string", "description": description, **extra}


def _obj(properties: JSON, required: list[str] | None = None, **extra: Any) -> JSON:
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

MEMORY: JSON = _obj(
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
RECALLED: JSON = _obj(
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
RELATION: JSON = _obj(
    {
        "id": STRING,
        "source_id": STRING,
        "target_id": STRING,
        "relation_type": STRING,
        "metadata": OBJECT,
        "created_at": STRING,
    },
    ["id", "source_id", "target_id", "relation_type"],
)
LINKED: JSON = _obj(
    {
        "id": STRING,
        "relation_type": STRING,
        "direction": STRING,
        "metadata": OBJECT,
        "created_at": STRING,
        "memory": _obj({"id": STRING, "content": STRING}, ["id"]),
    },
    ["id", "relation_type", "direction", "memory"],
)
NODE: JSON = _obj(
    {
        "id": STRING,
        "content": STRING,
        "importance": NUMBER,
        "memory_type": STRING,
        "namespace": STRING,
        "depth": INTEGER,
    },
    ["id", "content", "depth"],
)
EDGE: JSON = _obj(
    {"id": STRING, "source_id": STRING, "target_id": STRING, "relation_type": STRING},
    ["id", "source_id", "target_id", "relation_type"],
)
EXTRACTED: JSON = _obj(
    {
        "memory_ids": STRINGS,
        "facts_extracted": INTEGER,
        "facts_stored": INTEGER,
        "facts_deduplicated": INTEGER,
        "tokens_used": INTEGER,
    },
    ["memory_ids", "facts_extracted", "facts_stored"],
)

# Arguments, with memoclaw-mcp's names and Engram's limits.
MEMORY_ID = _s("The memory's ID (a UUID from store, recall, search or list).")
CONTENT = _s(
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
NAMESPACE = _s(
    'Namespace that keeps memories apart, e.g. "work" or a project name. Default "default".'
)
MEMORY_TYPE = _s(
    "How fast the memory decays: correction and preference slowest, observation fastest.",
    enum=MEMORY_TYPES,
)
SESSION_ID = _s("Conversation/session the memory belongs to.")
AGENT_ID = _s("Agent the memory belongs to.")
METADATA: JSON = {"type": "object", "description": "Free-form JSON stored with the memory."}
EXPIRES_AT = _s('ISO 8601 time when the memory expires, e.g. "2027-01-01T00:00:00Z".')
AFTER = _s("Only memories created after this ISO 8601 time.")
BEFORE = _s("Only memories created before this ISO 8601 time.")
MESSAGES: JSON = {
    "type": "array",
    "description": "Conversation turns, oldest first.",
    "items": _obj({"role": STRING, "content": STRING}, ["role", "content"]),
}


def _limit(default: int, maximum: int) -> JSON:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": maximum,
        "description": f"Maximum results. Default {default}, at most {maximum}.",
    }


SCOPE = {"namespace": NAMESPACE, "session_id": SESSION_ID, "agent_id": AGENT_ID}
FILTERS = {**SCOPE, "memory_type": MEMORY_TYPE, "tags": TAGS, "after": AFTER, "before": BEFORE}
# Trust (README, "Memory poisoning"): hold back what Engram flagged as instruction-like, keep to
# some sources
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


# ---- the tools ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    arguments: JSON  # properties
    required: tuple[str, ...]
    output: JSON
    request: Callable[[JSON], RestCall]
    shape: Callable[[Any], JSON] = lambda body: dict(body)
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    @property
    def input_schema(self) -> JSON:
        return _obj(self.arguments, list(self.required))

    def pick(self, args: Mapping[str, Any]) -> JSON:
        """The declared arguments given, with nulls left out unless the schema allows null
        (update's `expires_at: null` clears the expiry)."""
        return {
            k: args[k]
            for k, schema in self.arguments.items()
            if k in args and (args[k] is not None or "null" in _types(schema))
        }


def _types(schema: JSON) -> list[str]:
    kind = schema.get("type")
    return kind if isinstance(kind, list) else [kind] if kind else []


def _path_id(value: Any) -> str:
    return quote(str(value), safe="")


def _without(args: JSON, *names: str) -> JSON:
    """Picked arguments minus those that go in the path."""
    return {k: v for k, v in args.items() if k not in names}


def _memory_result(body: Any) -> JSON:
    memory = {k: v for k, v in body.items() if k != "tokens_used"}
    return {
        "memory": memory,
        **({"tokens_used": body["tokens_used"]} if "tokens_used" in body else {}),
    }


def _context_request(args: JSON) -> RestCall:
    body = _without(args, "limit")
    if "max_memories" not in body and args.get("limit") is not None:
        body["max_memories"] = args["limit"]  # memoclaw-mcp's name for it
    return RestCall("POST", "/v1/context", body=body)


def _graph_request(args: JSON) -> RestCall:
    types = args.get("relation_types") or (
        [args["relation_type"]] if args.get("relation_type") else None
    )
    return RestCall(
        "GET",
        f"/v1/memories/{_path_id(args['memory_id'])}/graph",
        query={"depth": args.get("depth"), "limit": args.get("limit"), "relation_types": types},
    )


def _wallet_read(
    name: str, title: str, description: str, path: str, output: JSON, required: list[str]
) -> Tool:
    """A free tool without arguments that reads one of the wallet's overviews."""
    return Tool(
        name, title, description, {}, (), _obj(output, required),
        lambda a: RestCall("GET", path), read_only=True, idempotent=True,
    )  # fmt: skip


def _tools() -> list[Tool]:
    tools = [
        Tool(
            "memoclaw_store",
            "Store memory",
            "Save one fact, preference, decision or correction for later sessions. Use it when the"
            " user tells you something worth remembering, or you learn a durable fact about the"
            " user or project. One self-contained fact per call; near-duplicates are merged."
            " Paid call (free tier first).",
            {"content": CONTENT, **MEMORY_FIELDS},
            ("content",),
            _obj(
                {
                    "memory": MEMORY,
                    "id": STRING,
                    "stored": BOOLEAN,
                    "deduplicated": BOOLEAN,
                    "tokens_used": INTEGER,
                    "content": STRING,
                },
                ["memory", "id"],
            ),
            lambda a: RestCall("POST", "/v1/store", body=a),
        ),
        Tool(
            "memoclaw_recall",
            "Semantic recall",
            "Find memories by meaning. Use it before answering anything that may depend on what"
            " you were told earlier (preferences, past decisions, project facts). Results are"
            " ranked; use min_similarity (e.g. 0.3) to keep only relevant ones. For exact"
            " keywords use memoclaw_search; if you know the ID use memoclaw_get. Paid call"
            " (free tier first).",
            {
                "query": _s("What you are looking for, in plain words.", minLength=1),
                "limit": _limit(5, 100),
                "min_similarity": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "Drop results below this similarity (0-1).",
                },
                **FILTERS,
                "include_relations": {
                    "type": "boolean",
                    "description": "Also return each memory's relations.",
                },
                **TRUST,
            },
            ("query",),
            _obj(
                {"memories": {"type": "array", "items": RECALLED}, "query_tokens": INTEGER},
                ["memories"],
            ),
            lambda a: RestCall("POST", "/v1/recall", body=a),
            read_only=True,
        ),
        Tool(
            "memoclaw_search",
            "Keyword search",
            "Find memories containing given words (full-text, not by meaning). Use it for names,"
            " identifiers or exact phrases; for meaning use memoclaw_recall. Free.",
            {"query": _s("Words to look for.", minLength=1), "limit": _limit(10, 100), **FILTERS},
            ("query",),
            _obj({"memories": MEMORIES, "total": INTEGER, "query": STRING}, ["memories"]),
            lambda a: RestCall("POST", "/v1/search", body=a),
            read_only=True,
            idempotent=True,
        ),
        Tool(
            "memoclaw_get",
            "Get memory",
            "Read one memory by its ID, when you already have the ID. Free.",
            {"id": MEMORY_ID},
            ("id",),
            _obj({"memory": MEMORY}, ["memory"]),
            lambda a: RestCall("GET", f"/v1/memories/{_path_id(a['id'])}"),
            lambda body: {"memory": body},
            read_only=True,
            idempotent=True,
        ),
        Tool(
            "memoclaw_feedback",
            "Say a memory helped",
            "Tell Engram that a memory you recalled actually helped (helpful: true, the default)"
            " or did not (false: nothing is recorded). A memory that helped counts as used, and"
            " recall ranks memories used often a little higher (at most one use a day counts)."
            " Call it only for memories you used in your answer, never for everything recall"
            " returned. Engram's addition. Free.",
            {"id": MEMORY_ID, "helpful": {**BOOLEAN, "description": "Did it help? Default true."}},
            ("id",),
            _obj(
                {"id": STRING, "counted": BOOLEAN, "access_count": INTEGER, "accessed_at": STRING},
                ["id", "counted", "access_count"],
            ),
            lambda a: RestCall(
                "POST", f"/v1/memories/{_path_id(a['id'])}/feedback", body=_without(a, "id")
            ),
        ),
        Tool(
            "memoclaw_list",
            "List memories",
            "Browse memories newest first, with filters and paging. Use it to review what is"
            " stored (e.g. everything in a namespace); to find something use memoclaw_recall."
            " Free.",
            {
                "limit": _limit(20, 100),
                "offset": {"type": "integer", "minimum": 0, "description": "Paging offset."},
                **SCOPE,
                "memory_type": MEMORY_TYPE,
                "tags": TAGS,
                "pinned": {"type": "boolean", "description": "Only pinned (true) or unpinned."},
                "after": AFTER,
                "before": BEFORE,
            },
            (),
            _obj(
                {"memories": MEMORIES, "total": INTEGER, "limit": INTEGER, "offset": INTEGER},
                ["memories", "total"],
            ),
            lambda a: RestCall("GET", "/v1/memories", query=a),
            read_only=True,
            idempotent=True,
        ),
        Tool(
            "memoclaw_update",
            "Update memory",
            "Change a memory in place: correct its content (re-embedded), importance, tags,"
            " namespace, type or expiry. Use it when a stored fact became wrong or outdated,"
            " rather than storing a contradicting one. Only the fields given change. Paid call"
            " (free tier first).",
            {
                "id": MEMORY_ID,
                "content": {**CONTENT, "description": "New content."},
                **MEMORY_FIELDS,
                "expires_at": {
                    **EXPIRES_AT,
                    "type": ["string", "null"],
                    "description": EXPIRES_AT["description"] + " null removes it.",
                },
            },
            ("id",),
            _obj({"memory": MEMORY, "tokens_used": INTEGER}, ["memory"]),
            lambda a: RestCall(
                "PATCH", f"/v1/memories/{_path_id(a['id'])}", body=_without(a, "id")
            ),
            _memory_result,
            idempotent=True,
        ),
        Tool(
            "memoclaw_delete",
            "Delete memory",
            "Delete one memory by ID, when the user asks you to forget something or it is plainly"
            " wrong. Its history is kept. Free.",
            {"id": MEMORY_ID},
            ("id",),
            _obj({"deleted": BOOLEAN, "id": STRING}, ["deleted", "id"]),
            lambda a: RestCall("DELETE", f"/v1/memories/{_path_id(a['id'])}"),
            destructive=True,
            idempotent=True,
        ),
        Tool(
            "memoclaw_pin",
            "Pin memory",
            "Pin a memory so it never decays and is loaded as a core memory at every session"
            " start. Use it for facts that must always be at hand. Free.",
            {"id": MEMORY_ID},
            ("id",),
            _obj({"pinned": BOOLEAN, "id": STRING}, ["pinned", "id"]),
            lambda a: RestCall("POST", "/v1/core", body={"id": a["id"]}),
            idempotent=True,
        ),
        Tool(
            "memoclaw_unpin",
            "Unpin memory",
            "Unpin a memory: it decays normally again and is no longer a core memory. Free.",
            {"id": MEMORY_ID},
            ("id",),
            _obj({"unpinned": BOOLEAN, "id": STRING}, ["unpinned", "id"]),
            lambda a: RestCall("DELETE", f"/v1/core/{_path_id(a['id'])}"),
            idempotent=True,
        ),
        Tool(
            "memoclaw_core_memories",
            "Core memories",
            "The memories that matter most (pinned, important, often used). Read them at the"
            " start of a task to know the user's standing preferences. Free.",
            {"limit": _limit(100, 100), **SCOPE},
            (),
            _obj({"memories": MEMORIES, "total": INTEGER}, ["memories"]),
            lambda a: RestCall("GET", "/v1/core", query=a),
            read_only=True,
            idempotent=True,
        ),
        Tool(
            "memoclaw_context",
            "Build context",
            "A ready-to-read context block of the memories relevant to a situation, within a"
            " token budget. Use it at the start of a task instead of several recalls. Paid LLM"
            " call (free tier first).",
            {
                "query": _s("The task or situation you need context for.", minLength=1),
                **SCOPE,
                "limit": _limit(10, 100),
                "max_memories": _limit(10, 100),
                "max_tokens": {"type": "integer", "minimum": 100, "maximum": 16000},
                "format": _s("text or structured", enum=["text", "structured"]),
                "include_metadata": BOOLEAN,
                "summarize": BOOLEAN,
                **TRUST,
            },
            ("query",),
            _obj(
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
                "text": _s("Raw text to extract facts from.", minLength=1),
                **SCOPE,
                "auto_relate": {
                    "type": "boolean",
                    "description": "Relate the extracted facts to each other.",
                },
            },
            (),
            _obj({**EXTRACTED["properties"], "relations_created": INTEGER}, EXTRACTED["required"]),
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
                "mode": _s("rule (no LLM) or llm", enum=["rule", "llm"]),
                "dry_run": {"type": "boolean", "description": "Only report what would merge."},
            },
            (),
            _obj(
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
        Tool(
            "memoclaw_create_relation",
            "Create relation",
            "Link two memories (related_to, derived_from, contradicts, supersedes, supports),"
            " e.g. a new decision that supersedes an old one. Free.",
            {
                "memory_id": _s("Source memory ID."),
                "target_id": _s("Target memory ID."),
                "relation_type": _s("Kind of link.", enum=RELATION_TYPES),
                "metadata": METADATA,
            },
            ("memory_id", "target_id", "relation_type"),
            _obj({"relation": RELATION}, ["relation"]),
            lambda a: RestCall(
                "POST",
                f"/v1/memories/{_path_id(a['memory_id'])}/relations",
                body=_without(a, "memory_id"),
            ),
            lambda body: {"relation": body},
        ),
        Tool(
            "memoclaw_list_relations",
            "List relations",
            "The links of one memory, both directions, with the memory at the other end. Free.",
            {"memory_id": MEMORY_ID},
            ("memory_id",),
            _obj({"relations": {"type": "array", "items": LINKED}}, ["relations"]),
            lambda a: RestCall("GET", f"/v1/memories/{_path_id(a['memory_id'])}/relations"),
            read_only=True,
            idempotent=True,
        ),
        Tool(
            "memoclaw_graph",
            "Memory graph",
            "Walk the links around a memory, up to a depth, to see how facts connect. Free.",
            {
                "memory_id": MEMORY_ID,
                "depth": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 5,
                    "description": "Hops to follow. Default 2.",
                },
                "limit": _limit(50, 200),
                "relation_type": _s("Follow only this kind of link.", enum=RELATION_TYPES),
                "relation_types": {
                    "type": "array",
                    "items": {"type": "string", "enum": RELATION_TYPES},
                },
            },
            ("memory_id",),
            _obj(
                {
                    "root": NODE,
                    "nodes": {"type": "array", "items": NODE},
                    "edges": {"type": "array", "items": EDGE},
                    "depth": INTEGER,
                },
                ["root", "nodes", "edges"],
            ),
            _graph_request,
            read_only=True,
            idempotent=True,
        ),
        Tool(
            "memoclaw_history",
            "Memory history",
            "Every change made to a memory (create, update, delete), oldest first. Use it to see"
            " what a fact said before. Free.",
            {"id": MEMORY_ID},
            ("id",),
            _obj(
                {
                    "history": {
                        "type": "array",
                        "items": _obj(
                            {
                                "id": STRING,
                                "memory_id": STRING,
                                "action": STRING,
                                "changes": OBJECT,
                                "created_at": STRING,
                            },
                            ["id", "action"],
                        ),
                    }
                },
                ["history"],
            ),
            lambda a: RestCall("GET", f"/v1/memories/{_path_id(a['id'])}/history"),
            read_only=True,
            idempotent=True,
        ),
        _wallet_read(
            "memoclaw_stats",
            "Memory statistics",
            "Counts of the wallet's memories (total, pinned, by type, by namespace). Free.",
            "/v1/stats",
            {
                "total_memories": INTEGER,
                "pinned_count": INTEGER,
                "never_accessed": INTEGER,
                "total_accesses": INTEGER,
                "avg_importance": NUMBER,
                "oldest_memory": STRING,
                "newest_memory": STRING,
                "by_type": {"type": "array", "items": OBJECT},
                "by_namespace": {"type": "array", "items": OBJECT},
            },
            ["total_memories"],
        ),
        _wallet_read(
            "memoclaw_namespaces",
            "List namespaces",
            "The namespaces that hold memories, with counts. Use it to pick where to recall or"
            " store. Free.",
            "/v1/namespaces",
            {
                "namespaces": {
                    "type": "array",
                    "items": _obj(
                        {"name": STRING, "count": INTEGER, "last_memory_at": STRING},
                        ["name", "count"],
                    ),
                },
                "total": INTEGER,
            },
            ["namespaces"],
        ),
        _wallet_read(
            "memoclaw_status",
            "Free tier status",
            "How many free calls this wallet has left before paid calls need an x402 payment."
            " Free.",
            "/v1/free-tier/status",
            {
                "wallet": STRING,
                "free_tier_remaining": INTEGER,
                "free_tier_total": INTEGER,
                "free_tier_used": INTEGER,
            },
            ["wallet", "free_tier_remaining", "free_tier_total"],
        ),
    ]
    return tools


TOOLS: dict[str, Tool] = {t.name: t for t in _tools()}
