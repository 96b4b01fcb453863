"""HTTP for GET /v1/tags (free)."""

from __future__ import annotations

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromQuery

from app.core.schemas import nfc_names
from app.http.params import Conn, WalletRequest
from app.tags.schemas import TagCount, TagList
from app.tags.service import TagService


class TagController(Controller):
    path = "/v1"
    tags = ["tags"]

    @get("/tags")
    async def list_tags(
        self,
        request: WalletRequest,
        conn: Conn,
        tags_service: NamedDependency[TagService],
        namespace: FromQuery[str | None] = None,
        session_id: FromQuery[str | None] = None,
        agent_id: FromQuery[str | None] = None,
    ) -> TagList:
        counted = await tags_service.tag_counts(
            conn, request.user, nfc_names(namespace), session_id, agent_id
        )
        return TagList(
            [TagCount(tag, count) for tag, count in counted], dict(counted), len(counted)
        )
