"""Wire structs for relations and the memory graph, and the rendering of their rows into the shapes
MemoClaw's SDK parses (`Relation`, `RelationWithMemory`, `MemoryGraphResponse`;
docs/api-contract.md, "Relations, graph and history" and "MemoClaw compatibility").
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

from msgspec import Meta, Struct

from app.core.schemas import Metadata, StrictStruct, iso
from app.memory.schemas import LinkedRelation, RelationType

RELATION_TYPES: tuple[str, ...] = get_args(RelationType)

# Graph walk bounds (docs/api-contract.md, "Limits": depth ≤ 5, default 2; limit ≤ 200, default 50).
DEFAULT_GRAPH_DEPTH = 2
MAX_GRAPH_DEPTH = 5
DEFAULT_GRAPH_LIMIT = 50
MAX_GRAPH_LIMIT = 200


class RelationIn(StrictStruct):
    target_id: Annotated[str, Meta(min_length=1, max_length=64)]
    relation_type: RelationType
    metadata: Metadata | None = None


# ---- answers -----------------------------------------------------------------------------------


class Relation(Struct):
    """A created relation: the SDK's `Relation` (every field required there)."""

    id: str
    source_id: str
    target_id: str
    relation_type: RelationType
    metadata: Metadata
    created_at: str


class RelationList(Struct):
    relations: list[LinkedRelation]


class RelationDeleted(Struct):
    deleted: bool
    id: str


class GraphNode(Struct):
    id: str
    content: str
    importance: float
    memory_type: str
    namespace: str
    depth: int  # relations from the root


class GraphEdge(Struct):
    id: str
    source_id: str
    target_id: str
    relation_type: RelationType


class MemoryGraph(Struct):
    """The SDK's `MemoryGraphResponse`: `depth` is the depth asked for; each node has its own."""

    root: GraphNode
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    depth: int


def relation_to_wire(row: Any) -> Relation:
    return Relation(
        id=str(row["id"]),
        source_id=str(row["source_id"]),
        target_id=str(row["target_id"]),
        relation_type=row["relation_type"],
        metadata=row["metadata"] or {},
        created_at=iso(row["created_at"]),
    )


def node_to_wire(row: Any) -> GraphNode:
    return GraphNode(
        id=str(row["id"]),
        content=row["content"],
        importance=float(row["importance"]),
        memory_type=row["memory_type"],
        namespace=row["namespace"],
        depth=int(row["depth"]),
    )


def edge_to_wire(row: Any) -> GraphEdge:
    return GraphEdge(
        id=str(row["id"]),
        source_id=str(row["source_id"]),
        target_id=str(row["target_id"]),
        relation_type=row["relation_type"],
    )
