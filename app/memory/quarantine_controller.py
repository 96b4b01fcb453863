"""HTTP for a memory the namespace guard holds for review (app/guard/service.py, `review`):
POST /v1/memories/{id}/approve releases it. The owner's only: no route here acts for an owner,
so app/access/requests.py `only_where_grants_reach` answers 403 to a grantee or an agent key."""

from __future__ import annotations

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.status_codes import HTTP_200_OK

from app.http.openapi import NO_SUCH_MEMORY, error_responses
from app.http.params import Conn, WalletRequest
from app.memory.schemas import Memory, memory_to_wire, parse_memory_id
from app.memory.service import MemoryService


class QuarantineController(Controller):
    path = "/v1"
    tags = ["memory poisoning"]

    @post(
        "/memories/{memory_id:str}/approve",
        status_code=HTTP_200_OK,
        responses=error_responses(not_found=NO_SUCH_MEMORY),
    )
    async def approve(
        self,
        request: WalletRequest,
        conn: Conn,
        memory_service: NamedDependency[MemoryService],
        memory_id: FromPath[str],
    ) -> Memory:
        """Release a quarantined memory: recall returns it from now on (recorded in history)."""
        row = await memory_service.approve(conn, request.user, parse_memory_id(memory_id))
        return memory_to_wire(row)
