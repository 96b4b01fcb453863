"""HTTP for core memories (free). MemoClaw's SDK uses /v1/memories/core; its CLI and MCP also
call /v1/core-memories and /v1/core, so every form answers on all three bases. Static segments
win over /v1/memories/{id} in Litestar's router, whatever the registration order."""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from litestar.status_codes import HTTP_200_OK

from app.core.schemas import nfc_names
from app.http.openapi import IMMUTABLE_MEMORY, NO_SUCH_MEMORY, error_responses
from app.http.params import Conn, Offset, PageLimit, WalletRequest
from app.memory.filters import MemoryFilter
from app.memory.schemas import MemoryPage, memory_to_wire
from app.pinned.schemas import PinIn, Pinned, Unpinned
from app.pinned.service import PinnedService, pinned_id

BASES = ("/memories/core", "/core-memories", "/core")
DEFAULT_LIMIT = 100
# pinning changes the memory: an immutable one cannot be pinned or unpinned
PIN_ERRORS = error_responses(not_found=NO_SUCH_MEMORY, conflict=IMMUTABLE_MEMORY)


class PinnedController(Controller):
    path = "/v1"
    tags = ["core memories"]

    @get(list(BASES))
    async def list_core(
        self,
        request: WalletRequest,
        conn: Conn,
        pinned_service: NamedDependency[PinnedService],
        limit: PageLimit = DEFAULT_LIMIT,
        offset: Offset = 0,
        namespace: FromQuery[str | None] = None,
        session_id: FromQuery[str | None] = None,
        agent_id: FromQuery[str | None] = None,
    ) -> MemoryPage:
        f = MemoryFilter(
            wallet=request.user,
            namespace=nfc_names(namespace),
            session_id=session_id,
            agent_id=agent_id,
        )
        rows, total = await pinned_service.list_core(conn, f, limit, offset)
        return MemoryPage([memory_to_wire(r) for r in rows], total, limit, offset)

    @post(list(BASES), status_code=HTTP_200_OK, responses=PIN_ERRORS)
    async def pin(
        self,
        request: WalletRequest,
        conn: Conn,
        pinned_service: NamedDependency[PinnedService],
        data: JSONBody[PinIn],
    ) -> Pinned:
        memory_id = await pinned_service.set_pinned(conn, request.user, pinned_id(data), True)
        return Pinned(True, str(memory_id))

    @delete(
        [f"{base}/{{memory_id:str}}" for base in BASES], status_code=HTTP_200_OK,
        responses=PIN_ERRORS,
    )  # fmt: skip
    async def unpin(
        self,
        request: WalletRequest,
        conn: Conn,
        pinned_service: NamedDependency[PinnedService],
        memory_id: FromPath[str],
    ) -> Unpinned:
        unpinned = await pinned_service.set_pinned(conn, request.user, memory_id, False)
        return Unpinned(True, str(unpinned))
