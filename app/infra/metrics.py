"""Prometheus metrics (prometheus-client), defined once and read at GET /metrics.

With `engram serve --workers N` every worker process writes its samples under
PROMETHEUS_MULTIPROC_DIR (set by the parent before the workers start) and /metrics, served by any
worker, adds them up (prometheus-client's multi-process mode); one process keeps them in memory.

What is measured, and where:
- requests by route template, method and status, with latency (app/http/observe.py);
- recall and store phases: embed, SQL, scoring (app/memory/recall.py and store.py, `phase`);
- embedding cache hits and misses (app/ai/embedders.py);
- DB pool connections in use and requests waiting for one (MeteredPool, app/db/pool.py);
- free calls consumed (app/free_tier/service.py);
- x402 verifications and settlements by outcome, and settle latency (app/payments/service.py);
- payment channels: calls paid by deposit or voucher (app/payments/channels.py), the claimer's
  claims, refunds and settlements by outcome (app/payments/claimer.py);
- rate-limit refusals (app/http/ratelimit.py).
Labels never carry a wallet, a key or content: only route templates and fixed words.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# request and phase latencies: a memory API answers in milliseconds; settlements take seconds
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SETTLE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

REQUESTS = Counter(
    "engram_requests", "HTTP requests answered, by route template, method and status",
    ["route", "method", "status"],
)  # fmt: skip
REQUEST_SECONDS = Histogram(
    "engram_request_duration_seconds", "Time to answer an HTTP request, by route template",
    ["route", "method"], buckets=FAST_BUCKETS,
)  # fmt: skip
PHASE_SECONDS = Histogram(
    "engram_phase_duration_seconds", "Time in each phase of recall and store",
    ["operation", "phase"], buckets=FAST_BUCKETS,
)  # fmt: skip
EMBED_CACHE = Counter(
    "engram_embedding_cache_lookups", "Embedding cache lookups, by result (hit, miss)", ["result"]
)
POOL_IN_USE = Gauge(
    "engram_db_pool_in_use", "Database connections taken from the pool", multiprocess_mode="livesum"
)
POOL_WAITING = Gauge(
    "engram_db_pool_waiting", "Requests waiting for a database connection",
    multiprocess_mode="livesum",
)  # fmt: skip
FREE_CALLS = Counter("engram_free_calls", "Free-tier calls consumed")
X402_VERIFICATIONS = Counter(
    "engram_x402_verifications", "x402 payment proofs checked, by outcome", ["outcome"]
)
X402_SETTLEMENTS = Counter(
    "engram_x402_settlements", "x402 settlements, by outcome", ["outcome"]
)  # fmt: skip
SETTLE_SECONDS = Histogram(
    "engram_x402_settle_duration_seconds", "Time to settle an x402 payment",
    buckets=SETTLE_BUCKETS,
)  # fmt: skip
X402_CHANNEL_PAYMENTS = Counter(
    "engram_x402_channel_payments",
    "Calls paid on x402 payment channels, by kind (deposit, voucher)", ["kind"],
)  # fmt: skip
X402_CHANNEL_CLAIMS = Counter(
    "engram_x402_channel_claims",
    "Payment channel claims and refunds by the claimer, by kind (claim, refund) and outcome"
    " (confirmed, failed, pending: sent with no answer yet)", ["kind", "outcome"],
)  # fmt: skip
X402_CHANNEL_SETTLEMENTS = Counter(
    "engram_x402_channel_settlements",
    "Settlements of claimed channel funds to the receiver, by outcome (settled, none, failed)",
    ["outcome"],
)  # fmt: skip
RATE_LIMITED = Counter(
    "engram_rate_limited", "Requests refused by a rate limit, by limit (wallet, ip)", ["limit"]
)


@contextmanager
def phase(operation: str, name: str) -> Iterator[None]:
    """Time a phase of `operation` (recall, store) into PHASE_SECONDS."""
    started = time.perf_counter()
    try:
        yield
    finally:
        PHASE_SECONDS.labels(operation, name).observe(time.perf_counter() - started)


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus' text format, with its content type: this process's, or every
    worker's added up in multi-process mode."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
