"""Per-wallet rate limits: fixed one-minute windows counted in the SharedStore (Redis when
configured, so every instance sees one count; in-process otherwise).

Contract (docs/api-contract.md, "Rate limits"; MemoClaw's reference/rate-limiting page): 100
requests/min per wallet overall, 10/min on extract and consolidate; every limited response
carries X-RateLimit-Limit/-Remaining/-Reset (unix time); excess answers 429 RATE_LIMIT_EXCEEDED
with details {limit, reset_at (ISO 8601 UTC)} and Retry-After (seconds).

Who is counted: the wallet WalletAuthMiddleware put in `scope["user"]`; without one (a paid route
called anonymously, or a public route such as /v1/free-tier/info) the client IP, so anonymous
traffic is limited too. The IP is the socket peer's: behind a proxy, list the proxy in
ENGRAM_TRUSTED_PROXIES so it is the real client's (its X-Forwarded-For). Unlimited: handlers
marked `unlimited()` (/health: probes must never be refused), the OpenAPI docs, and requests
refused before routing (404/405) or by the auth middleware (401), which run outside this
middleware.

A Redis outage (a failed call, or the store's circuit open): the request is counted in this
process's own windows instead, so limits still hold per instance (with N instances a wallet can
make up to N times its limit until Redis is back), and counting returns to Redis by itself.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from app.core.contract import OVERALL_PER_MINUTE as OVERALL_PER_MINUTE
from app.core.errors import RateLimitExceeded
from app.http.markers import UNLIMITED_OPT_KEY, route_limit_of
from app.infra import metrics
from app.infra.instance_state import InProcessStore, SharedStore, StoreUnavailable

log = logging.getLogger("engram.ratelimit")

# Contract defaults, per wallet and per minute (source above). OVERALL_PER_MINUTE, every request
# of a wallet, is in app/core/contract.py: settings read it
# (limits.rate_limit_per_minute overrides).
LLM_ROUTE_PER_MINUTE = 10  # extract and consolidate: `opt={**paid(LLM_CALL), **limited(10)}`
WINDOW_SECONDS = 60


LIMIT_HEADER = "X-RateLimit-Limit"
REMAINING_HEADER = "X-RateLimit-Remaining"
RESET_HEADER = "X-RateLimit-Reset"
RETRY_AFTER_HEADER = "Retry-After"


@dataclass(frozen=True)
class BucketCount:
    """One bucket's count in the current window."""

    limit: int
    count: int

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.count)

    @property
    def exceeded(self) -> bool:
        return self.count > self.limit


def _caller(scope: Scope) -> str:
    wallet = scope.get("user")
    if isinstance(wallet, str) and wallet:
        return f"wallet:{wallet}"
    client = scope.get("client")
    return f"ip:{client[0] if client else 'unknown'}"


def _iso_utc(unix: int) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class RateLimitMiddleware(ASGIMiddleware):
    """Counts each request against its caller's buckets; goes AFTER WalletAuthMiddleware in the
    app's `middleware` list, so that `scope["user"]` is known when it runs."""

    scopes = (ScopeType.HTTP,)
    exclude_opt_key = UNLIMITED_OPT_KEY

    @staticmethod
    def should_bypass_for_scope(scope: Scope) -> bool:
        # Litestar's own OpenAPI handlers cannot carry our opt key; the docs are never limited.
        openapi = scope["litestar_app"].openapi_config
        docs = openapi.path if openapi is not None else None
        return bool(docs) and str(scope["path"]).startswith(str(docs))

    def __init__(
        self,
        store: SharedStore,
        per_minute: int = OVERALL_PER_MINUTE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`per_minute` is the overall limit (0: none; routes' own limits still apply); `clock`
        gives unix time (windows are aligned to its minutes, so instances need synced clocks)."""
        if per_minute < 0:
            raise ValueError("the overall rate limit cannot be negative (0 disables it)")
        self.store = store
        self.local = InProcessStore()  # counts while the shared store is unavailable
        self.per_minute = per_minute
        self.clock = clock

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        route_handler = scope.get("route_handler")
        route_limit = route_limit_of(route_handler)
        if not self.per_minute and route_limit is None:
            await next_app(scope, receive, send)
            return
        now = self.clock()
        window_start = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
        reset = window_start + WINDOW_SECONDS
        caller, route_name = _caller(scope), str(route_handler)
        try:
            counts = await self._count(self.store, caller, route_name, route_limit, window_start)
        except StoreUnavailable as exc:
            # Per-process limits until the shared store is back (module docstring).
            if not exc.circuit_open:
                log.warning("rate limits counted in this process: %s", exc)
            counts = await self._count(self.local, caller, route_name, route_limit, window_start)

        exceeded = [c for c in counts if c.exceeded]
        # Report the tighter bucket: the fewest requests left, then the smaller limit.
        shown = min(exceeded or counts, key=lambda c: (c.remaining, c.limit))
        headers = {
            LIMIT_HEADER: str(shown.limit),
            REMAINING_HEADER: str(shown.remaining),
            RESET_HEADER: str(reset),
        }
        if exceeded:
            metrics.RATE_LIMITED.labels("route" if shown.limit == route_limit else "overall").inc()
            retry_after = max(1, math.ceil(reset - now))
            raise RateLimitExceeded(
                f"Rate limit exceeded: {shown.limit} requests per minute; retry after"
                f" {retry_after} s",
                details={"limit": shown.limit, "reset_at": _iso_utc(reset)},
                headers={**headers, RETRY_AFTER_HEADER: str(retry_after)},
            )

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableScopeHeaders.from_message(message).update(headers)
            await send(message)

        await next_app(scope, receive, send_with_headers)

    async def _count(
        self,
        store: SharedStore,
        caller: str,
        route_name: str,
        route_limit: int | None,
        window_start: int,
    ) -> list[BucketCount]:
        # The window start is in the key: each minute counts afresh, on every instance alike. The
        # caller is the key's hash tag ({wallet:0x…}): on a Redis Cluster, one caller's counters
        # share a slot.
        counts: list[BucketCount] = []
        if self.per_minute:
            overall = await store.hit(f"ratelimit:{{{caller}}}:all:{window_start}", WINDOW_SECONDS)
            counts.append(BucketCount(self.per_minute, overall))
            if overall > self.per_minute:
                return counts  # refused anyway: do not spend the route's own budget too
        if route_limit is not None:
            own = await store.hit(
                f"ratelimit:{{{caller}}}:route:{route_name}:{window_start}", WINDOW_SECONDS
            )
            counts.append(BucketCount(route_limit, own))
        return counts
