"""GET /health: is the service able to serve (database reachable, embedder loaded)."""

from __future__ import annotations

from litestar import get
from litestar.status_codes import HTTP_200_OK
from msgspec import Struct

from app.api.params import MaybeWalletRequest
from app.api.ratelimit import unlimited
from app.auth.middleware import EXCLUDE_OPT_KEY
from app.db import repository
from app.kit.errors import OUTAGE_RETRY_AFTER_SECONDS, ServiceUnavailable

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


@get(
    "/health", opt={EXCLUDE_OPT_KEY: True, **unlimited()}, status_code=HTTP_200_OK, tags=["health"]
)
async def health(request: MaybeWalletRequest) -> Health:
    state = request.app.state
    try:
        async with state.pool.acquire(timeout=5) as conn:
            await repository.ping(conn)
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
