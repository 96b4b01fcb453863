"""HTTP for POST /v1/context."""

from __future__ import annotations

import msgspec
from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from app.access.requests import Acting
from app.context.schemas import ContextAnswer, ContextIn
from app.context.service import ContextService, neutralise
from app.core import contract
from app.http.markers import acts_for_owner, paid
from app.http.params import Conn, WalletRequest
from app.memory.schemas import recalled_to_wire


class ContextController(Controller):
    path = "/v1/context"
    tags = ["context"]

    @post("/", opt={**paid(contract.LLM_CALL), **acts_for_owner()}, status_code=HTTP_200_OK)
    async def context(
        self,
        request: WalletRequest,
        conn: Conn,
        context_service: NamedDependency[ContextService],
        acting: NamedDependency[Acting],
        data: JSONBody[ContextIn],
    ) -> ContextAnswer:
        wallet, actor = await acting.reach(data.namespace, "read")
        if actor.kept_to is not None:
            data = msgspec.structs.replace(data, namespace=actor.kept_to)
        block = await context_service.build(conn, wallet, data, actor)
        return ContextAnswer(
            context=block.context,
            memories_used=block.memories_used,
            tokens=block.tokens,
            tokens_used=block.tokens_used,
            memories=[
                recalled_to_wire(item, content=neutralise(item.row["content"]))
                for item in block.used
            ],
            held_back=block.held_back,
        )
