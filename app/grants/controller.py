"""HTTP for grants (free calls): POST /v1/grants, GET /v1/grants, DELETE /v1/grants/{id}. What a
grant lets a request reach is decided in app/access/."""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from app.grants.schemas import (
    Grant,
    GrantIn,
    GrantList,
    GrantRevoked,
    grant_to_wire,
)
from app.grants.service import GrantService
from app.http.openapi import error_responses
from app.http.params import Conn, WalletRequest

Grants = NamedDependency[GrantService]


class GrantController(Controller):
    path = "/v1/grants"
    tags = ["grants"]

    @post("", status_code=HTTP_201_CREATED)
    async def create_grant(
        self, request: WalletRequest, conn: Conn, grants_service: Grants, data: JSONBody[GrantIn]
    ) -> Grant:
        """Grant another wallet `read` or `write` on one of the caller's namespaces."""
        return grant_to_wire(await grants_service.grant(conn, request.user, data))

    @get("")
    async def list_grants(
        self, request: WalletRequest, conn: Conn, grants_service: Grants
    ) -> GrantList:
        """The caller's live grants: given and received."""
        rows = await grants_service.of(conn, request.user)
        return GrantList(
            given=[grant_to_wire(r) for r in rows if r["owner"] == request.user],
            received=[grant_to_wire(r) for r in rows if r["grantee"] == request.user],
        )

    @delete(
        "/{grant_id:str}",
        status_code=HTTP_200_OK,
        responses=error_responses(not_found="No live grant with this id given by the caller"),
    )
    async def revoke_grant(
        self, request: WalletRequest, conn: Conn, grants_service: Grants, grant_id: FromPath[str]
    ) -> GrantRevoked:
        """Revoke a grant the caller gave; the grantee loses it on its next request."""
        revoked = await grants_service.revoke(conn, request.user, grant_id)
        return GrantRevoked(id=str(revoked), revoked=True)
