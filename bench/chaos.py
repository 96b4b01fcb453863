"""Chaos, long form of tests/cli/test_chaos.py: `engram serve` on its own PostgreSQL and Redis
(private ports), a load of paid stores (x402, settled on a local anvil chain) and free imports,
while PostgreSQL and then Redis are stopped and brought back, `--cycles` times. Prints what every
phase answered and what was kept (acknowledged writes lost, payments settled on chain without a
ledger row: both must be 0), and writes bench/results/chaos.json.

Run: .venv/bin/python bench/chaos.py [--requests 60] [--workers 4] [--cycles 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from app.dev.chain import DevChain
from tests.support.chaos import ChaosRun
from tests.support.outage import PrivatePostgres, PrivateRedis
from tests.support.server import engram_env, free_port, run_engram, wait_healthy

RESULTS = Path(__file__).parent / "results" / "chaos.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60, help="per worker and phase")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="engram-chaos-bench-"))
    (root / "pg").mkdir()
    postgres, redis = PrivatePostgres(root / "pg"), PrivateRedis(root)
    postgres.start()
    redis.start()
    proc = None
    try:
        with DevChain(chain_id=8453) as chain:
            chain.install_usdc()
            run = ChaosRun(chain)
            port = free_port()
            env = engram_env(root / "serve", **run.server_env(postgres.dsn, redis.url))
            (root / "serve").mkdir()
            proc = run_engram(["serve", "--port", str(port)], env, root / "serve.log")
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, timeout=180)
            run.attach(url)
            n = args.requests
            with run.load(args.workers) as load:
                for c in range(args.cycles):
                    load.phase(f"{c}: steady", n)
                    load.phase(f"{c}: database failing", n, during=postgres.stop)
                    load.phase(f"{c}: database down", n, health_503=True)
                    postgres.start()
                    load.recover("database back")
                    load.phase(f"{c}: after the database", n)
                    load.phase(f"{c}: redis failing", n, during=redis.stop)
                    load.phase(f"{c}: redis down", n, health_503=True)
                    redis.start()
                    load.recover("redis back")
                    load.phase(f"{c}: after redis", n)
            report = run.verify(postgres.dsn)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        redis.stop()
        postgres.stop()
    print(report.summary())
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "phases": {k: {"total": v.total, "ok": v.succeeded,
                       "unavailable_with_retry_after": v.unavailable_with_retry_after,
                       "statuses": dict(v.statuses)} for k, v in report.phases.items()},
        "acknowledged_paid": report.acknowledged_paid,
        "acknowledged_imports": report.acknowledged_imports,
        "lost_writes": len(report.lost_writes), "ledger_rows": report.ledger_rows,
        "settled_on_chain": report.settled_on_chain,
        "unrecorded_payments": report.unrecorded_payments,
        "other_5xx": len(report.server_errors),
    }, indent=2))  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
