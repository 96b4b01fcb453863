"""GET /health: is the service able to serve (database reachable, Redis when configured).
GET /ready: a load balancer's or Kubernetes' readiness probe: the same, and the embedder loaded
(a local model loads in the background as the app starts), each part named in the answer."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import get
from litestar.status_codes import HTTP_200_OK
from msgspec import Struct

from app.ai.embedders import embedder_ready
from app.core.errors import OUTAGE_RETRY_AFTER_SECONDS, ServiceUnavailable
from app.db import settings_repository
from app.http.markers import public, unlimited
from app.http.params import MaybeWalletRequest

RETRY = {"Retry-After": str(OUTAGE_RETRY_AFTER_SECONDS)}


class EmbedderInfo(Struct):
    model: str
    dims: int


class Health(Struct):
    status: str
    database: str
    embedder: EmbedderInfo
    shared_state: str  # "redis", or "in-process" without one
    version: str


async def ping_database(state: Any) -> None:
    async with state.pool.acquire(timeout=5) as conn:
        await settings_repository.ping(conn)


@get("/health", opt={**public(), **unlimited()}, status_code=HTTP_200_OK, tags=["health"])
async def health(request: MaybeWalletRequest) -> Health:
    state = request.app.state
    try:
        await ping_database(state)
    except Exception as exc:
        raise ServiceUnavailable("Database unreachable", {"database": str(exc)}, RETRY) from exc
    try:
        await state.shared.ping()
    except Exception as exc:
        raise ServiceUnavailable(
            "Redis unreachable: rate limits are counted per process and payment claims held in"
            " PostgreSQL until it is back",
            {"redis": str(exc)},
            RETRY,
        ) from exc
    return Health(
        status="ok",
        database="ok",
        embedder=EmbedderInfo(state.embedder.model_name, state.embedder.dims),
        shared_state="redis" if state.settings.database.redis_url else "in-process",
        version=state.version,
    )


class Readiness(Struct):
    ready: bool
    database: str  # ok, or why not
    redis: str  # ok, "not configured", or why not
    embedder: str  # ok, or "loading"


@get("/ready", opt={**public(), **unlimited()}, status_code=HTTP_200_OK, tags=["health"])
async def ready(request: MaybeWalletRequest) -> Readiness:
    """200 when every part is ready, else 503 with the same body (details name the parts)."""
    state = request.app.state
    parts = Readiness(ready=True, database="ok", redis="not configured", embedder="ok")
    try:
        await ping_database(state)
    except Exception as exc:
        parts.database = f"unreachable: {type(exc).__name__}"
    if state.settings.database.redis_url:
        try:
            await state.shared.ping()
            parts.redis = "ok"
        except Exception as exc:
            parts.redis = f"unreachable: {type(exc).__name__}"
    if not embedder_ready(state.embedder):
        parts.embedder = "loading"
    parts.ready = (
        parts.database == "ok"
        and parts.redis in ("ok", "not configured")
        and parts.embedder == "ok"
    )
    if not parts.ready:
        raise ServiceUnavailable("Not ready", msgspec.structs.asdict(parts), RETRY)
    return parts
