"""State shared by every Engram instance: Redis when ENGRAM_REDIS_URL is set, else in-process.

Two primitives cover what payments and rate limits need: `claim` (a key held by one holder for a
while: one in-flight request per payment nonce) and `hit` (a fixed-window counter).

Redis can fail: refuse connections, or freeze. Every Redis call has a short socket timeout and
no retries, and runs behind a circuit breaker (purgatory): after a few failures in a row the
circuit opens and calls fail at once with `StoreUnavailable` for a few seconds, then one trial
call decides whether it closes. Callers choose their fallback (rate limits count per process,
payment claims move to PostgreSQL advisory locks); nobody waits on a dead Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import redis.asyncio as redis
from purgatory import AsyncCircuitBreakerFactory
from purgatory.domain.model import OpenedState
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

T = TypeVar("T")

# A healthy Redis answers in well under a millisecond; a frozen one must not hold a request for
# redis-py's default 5 s (issue 11: paid calls outlived their clients that way).
REDIS_SOCKET_TIMEOUT_SECONDS = 0.25
# Opening a connection may take longer: a burst on a cold pool opens many at once (50 claims at
# once on a loaded 2-core host took over 250 ms to connect, a StoreUnavailable for nothing). A
# frozen Redis still accepts connections at once (its kernel does), so its calls still fail at
# the socket timeout; only an unreachable host costs this, until the breaker opens.
REDIS_CONNECT_TIMEOUT_SECONDS = 1.0
# Consecutive failures that open the circuit, and how long it stays open before a trial call.
BREAKER_FAILURES = 3
BREAKER_OPEN_SECONDS = 5


class StoreUnavailable(Exception):
    """The shared store cannot be used right now (a call failed, or the circuit is open)."""

    def __init__(self, message: str, circuit_open: bool = False) -> None:
        super().__init__(message)
        self.circuit_open = circuit_open  # already known to be down: not worth a log line


_SWEEP_INTERVAL_SECONDS = 60.0


class SharedStore(Protocol):
    async def claim(self, key: str, ttl_seconds: float) -> bool:
        """Take `key` if nobody holds it; True when this caller got it."""
        ...

    async def release(self, key: str) -> None: ...

    async def hit(self, key: str, window_seconds: int) -> int:
        """Count one event in the current window of `key`; returns the count so far."""
        ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


class InProcessStore:
    """One process's equivalent: right for a single instance, and what runs with no Redis."""

    def __init__(self) -> None:
        self._expiry: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._next_sweep = 0.0

    def _sweep(self, now: float) -> None:
        """Drop expired keys once in a while: keys that are never read again (a past rate-limit
        window, a used nonce) would otherwise stay in memory for good."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + _SWEEP_INTERVAL_SECONDS
        for key in [key for key, expiry in self._expiry.items() if expiry <= now]:
            del self._expiry[key]
            self._counts.pop(key, None)

    def _live(self, key: str, now: float) -> bool:
        expiry = self._expiry.get(key)
        if expiry is not None and expiry <= now:
            del self._expiry[key]
            self._counts.pop(key, None)
            return False
        return expiry is not None

    async def claim(self, key: str, ttl_seconds: float) -> bool:
        async with self._lock:
            now = time.monotonic()
            self._sweep(now)
            if self._live(key, now):
                return False
            self._expiry[key] = now + ttl_seconds
            return True

    async def release(self, key: str) -> None:
        async with self._lock:
            self._expiry.pop(key, None)
            self._counts.pop(key, None)

    async def hit(self, key: str, window_seconds: int) -> int:
        async with self._lock:
            now = time.monotonic()
            self._sweep(now)
            if not self._live(key, now):
                self._expiry[key] = now + window_seconds
                self._counts[key] = 0
            self._counts[key] += 1
            return self._counts[key]

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class RedisStore:
    def __init__(
        self,
        url: str,
        prefix: str = "engram:",
        socket_timeout: float = REDIS_SOCKET_TIMEOUT_SECONDS,
        breaker_open_seconds: float = BREAKER_OPEN_SECONDS,
    ) -> None:
        self._redis = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=max(socket_timeout, REDIS_CONNECT_TIMEOUT_SECONDS),
            # One immediate retry on a broken connection only: after Redis restarts, each pooled
            # connection fails once before it reconnects. Timeouts are not retried (a frozen
            # Redis costs one timeout), and the breaker decides when to try again.
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        self._prefix = prefix
        self._breakers = AsyncCircuitBreakerFactory(
            default_threshold=BREAKER_FAILURES, default_ttl=breaker_open_seconds
        )

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            async with await self._breakers.get_breaker("redis"):
                return await call()
        except OpenedState as exc:
            raise StoreUnavailable("Redis circuit open after repeated failures", True) from exc
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc

    async def claim(self, key: str, ttl_seconds: float) -> bool:
        full = self._prefix + key
        ok = await self._call(
            lambda: self._redis.set(full, b"1", nx=True, px=int(ttl_seconds * 1000))
        )
        return bool(ok)

    async def release(self, key: str) -> None:
        full = self._prefix + key
        await self._call(lambda: self._redis.delete(full))

    async def hit(self, key: str, window_seconds: int) -> int:
        full = self._prefix + key

        async def count() -> int:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incr(full)
                pipe.expire(full, window_seconds, nx=True)
                counted, _ = await pipe.execute()
            return int(counted)

        return await self._call(count)

    async def ping(self) -> bool:
        return bool(await self._call(self._redis.ping))

    async def close(self) -> None:
        await self._redis.aclose()


def build_shared_store(
    redis_url: str | None, timeout_seconds: float = REDIS_SOCKET_TIMEOUT_SECONDS
) -> SharedStore:
    return RedisStore(redis_url, socket_timeout=timeout_seconds) if redis_url else InProcessStore()
