"""HTTP for memories: parse the request, call the service, render MemoClaw's response shapes."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Annotated, Literal

import asyncpg
import msgspec
from litestar import Controller, HttpMethod, delete, get, patch, post, route
from litestar.di import NamedDependency, Provide
from litestar.params import (
    FromPath,
    FromQuery,
    HeaderParameter,
    JSONBody,
    Parameter,
    QueryParameter,
)
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from app.access.requests import Acting
from app.access.rules import OWNER, Actor
from app.core import contract
from app.core.contract import DEFAULT_NAMESPACE
from app.core.errors import Forbidden, MemoryNotFound
from app.core.provenance import WRITING
from app.core.schemas import absent_if_none, iso
from app.grants.schemas import Access
from app.http.markers import acts_for_owner, one_statement, paid
from app.http.openapi import (
    IMMUTABLE_MEMORY,
    NO_SUCH_MEMORY,
    OWNER_ONLY_FIELD,
    VERSION_CONFLICT,
    error_responses,
)
from app.http.params import Conn, MaybeWalletRequest, Offset, PageLimit, WalletRequest
from app.http.transaction import relax_commit, request_transaction
from app.memory.filters import ListOrder, ListSort, MemoryFilter
from app.memory.ports import LinkedRelations
from app.memory.schemas import (
    MAX_SEARCH_QUERY_CHARS,
    BatchUpdateAnswer,
    BatchUpdateError,
    BatchUpdateIn,
    BatchUpdateResult,
    DeleteManyAnswer,
    DeleteResult,
    FeedbackAnswer,
    FeedbackIn,
    IdsIn,
    Memory,
    MemoryCount,
    MemoryDeleted,
    MemoryPage,
    MemoryStats,
    MemoryType,
    NamespaceCount,
    NamespaceList,
    NamespaceTotal,
    RecallAnswer,
    RecallIn,
    SearchAnswer,
    SearchIn,
    StoreAnswer,
    StoreBatchAnswer,
    StoreBatchIn,
    StoreIn,
    TypeCount,
    UpdatedMemory,
    UpdateIn,
    linked_to_wire,
    memory_fields,
    memory_to_wire,
    recalled_to_wire,
    split_tags,
)
from app.memory.service import MemoryService, list_filter, version_in

Memories = NamedDependency[MemoryService]


def provide_memory_filter(
    request: WalletRequest,
    namespace: FromQuery[str | None] = None,
    session_id: FromQuery[str | None] = None,
    agent_id: FromQuery[str | None] = None,
    memory_type: FromQuery[MemoryType | None] = None,
    tags: FromQuery[list[str] | None] = None,
    pinned: FromQuery[bool | None] = None,
    immutable: FromQuery[bool | None] = None,
    after: FromQuery[str | None] = None,
    before: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    include_deleted: FromQuery[bool] = False,
    metadata: FromQuery[str | None] = None,
) -> MemoryFilter:
    """The list/count/search query parameters (`since`/`until` are the CLI's names for
    after/before; `metadata` is a JSON object the memories' metadata must contain)."""
    return list_filter(
        request.user, namespace=namespace, session_id=session_id, agent_id=agent_id,
        memory_type=memory_type, tags=tags, after=after or since, before=before or until,
        pinned=pinned, immutable=immutable, include_deleted=include_deleted, metadata=metadata,
    )  # fmt: skip


async def provide_transaction_after_filter(
    request: MaybeWalletRequest, memory_filter: NamedDependency[MemoryFilter]
) -> AsyncGenerator[asyncpg.Connection, None]:
    """The request transaction, opened only once the filter's parameters are checked: as a
    sibling of the filter it would be cancelled mid-way by the filter's 422."""
    async with request_transaction(request) as conn:
        yield conn


# list and count: their query parameters become a filter, checked before the transaction opens
MEMORY_FILTER = {
    "memory_filter": Provide(provide_memory_filter, sync_to_thread=False),
    "conn": Provide(provide_transaction_after_filter),
}
SortOrder = Literal["asc", "desc"]


class MemoryController(Controller):
    path = "/v1"
    tags = ["memories"]

    @post(
        "/store",
        opt={**paid(contract.STORE), **acts_for_owner()},
        status_code=HTTP_201_CREATED,
        responses=error_responses(
            conflict=IMMUTABLE_MEMORY, precondition=VERSION_CONFLICT, forbidden=OWNER_ONLY_FIELD
        ),
    )
    async def store(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        acting: NamedDependency[Acting],
        data: JSONBody[StoreIn],
    ) -> StoreAnswer:
        wallet, actor = await acting.reach(data.namespace, "write")
        if actor.kept_to is not None:
            data = msgspec.structs.replace(data, namespace=actor.kept_to)
        if data.agent_id is None and (agent := acting.agent) is not None:
            data = msgspec.structs.replace(data, agent_id=agent)
        outcome, tokens = await memory_service.store(conn, wallet, data, actor)
        memory = memory_to_wire(outcome.row)
        return StoreAnswer(
            id=memory.id,
            stored=True,
            deduplicated=outcome.deduplicated,
            tokens_used=tokens,
            memory=memory,
        )

    @post(
        "/store/batch",
        opt=paid(contract.STORE_BATCH, metered=contract.PER_ITEM),
        status_code=HTTP_201_CREATED,
        responses=error_responses(conflict=IMMUTABLE_MEMORY, precondition=VERSION_CONFLICT),
    )
    async def store_batch(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        data: JSONBody[StoreBatchIn],
    ) -> StoreBatchAnswer:
        outcomes, tokens = await memory_service.store_batch(conn, request.user, data.memories)
        return StoreBatchAnswer(
            ids=[str(o.row["id"]) for o in outcomes],
            stored=True,
            count=len(outcomes),
            deduplicated_count=sum(o.deduplicated for o in outcomes),
            tokens_used=tokens,
            memories=[memory_to_wire(o.row) for o in outcomes],
        )

    @post("/recall", opt={**paid(contract.RECALL), **acts_for_owner()}, status_code=HTTP_200_OK)
    async def recall(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        relations_service: NamedDependency[LinkedRelations],
        acting: NamedDependency[Acting],
        data: JSONBody[RecallIn],
    ) -> RecallAnswer:
        wallet, actor = await acting.reach(data.namespace, "read")
        if actor.kept_to is not None:
            data = msgspec.structs.replace(data, namespace=actor.kept_to)
        if data.exclude_flagged is None:  # a hook's recall goes into a prompt: held back
            data = msgspec.structs.replace(data, exclude_flagged=WRITING.get().surface == "hook")
        recalled, tokens, reranked, held_back = await memory_service.recall(
            conn, wallet, data, actor
        )
        relax_commit(request)  # its writes are access counts (app/http/transaction.py)
        items = [recalled_to_wire(r) for r in recalled]
        if data.include_relations:
            # GET /v1/memories/{id}/relations's list shape, for every result in one query; a
            # grantee's or an agent key's, only those into the namespace it reaches
            linked = await relations_service.of_memories(
                conn, wallet, [r.row["id"] for r in recalled], actor.kept_to
            )
            for item, r in zip(items, recalled, strict=True):
                item.relations = [linked_to_wire(x) for x in linked.get(r.row["id"], [])]
        return RecallAnswer(
            items,
            tokens,
            absent_if_none(reranked),
            absent_if_none(held_back if data.exclude_flagged else None),
        )

    @get(
        "/memories",
        dependencies=MEMORY_FILTER,
        opt={**one_statement(), **acts_for_owner()},  # page + total in one (a grantee's: two)
    )
    async def list_memories(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        acting: NamedDependency[Acting],
        memory_filter: NamedDependency[MemoryFilter],
        limit: PageLimit = 20,
        offset: Offset = 0,
        sort: FromQuery[ListSort] = "created_at",
        order: FromQuery[SortOrder] = "desc",
    ) -> MemoryPage:
        wallet, actor = await acting.reach(memory_filter.namespace, "read")
        if actor.kept_to is not None:
            memory_filter = dataclasses.replace(
                memory_filter, wallet=wallet, namespace=actor.kept_to
            )
        rows, total = await memory_service.list_page(
            conn, memory_filter, limit, offset, ListOrder(sort, order == "desc")
        )
        return MemoryPage([memory_to_wire(r) for r in rows], total, limit, offset)

    @get("/memories/count", dependencies=MEMORY_FILTER, opt=one_statement())
    async def count(
        self, conn: Conn, memory_service: Memories, memory_filter: NamedDependency[MemoryFilter]
    ) -> MemoryCount:
        return MemoryCount(await memory_service.count(conn, memory_filter))

    @post("/search", status_code=HTTP_200_OK)
    async def search(
        self, request: WalletRequest, conn: Conn, memory_service: Memories, data: JSONBody[SearchIn]
    ) -> SearchAnswer:
        f = list_filter(
            request.user, namespace=data.namespace, session_id=data.session_id,
            agent_id=data.agent_id, memory_type=data.memory_type,
            tags=split_tags(data.tags), after=data.after, before=data.before,
        )  # fmt: skip
        rows, total = await memory_service.search(conn, f, data.query, data.limit)
        return SearchAnswer([memory_to_wire(r) for r in rows], total, data.query)

    # MemoClaw's MCP server searches here, with the list's filters (pinned, metadata, after...)
    # and its sort/order.
    @get("/memories/search", dependencies=MEMORY_FILTER)
    async def search_legacy(
        self,
        conn: Conn,
        memory_service: Memories,
        memory_filter: NamedDependency[MemoryFilter],
        q: Annotated[str, QueryParameter(min_length=1, max_length=MAX_SEARCH_QUERY_CHARS)],
        limit: PageLimit = 10,
        sort: FromQuery[ListSort | None] = None,  # best match first unless asked
        order: FromQuery[SortOrder] = "desc",
    ) -> SearchAnswer:
        by = ListOrder(sort, order == "desc") if sort else None
        rows, total = await memory_service.search(conn, memory_filter, q, limit, by)
        return SearchAnswer([memory_to_wire(r) for r in rows], total, q)

    @get(
        "/memories/{memory_id:str}",
        responses=error_responses(not_found=NO_SUCH_MEMORY),
        # the read and its access count in one (a grantee's: the grant and the memory first)
        opt={**one_statement(), **acts_for_owner()},
    )
    async def get_memory(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        acting: NamedDependency[Acting],
        memory_id: FromPath[str],
    ) -> Memory:
        wallet, _ = await self._owner_of(acting, conn, memory_service,
                                         memory_id, "read")  # fmt: skip
        # reading a memory by id is a use: it counts as an access (app/memory/scoring.py)
        row, _ = await memory_service.use(conn, wallet, memory_id)
        return memory_to_wire(row)

    async def _owner_of(
        self,
        acting: Acting,
        conn: asyncpg.Connection,
        memory_service: MemoryService,
        memory_id: str,
        need: Access,
    ) -> tuple[str, Actor]:
        """The wallet a by-id request reaches and who acts there: the caller's, or the owner
        it names when a grant (or the agent key's delegation) covers the memory's namespace.
        A memory the caller may not read there is not found, as a missing one is: the answer
        names nothing (no namespace, no owner) the caller could not see."""
        if not acting.for_another:
            return acting.caller, OWNER
        row = await memory_service.get(
            conn, (acting.named_owner or acting.caller).lower(), memory_id
        )
        try:
            reach = await acting.reach(row["namespace"], "read")
        except Forbidden:
            raise MemoryNotFound(memory_id) from None
        if need == "read":
            return reach
        return await acting.reach(row["namespace"], need)

    @get(
        "/memories/by-key/{key:path}",
        responses=error_responses(not_found="No live memory holds this key in the namespace"),
        opt={**one_statement(), **acts_for_owner()},
    )
    async def get_by_key(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        acting: NamedDependency[Acting],
        # a path parameter (keys may hold "/"): Litestar documents it as a URI, which it is not
        key: Annotated[Path, Parameter(schema_extra={"format": "path"})],
        namespace: FromQuery[str] = DEFAULT_NAMESPACE,
    ) -> Memory:
        """The memory a store named `key` in the namespace (keys may hold `/`)."""
        wallet, actor = await acting.reach(namespace, "read")
        row = await memory_service.by_key(
            conn, wallet, actor.kept_to or namespace, str(key).lstrip("/")
        )
        return memory_to_wire(row)

    @post(
        "/memories/{memory_id:str}/feedback",
        status_code=HTTP_200_OK,
        responses=error_responses(not_found=NO_SUCH_MEMORY),
    )
    async def feedback(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        memory_id: FromPath[str],
        data: JSONBody[FeedbackIn | None] = None,
    ) -> FeedbackAnswer:
        """Say a memory helped (Engram's addition): counts as an access, at most once a day."""
        if data is not None and not data.helpful:
            row = await memory_service.get(conn, request.user, memory_id)
            counted = False
        else:
            row, counted = await memory_service.use(conn, request.user, memory_id)
        return FeedbackAnswer(
            str(row["id"]), counted, int(row["access_count"]), iso(row["accessed_at"])
        )

    @patch(
        "/memories/{memory_id:str}",
        opt={**paid(contract.UPDATE), **acts_for_owner()},
        responses=error_responses(
            not_found=NO_SUCH_MEMORY,
            conflict=IMMUTABLE_MEMORY,
            precondition=VERSION_CONFLICT,
            forbidden=OWNER_ONLY_FIELD,
        ),
    )
    async def update(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        memory_id: FromPath[str],
        acting: NamedDependency[Acting],
        data: JSONBody[UpdateIn],
        if_match: Annotated[
            str | None,
            HeaderParameter(name="if-match", description="the version the writer read: 412 if not"),
        ] = None,
    ) -> UpdatedMemory:
        if if_match is not None and data.expected_version is None:
            data = msgspec.structs.replace(data, expected_version=version_in(if_match))
        wallet, actor = await self._owner_of(acting, conn, memory_service,
                                             memory_id, "write")  # fmt: skip
        if data.namespace is not None and actor.for_owner:
            await acting.reach(data.namespace, "write")  # moved there
        row, tokens = await memory_service.update(conn, wallet, memory_id, data, actor)
        return UpdatedMemory(**memory_fields(row), tokens_used=tokens)

    # The SDK sends PATCH /memories/batch; MemoClaw's CLI sends POST /memories/batch-update.
    @route(
        ["/memories/batch", "/memories/batch-update"],
        http_method=[HttpMethod.PATCH, HttpMethod.POST],
        opt=paid(contract.BATCH_UPDATE),
        status_code=HTTP_200_OK,
    )
    async def update_batch(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: Memories,
        data: JSONBody[BatchUpdateIn],
    ) -> BatchUpdateAnswer:
        results, tokens = await memory_service.update_batch(
            conn, request.user, [(item.id, item) for item in data.updates]
        )
        updated = sum(r.updated for r in results)
        return BatchUpdateAnswer(
            results=[
                BatchUpdateResult(id=r.memory_id, updated=True)
                if r.error is None
                else BatchUpdateResult(id=r.memory_id, updated=False, error=r.error.message)
                for r in results
            ],
            updated=updated,
            failed=len(results) - updated,
            errors=[
                BatchUpdateError(r.memory_id, r.error.status_code, r.error.message)
                for r in results
                if r.error is not None
            ],
            tokens_used=tokens,
        )

    @delete(
        "/memories/{memory_id:str}",
        status_code=HTTP_200_OK,
        responses=error_responses(not_found=NO_SUCH_MEMORY, conflict=IMMUTABLE_MEMORY),
    )
    async def delete_memory(
        self, request: WalletRequest, conn: Conn, memory_service: Memories, memory_id: FromPath[str]
    ) -> MemoryDeleted:
        deleted_id = await memory_service.delete(conn, request.user, memory_id)
        return MemoryDeleted(True, str(deleted_id))

    # Both names are in use: bulk-delete (CLI, docs) and batch-delete (SDK); one answer serves
    # both, with the count and the per-id results.
    @post(["/memories/bulk-delete", "/memories/batch-delete"], status_code=HTTP_200_OK)
    async def delete_many(
        self, request: WalletRequest, conn: Conn, memory_service: Memories, data: JSONBody[IdsIn]
    ) -> DeleteManyAnswer:
        results = await memory_service.delete_many(conn, request.user, data.ids)
        return DeleteManyAnswer(
            sum(r["deleted"] for r in results), [DeleteResult(**r) for r in results]
        )

    @get("/namespaces")
    async def namespaces(
        self, request: WalletRequest, conn: Conn, memory_service: Memories
    ) -> NamespaceList:
        rows = await memory_service.namespaces(conn, request.user)
        return NamespaceList(
            [NamespaceCount(r["name"], r["count"], iso(r["last_memory_at"])) for r in rows],
            len(rows),
        )

    @get("/stats")
    async def stats(
        self, request: WalletRequest, conn: Conn, memory_service: Memories
    ) -> MemoryStats:
        raw = await memory_service.stats(conn, request.user)
        totals = raw["totals"]
        return MemoryStats(
            total_memories=totals["total_memories"],
            pinned_count=totals["pinned_count"],
            never_accessed=totals["never_accessed"],
            total_accesses=int(totals["total_accesses"]),
            avg_importance=round(float(totals["avg_importance"]), 6),
            oldest_memory=absent_if_none(iso(totals["oldest_memory"])),
            newest_memory=absent_if_none(iso(totals["newest_memory"])),
            by_type=[TypeCount(r["memory_type"], r["count"]) for r in raw["by_type"]],
            by_namespace=[NamespaceTotal(r["namespace"], r["count"]) for r in raw["by_namespace"]],
        )
