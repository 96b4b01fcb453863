"""1 → 2 → 3 Engram instances on one PostgreSQL and one Redis: the 64-client mix's throughput
at each count, and how much of the machine PostgreSQL used (issue 21, point 3).

One embedded PostgreSQL (pgvector) is started here and shared; each instance is an
`engram serve` process on it and on Redis; the 64 clients of bench/throughput.py's mix are
dealt round-robin to the instances (a load balancer's even spread). For each count the script
prints req/s, p50/p95, errors, the instances' and PostgreSQL's CPU (in cores) and the ratio to
one instance. On a machine whose cores the instances, PostgreSQL and the load generator share,
the scaling stops where the cores run out; PostgreSQL's share says how far the database is
from being the limit.

Run: .venv/bin/python bench/instances.py [--seconds 15] [--counts 1,2,3]
     [--redis-url redis://127.0.0.1:6379/14]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from provenance import stamp  # bench/ is on the path: the scripts run from it
from throughput import (
    CLEARED_ENV,
    FILL_PER_WALLET,
    Wallet,
    closed_loop,
    fill,
    free_port,
    op_mix,
    summarise,
)

from app.config import LOCAL_EMBED_DIMS
from app.db.embedded import EmbeddedPostgres
from app.db.schema import upgrade_to_head

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "bench" / "results"
CLIENTS = 64


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system
    return total


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


class Instances:
    """`count` engram serve processes on one database and Redis."""

    def __init__(self, count: int, dsn: str, redis_url: str, root: Path) -> None:
        self.count, self.dsn, self.redis_url, self.root = count, dsn, redis_url, root
        self.procs: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []

    def __enter__(self) -> Instances:
        env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
        env.update(
            ENGRAM_DATABASE_URL=self.dsn, ENGRAM_REDIS_URL=self.redis_url,
            ENGRAM_FREE_TIER_CALLS="10000000", ENGRAM_RATE_LIMIT_PER_MINUTE="0",
            ENGRAM_DB_POOL_MAX="20", ENGRAM_LOG_FORMAT="text",
        )  # fmt: skip
        engram = Path(sys.executable).parent / "engram"
        for n in range(self.count):
            port = free_port()
            log = (self.root / f"instance{n}.log").open("wb")
            self.procs.append(subprocess.Popen(
                [str(engram), "serve", "--port", str(port)], env=env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=PROJECT,
            ))  # fmt: skip
            self.urls.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 120
        for url in self.urls:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise SystemExit(f"no /ready from {url}")
                time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()


async def measure(instances: Instances, pg_pid: int, seconds: float) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=3)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(
                base_url=instances.urls[i % instances.count], timeout=60, limits=limits))
            for i in range(CLIENTS)
        ]  # fmt: skip
        wallets = [Wallet.create() for _ in range(CLIENTS)]
        await fill(clients, wallets, FILL_PER_WALLET)
        servers = [psutil.Process(p.pid) for p in instances.procs]
        pg = tree(pg_pid)
        before = (cpu_seconds(servers), cpu_seconds(pg), psutil.cpu_times())
        samples, elapsed = await closed_loop(clients, op_mix, wallets, seconds, seed=7)
        after = (cpu_seconds(servers), cpu_seconds(tree(pg_pid)), psutil.cpu_times())
    busy = (sum(after[2]) - after[2].idle) - (sum(before[2]) - before[2].idle)
    cpu = {"wall": elapsed, "server_loop": after[0] - before[0], "server_threads": 0.0,
           "postgres": after[1] - before[1], "generator": 0.0, "other": 0.0}  # fmt: skip
    row = summarise(f"mix x{instances.count}", "closed", CLIENTS, None, samples, elapsed, cpu)
    row["instances"] = instances.count
    row["cores"] = {
        "instances": round((after[0] - before[0]) / elapsed, 2),
        "postgres": round((after[1] - before[1]) / elapsed, 2),
        "machine_busy": round(busy / elapsed, 2),
        "machine_total": psutil.cpu_count(),
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--counts", default="1,2,3")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--out", type=Path, default=RESULTS / "instances.json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="engram-instances-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        pg = EmbeddedPostgres(root / "pgdata")
        dsn = pg.start()
        try:
            upgrade_to_head(dsn, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
            pg_pid = int((root / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])
            print(f"{'instances':>9s} {'req/s':>8s} {'x one':>6s} {'p50 ms':>7s} {'p95 ms':>7s}"
                  f" {'errors':>6s}  cores: engram  postgres  machine busy/total")  # fmt: skip
            for count in (int(c) for c in args.counts.split(",")):
                with Instances(count, dsn, args.redis_url, root) as instances:
                    row = asyncio.run(measure(instances, pg_pid, args.seconds))
                rows.append(row)
                ratio = row["req_s"] / rows[0]["req_s"]
                cores = row["cores"]
                print(f"{count:9d} {row['req_s']:8.1f} {ratio:6.2f} {row['p50_ms']:7.1f}"
                      f" {row['p95_ms']:7.1f} {row['errors']:6d}  {cores['instances']:13.2f}"
                      f" {cores['postgres']:9.2f}  {cores['machine_busy']:.2f}/"
                      f"{cores['machine_total']}", flush=True)  # fmt: skip
        finally:
            pg.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**stamp(sys.argv), "rows": rows}, indent=2))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
