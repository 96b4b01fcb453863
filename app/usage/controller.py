"""HTTP for GET /v1/usage (free): a wallet's metered calls per day and endpoint, USDC paid per
day, and its free tier, for scripts and the console."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromQuery, QueryParameter

from app.http.params import Conn, WalletRequest
from app.usage.schemas import Usage
from app.usage.service import UsageService, report_days


class UsageController(Controller):
    path = "/v1/usage"
    tags = ["usage"]

    @get("/")
    async def usage(
        self,
        request: WalletRequest,
        conn: Conn,
        usage_service: NamedDependency[UsageService],
        from_: Annotated[str | None, QueryParameter(name="from")] = None,
        to: FromQuery[str | None] = None,
        bucket: FromQuery[str] = "day",
    ) -> Usage:
        first, last = report_days(from_, to, bucket)
        return await usage_service.report(conn, request.user, first, last, bucket)
