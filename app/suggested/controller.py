"""HTTP for GET /v1/suggested (free)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromQuery, QueryParameter

from app.core.schemas import nfc_names
from app.http.params import Conn, WalletRequest
from app.suggested.repository import SuggestionFilter
from app.suggested.schemas import Category, CategoryCounts, SuggestedAnswer, suggested_to_wire
from app.suggested.service import DEFAULT_LIMIT, MAX_LIMIT, SuggestedService


class SuggestedController(Controller):
    path = "/v1"
    tags = ["suggestions"]

    @get("/suggested")
    async def suggested(
        self,
        request: WalletRequest,
        conn: Conn,
        suggested_service: NamedDependency[SuggestedService],
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
        category: FromQuery[Category | None] = None,
        namespace: FromQuery[str | None] = None,
        session_id: FromQuery[str | None] = None,
        agent_id: FromQuery[str | None] = None,
    ) -> SuggestedAnswer:
        f = SuggestionFilter(
            wallet=request.user, namespace=nfc_names(namespace), session_id=session_id,
            agent_id=agent_id, category=category,
        )  # fmt: skip
        rows, counts, total = await suggested_service.suggested(conn, f, limit)
        suggested = [suggested_to_wire(r) for r in rows]
        return SuggestedAnswer(suggested, suggested, CategoryCounts(**counts), total)
