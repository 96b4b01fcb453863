"""State shared by every Engram instance: Redis when ENGRAM_REDIS_URL is set, else in-process.

Two primitives cover what payments and rate limits need: `claim` (a key held by one holder for a
while: one in-flight request per payment nonce) and `hit` (a fixed-window counter).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import redis.asyncio as redis

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
    def __init__(self, url: str, prefix: str = "engram:") -> None:
        self._redis = redis.Redis.from_url(url)
        self._prefix = prefix

    async def claim(self, key: str, ttl_seconds: float) -> bool:
        ok = await self._redis.set(self._prefix + key, b"1", nx=True, px=int(ttl_seconds * 1000))
        return bool(ok)

    async def release(self, key: str) -> None:
        await self._redis.delete(self._prefix + key)

    async def hit(self, key: str, window_seconds: int) -> int:
        full = self._prefix + key
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(full)
            pipe.expire(full, window_seconds, nx=True)
            count, _ = await pipe.execute()
        return int(count)

    async def ping(self) -> bool:
        return bool(await self._redis.ping())

    async def close(self) -> None:
        await self._redis.aclose()


def build_shared_store(redis_url: str | None) -> SharedStore:
    return RedisStore(redis_url) if redis_url else InProcessStore()
