"""HTTP for POST /v1/memories/consolidate."""

from __future__ import annotations

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from app.consolidate.schemas import ConsolidateAnswer, ConsolidatedCluster, ConsolidateIn
from app.consolidate.service import ConsolidateService
from app.core import contract
from app.http.markers import limited, paid
from app.http.params import Conn, WalletRequest
from app.http.ratelimit import LLM_ROUTE_PER_MINUTE


class ConsolidateController(Controller):
    path = "/v1/memories/consolidate"
    tags = ["consolidation"]

    @post(
        "/",
        opt={**paid(contract.LLM_CALL), **limited(LLM_ROUTE_PER_MINUTE)},
        status_code=HTTP_200_OK,
    )
    async def consolidate(
        self,
        request: WalletRequest,
        conn: Conn,
        consolidate_service: NamedDependency[ConsolidateService],
        data: JSONBody[ConsolidateIn],
    ) -> ConsolidateAnswer:
        report = await consolidate_service.consolidate(conn, request.user, data)
        return ConsolidateAnswer(
            clusters_found=len(report.clusters),
            memories_merged=report.memories_merged,
            merged=report.memories_merged,
            memories_created=report.memories_created,
            clusters=[ConsolidatedCluster(**c) for c in report.clusters],
            dry_run=data.dry_run,
            tokens_used=report.tokens_used,
        )
