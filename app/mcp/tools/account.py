"""The tools on the wallet as a whole, free and without arguments: its memory statistics, its
namespaces, and the free calls it has left before paid calls need an x402 payment."""

from __future__ import annotations

from app.mcp.rest import RestCall
from app.mcp.tools.schemas import INTEGER, JSON, NUMBER, OBJECT, STRING, object_of
from app.mcp.tools.tool import Tool


def _wallet_read(
    name: str, title: str, description: str, path: str, output: JSON, required: list[str]
) -> Tool:
    """A free tool without arguments that reads one of the wallet's overviews."""
    return Tool(
        name, title, description, {}, (), object_of(output, required),
        lambda a: RestCall("GET", path), read_only=True, idempotent=True,
    )  # fmt: skip


ACCOUNT_TOOLS: tuple[Tool, ...] = (
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
                "items": object_of(
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
        "How many free calls this wallet has left before paid calls need an x402 payment. Free.",
        "/v1/free-tier/status",
        {
            "wallet": STRING,
            "free_tier_remaining": INTEGER,
            "free_tier_total": INTEGER,
            "free_tier_used": INTEGER,
        },
        ["wallet", "free_tier_remaining", "free_tier_total"],
    ),
)
