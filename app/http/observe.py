"""Every request, observed: its count and latency by route template (Prometheus, app/infra/
metrics.py) and one JSON log line (app/infra/logs.py) with the request id, route, status,
duration and a short hash of the wallet. GET /metrics serves the metrics.

The line names the route by its template (`/v1/memories/{memory_id:str}`), never the path
(ids are the wallet's business), and the wallet by the first 12 hex digits of its SHA-256."""

from __future__ import annotations

import functools
import hashlib
import logging
import time

from litestar import Response, get
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.status_codes import HTTP_200_OK
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from app.http.headers import request_id_of
from app.http.markers import public, unlimited
from app.http.state import state_of
from app.infra import metrics

access_log = logging.getLogger("engram.access")
UNMATCHED = "unmatched"  # no route: a 404 or 405 from the router


def wallet_hash(wallet: object) -> str | None:
    """The access log's name for a wallet: the first 12 hex digits of its SHA-256."""
    if not isinstance(wallet, str):
        return None
    return _hashed(wallet)


@functools.lru_cache(maxsize=4096)  # a wallet's every request logs it: hashed once per wallet
def _hashed(wallet: str) -> str:
    return hashlib.sha256(wallet.encode()).hexdigest()[:12]


class ObserveMiddleware(ASGIMiddleware):
    """Outermost: it sees every answer, the refusals of the middleware inside it included."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        started = time.perf_counter()
        status = 500  # unless an answer starts

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await next_app(scope, receive, observed_send)
        except Exception as exc:  # answered by the exception handlers around the stack
            status = getattr(exc, "status_code", 500)
            raise
        finally:
            self.record(scope, status, time.perf_counter() - started)

    @staticmethod
    def record(scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("path_template") or UNMATCHED
        method = scope.get("method", "")
        metrics.REQUESTS.labels(route, method, str(status)).inc()
        metrics.REQUEST_SECONDS.labels(route, method).observe(seconds)
        access_log.info(
            "request",
            extra={
                "request_id": request_id_of(scope),
                "method": method,
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
                "wallet": wallet_hash(scope.get("user")),
                "paid": "paid_response_headers" in state_of(scope),
            },
        )


@get(
    "/metrics",
    opt={**public(), **unlimited()},
    status_code=HTTP_200_OK,
    include_in_schema=False,
)
async def metrics_endpoint() -> Response[bytes]:
    """Prometheus' text format: this process's metrics, or every worker's added up."""
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)
