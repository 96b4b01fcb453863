"""HTTP for a memory's versions: its history (GET /v1/memories/{id}/history, the contract's, read
from app/history/) and POST /v1/memories/{id}/restore (Engram's: undelete what a soft delete
removed). Both are free."""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.status_codes import HTTP_200_OK

from app.core.schemas import absent_if_none, iso
from app.history import service as history
from app.history.schemas import HistoryEntry, MemoryHistory
from app.http.openapi import NO_SUCH_MEMORY, error_responses
from app.http.params import Conn, WalletRequest
from app.memory.schemas import Restored, memory_to_wire
from app.memory.service import MemoryService, parse_memory_id


class HistoryController(Controller):
    path = "/v1/memories/{memory_id:str}"
    tags = ["memories"]

    @get("/history", responses=error_responses(not_found=NO_SUCH_MEMORY))
    async def history(
        self, request: WalletRequest, conn: Conn, memory_id: FromPath[str]
    ) -> MemoryHistory:
        rows = await history.history_of(conn, request.user, parse_memory_id(memory_id))
        return MemoryHistory(
            [
                HistoryEntry(
                    id=str(r["id"]),
                    memory_id=str(r["memory_id"]),
                    action=r["action"],
                    changes=history.readable(r["changes"]),
                    changed_fields=list(r["changes"]),
                    created_at=iso(r["created_at"]),
                    actor=absent_if_none(r["actor"]),
                )
                for r in rows
            ]
        )

    @post(
        "/restore",
        status_code=HTTP_200_OK,
        responses=error_responses(
            not_found=NO_SUCH_MEMORY,
            conflict="The memory is not deleted (nothing to restore), or another memory now holds"
            " its key in its namespace",
        ),
    )
    async def restore(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: NamedDependency[MemoryService],
        memory_id: FromPath[str],
    ) -> Restored:
        row = await memory_service.restore(conn, request.user, memory_id)
        return Restored(True, str(row["id"]), memory_to_wire(row))
