"""The tools on how memories connect and how one changed: create and list a memory's relations,
walk the graph around it, read its history."""

from __future__ import annotations

from app.mcp.rest import RestCall
from app.mcp.tools.schemas import (
    INTEGER,
    JSON,
    MEMORY_ID,
    METADATA,
    NUMBER,
    OBJECT,
    STRING,
    limit_arg,
    object_of,
    string_arg,
)
from app.mcp.tools.tool import Tool, path_id, without

# Values from the REST schemas (app/relations/schemas.py).
RELATION_TYPES = ["related_to", "derived_from", "contradicts", "supersedes", "supports"]

RELATION: JSON = object_of(
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
LINKED: JSON = object_of(
    {
        "id": STRING,
        "relation_type": STRING,
        "direction": STRING,
        "metadata": OBJECT,
        "created_at": STRING,
        "memory": object_of({"id": STRING, "content": STRING}, ["id"]),
    },
    ["id", "relation_type", "direction", "memory"],
)
NODE: JSON = object_of(
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
EDGE: JSON = object_of(
    {"id": STRING, "source_id": STRING, "target_id": STRING, "relation_type": STRING},
    ["id", "source_id", "target_id", "relation_type"],
)


def _graph_request(args: JSON) -> RestCall:
    types = args.get("relation_types") or (
        [args["relation_type"]] if args.get("relation_type") else None
    )
    return RestCall(
        "GET",
        f"/v1/memories/{path_id(args['memory_id'])}/graph",
        query={"depth": args.get("depth"), "limit": args.get("limit"), "relation_types": types},
    )


RELATION_TOOLS: tuple[Tool, ...] = (
    Tool(
        "memoclaw_create_relation",
        "Create relation",
        "Link two memories (related_to, derived_from, contradicts, supersedes, supports),"
        " e.g. a new decision that supersedes an old one. Free.",
        {
            "memory_id": string_arg("Source memory ID."),
            "target_id": string_arg("Target memory ID."),
            "relation_type": string_arg("Kind of link.", enum=RELATION_TYPES),
            "metadata": METADATA,
        },
        ("memory_id", "target_id", "relation_type"),
        object_of({"relation": RELATION}, ["relation"]),
        lambda a: RestCall(
            "POST",
            f"/v1/memories/{path_id(a['memory_id'])}/relations",
            body=without(a, "memory_id"),
        ),
        lambda body: {"relation": body},
    ),
    Tool(
        "memoclaw_list_relations",
        "List relations",
        "The links of one memory, both directions, with the memory at the other end. Free.",
        {"memory_id": MEMORY_ID},
        ("memory_id",),
        object_of({"relations": {"type": "array", "items": LINKED}}, ["relations"]),
        lambda a: RestCall("GET", f"/v1/memories/{path_id(a['memory_id'])}/relations"),
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
            "limit": limit_arg(50, 200),
            "relation_type": string_arg("Follow only this kind of link.", enum=RELATION_TYPES),
            "relation_types": {
                "type": "array",
                "items": {"type": "string", "enum": RELATION_TYPES},
            },
        },
        ("memory_id",),
        object_of(
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
        object_of(
            {
                "history": {
                    "type": "array",
                    "items": object_of(
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
        lambda a: RestCall("GET", f"/v1/memories/{path_id(a['id'])}/history"),
        read_only=True,
        idempotent=True,
    ),
)
