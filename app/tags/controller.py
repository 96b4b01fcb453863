"""HTTP for GET /v1/tags (free)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromQuery

from app.api.params import Conn, WalletRequest
from app.kit.schemas import nfc_names
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
    ) -> dict[str, Any]:
        counted = await tags_service.tag_counts(
            conn, request.user, nfc_names(namespace), session_id, agent_id
        )
        return {
            "tags": [{"tag": tag, "count": count} for tag, count in counted],
            "counts": dict(counted),
            "total": len(counted),
        }
