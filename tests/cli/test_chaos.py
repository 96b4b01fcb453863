"""Chaos, short form: a real `engram serve` on its own PostgreSQL and Redis (private ports), under
a steady load of paid stores (x402 on a local chain) and free imports, loses PostgreSQL and then
Redis, and gets each back.

What must hold: during the database outage every call answers 503 with Retry-After (never 500,
never a hang); during the Redis outage the API keeps serving (rate limits per process, payment
claims in PostgreSQL) and /health says 503 with Retry-After; after each, service returns without
a restart; no acknowledged write and no settled payment is lost. `bench/chaos.py` runs the same
scenario longer.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.dev.chain import DevChain
from tests.support.chaos import ChaosRun
from tests.support.outage import PrivatePostgres, PrivateRedis
from tests.support.server import start_serve, stop_serve

PHASE_REQUESTS = 12  # per phase and worker: a few seconds each on this machine
WORKERS = 3


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Not under pytest's basetemp: a concurrent pytest run prunes old basetemps, which would pull
    # the private database's directory from under it (as in tests/conftest.py).
    root = Path(tempfile.mkdtemp(prefix="engram-chaos-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_database_then_redis_outage_under_load(chain: DevChain, workdir: Path) -> None:
    tmp_path = workdir
    postgres, redis = PrivatePostgres(tmp_path / "pg"), PrivateRedis(tmp_path)
    (tmp_path / "pg").mkdir()
    postgres.start()
    redis.start()
    data, log = tmp_path / "serve", tmp_path / "serve.log"
    data.mkdir()
    run = ChaosRun(chain)
    proc, url = start_serve(data, log, **run.server_env(postgres.dsn, redis.url))
    try:
        run.attach(url)
        with run.load(WORKERS) as load:
            load.phase("steady", PHASE_REQUESTS)
            load.phase("database failing", PHASE_REQUESTS, during=postgres.stop)
            load.phase("database down", PHASE_REQUESTS, health_503=True)
            postgres.start()
            load.recover("database back")
            load.phase("after the database", PHASE_REQUESTS)
            load.phase("redis failing", PHASE_REQUESTS, during=redis.stop)
            load.phase("redis down", PHASE_REQUESTS, health_503=True)
            replay = run.replay_last_paid()  # served from the ledger, Redis or not
            redis.start()
            load.recover("redis back")
            load.phase("after redis", PHASE_REQUESTS)
        report = run.verify(postgres.dsn)
        print(report.summary())
    finally:
        stop_serve(proc, data, log)
        redis.stop()
        postgres.stop()
    assert report.server_errors == [], report.summary()
    down = report.phases["database down"]
    assert down.unavailable_with_retry_after == down.total, report.summary()
    failing = report.phases["database failing"]
    assert failing.succeeded + failing.unavailable_with_retry_after == failing.total
    steady = ("steady", "after the database", "redis failing", "redis down", "after redis")
    for name in ("steady", "after the database", "after redis"):  # recovered, and stays so
        assert report.health[name] == {200: 1}, (name, report.summary())
    for name in steady:
        phase = report.phases[name]
        assert phase.succeeded == phase.total, (name, report.summary())
    assert report.lost_writes == [], report.summary()
    assert report.unrecorded_payments == 0, report.summary()
    assert report.acknowledged_paid > 0 and report.acknowledged_imports > 0
    assert replay.status_code == 201 and replay.headers["x-idempotent-replay"] == "true"
