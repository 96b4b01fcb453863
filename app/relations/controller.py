"""HTTP for relations between memories and the memory graph (all free calls).

The paths sit one or two segments below /v1/memories/{id}, so they never compete with the
/v1/memories/* routes of app/memory/controller.py (Litestar matches by whole segments).
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from app.http.openapi import NO_SUCH_MEMORY, error_responses
from app.http.params import Conn, WalletRequest
from app.memory.schemas import linked_to_wire
from app.relations.schemas import (
    DEFAULT_GRAPH_DEPTH,
    DEFAULT_GRAPH_LIMIT,
    MAX_GRAPH_DEPTH,
    MAX_GRAPH_LIMIT,
    MemoryGraph,
    Relation,
    RelationDeleted,
    RelationIn,
    RelationList,
    edge_to_wire,
    node_to_wire,
    relation_to_wire,
)
from app.relations.service import RelationService

Relations = NamedDependency[RelationService]
GraphDepth = Annotated[int, QueryParameter(ge=1, le=MAX_GRAPH_DEPTH)]
GraphLimit = Annotated[int, QueryParameter(ge=1, le=MAX_GRAPH_LIMIT)]


class RelationController(Controller):
    path = "/v1/memories"
    tags = ["relations"]

    @post(
        "/{memory_id:str}/relations",
        status_code=HTTP_201_CREATED,
        responses=error_responses(
            not_found="No memory with this id, or no target memory, among the caller's memories",
            conflict="The memories are already related this way (`details.relation_id`)",
        ),
    )
    async def create_relation(
        self,
        request: WalletRequest,
        conn: Conn,
        relations_service: Relations,
        memory_id: FromPath[str],
        data: JSONBody[RelationIn],
    ) -> Relation:
        row = await relations_service.create(conn, request.user, memory_id, data)
        return relation_to_wire(row)

    @get("/{memory_id:str}/relations", responses=error_responses(not_found=NO_SUCH_MEMORY))
    async def list_relations(
        self, request: WalletRequest, conn: Conn, relations_service: Relations,
        memory_id: FromPath[str],
    ) -> RelationList:  # fmt: skip
        rows = await relations_service.list_for(conn, request.user, memory_id)
        return RelationList([linked_to_wire(r) for r in rows])

    @delete(
        "/{memory_id:str}/relations/{relation_id:str}",
        status_code=HTTP_200_OK,
        responses=error_responses(not_found="The memory has no relation with this id"),
    )
    async def delete_relation(
        self,
        request: WalletRequest,
        conn: Conn,
        relations_service: Relations,
        memory_id: FromPath[str],
        relation_id: FromPath[str],
    ) -> RelationDeleted:
        deleted = await relations_service.delete(conn, request.user, memory_id, relation_id)
        return RelationDeleted(True, str(deleted))

    @get("/{memory_id:str}/graph", responses=error_responses(not_found=NO_SUCH_MEMORY))
    async def graph(
        self,
        request: WalletRequest,
        conn: Conn,
        relations_service: Relations,
        memory_id: FromPath[str],
        depth: GraphDepth = DEFAULT_GRAPH_DEPTH,
        limit: GraphLimit = DEFAULT_GRAPH_LIMIT,
        relation_types: FromQuery[list[str] | None] = None,
    ) -> MemoryGraph:
        """`depth` in the answer is the depth asked for; each node carries its own."""
        graph = await relations_service.graph(
            conn, request.user, memory_id, depth, limit, relation_types
        )
        nodes = [node_to_wire(n) for n in graph.nodes]
        return MemoryGraph(nodes[0], nodes, [edge_to_wire(e) for e in graph.edges], depth)
