"""The tools on memories themselves: store, recall and keyword search, get, list, update and
delete, feedback on a recalled memory, pin and unpin, and the core memories."""

from __future__ import annotations

from typing import Any

from app.mcp.rest import RestCall
from app.mcp.tools.schemas import (
    AFTER,
    BEFORE,
    BOOLEAN,
    CONTENT,
    EXPIRES_AT,
    FILTERS,
    INTEGER,
    JSON,
    MEMORIES,
    MEMORY,
    MEMORY_FIELDS,
    MEMORY_ID,
    MEMORY_TYPE,
    RECALLED,
    SCOPE,
    STRING,
    TAGS,
    TRUST,
    limit_arg,
    object_of,
    string_arg,
)
from app.mcp.tools.tool import Tool, path_id, without


def _memory_result(body: Any) -> JSON:
    memory = {k: v for k, v in body.items() if k != "tokens_used"}
    return {
        "memory": memory,
        **({"tokens_used": body["tokens_used"]} if "tokens_used" in body else {}),
    }


MEMORY_TOOLS: tuple[Tool, ...] = (
    Tool(
        "memoclaw_store",
        "Store memory",
        "Save one fact, preference, decision or correction for later sessions. Use it when the"
        " user tells you something worth remembering, or you learn a durable fact about the"
        " user or project. One self-contained fact per call; near-duplicates are merged."
        " Paid call (free tier first).",
        {"content": CONTENT, **MEMORY_FIELDS},
        ("content",),
        object_of(
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
            "query": string_arg("What you are looking for, in plain words.", minLength=1),
            "limit": limit_arg(5, 100),
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
        object_of(
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
        {
            "query": string_arg("Words to look for.", minLength=1),
            "limit": limit_arg(10, 100),
            **FILTERS,
        },
        ("query",),
        object_of({"memories": MEMORIES, "total": INTEGER, "query": STRING}, ["memories"]),
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
        object_of({"memory": MEMORY}, ["memory"]),
        lambda a: RestCall("GET", f"/v1/memories/{path_id(a['id'])}"),
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
        object_of(
            {"id": STRING, "counted": BOOLEAN, "access_count": INTEGER, "accessed_at": STRING},
            ["id", "counted", "access_count"],
        ),
        lambda a: RestCall(
            "POST", f"/v1/memories/{path_id(a['id'])}/feedback", body=without(a, "id")
        ),
    ),
    Tool(
        "memoclaw_list",
        "List memories",
        "Browse memories newest first, with filters and paging. Use it to review what is"
        " stored (e.g. everything in a namespace); to find something use memoclaw_recall."
        " Free.",
        {
            "limit": limit_arg(20, 100),
            "offset": {"type": "integer", "minimum": 0, "description": "Paging offset."},
            **SCOPE,
            "memory_type": MEMORY_TYPE,
            "tags": TAGS,
            "pinned": {"type": "boolean", "description": "Only pinned (true) or unpinned."},
            "after": AFTER,
            "before": BEFORE,
        },
        (),
        object_of(
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
        object_of({"memory": MEMORY, "tokens_used": INTEGER}, ["memory"]),
        lambda a: RestCall("PATCH", f"/v1/memories/{path_id(a['id'])}", body=without(a, "id")),
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
        object_of({"deleted": BOOLEAN, "id": STRING}, ["deleted", "id"]),
        lambda a: RestCall("DELETE", f"/v1/memories/{path_id(a['id'])}"),
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
        object_of({"pinned": BOOLEAN, "id": STRING}, ["pinned", "id"]),
        lambda a: RestCall("POST", "/v1/core", body={"id": a["id"]}),
        idempotent=True,
    ),
    Tool(
        "memoclaw_unpin",
        "Unpin memory",
        "Unpin a memory: it decays normally again and is no longer a core memory. Free.",
        {"id": MEMORY_ID},
        ("id",),
        object_of({"unpinned": BOOLEAN, "id": STRING}, ["unpinned", "id"]),
        lambda a: RestCall("DELETE", f"/v1/core/{path_id(a['id'])}"),
        idempotent=True,
    ),
    Tool(
        "memoclaw_core_memories",
        "Core memories",
        "The memories that matter most (pinned, important, often used). Read them at the"
        " start of a task to know the user's standing preferences. Free.",
        {"limit": limit_arg(100, 100), **SCOPE},
        (),
        object_of({"memories": MEMORIES, "total": INTEGER}, ["memories"]),
        lambda a: RestCall("GET", "/v1/core", query=a),
        read_only=True,
        idempotent=True,
    ),
)
