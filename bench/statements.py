"""SQL statements per request, and PostgreSQL's execution and planning time, for each route of
bench/throughput.py's mix: what one request costs the database, statement by statement.

An embedded PostgreSQL with pg_stat_statements (track_planning on), the app served in-process
(httpx's ASGI transport on uvloop, no network), one wallet filled with 50 memories; for each
route, N requests after the counters are reset, then each statement's calls per request and mean
execution and planning time. Round trips cost more than most of these statements take (each one
costs the event loop, PostgreSQL and the kernel), so the count is the figure to watch.

Run: .venv/bin/python bench/statements.py [--requests 200] [--top 12]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
from pathlib import Path

import asyncpg
import httpx
import uvloop
from eth_account import Account

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import FILL_PER_WALLET, MIX, memory_body, recall_query

import app.db.embedded as embedded
from app.asgi import create_app
from app.auth.signature import sign_header
from app.config import LOCAL_EMBED_DIMS, DatabaseSettings, LimitsSettings, Settings
from app.db.schema import upgrade_to_head

TRACKING = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_planning": "on",
}
STATEMENTS = """
    SELECT calls, total_exec_time AS exec, total_plan_time AS plan,
           left(regexp_replace(query, '\\s+', ' ', 'g'), 100) AS query
    FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%'
    ORDER BY total_exec_time + total_plan_time DESC"""


async def one(client: httpx.AsyncClient, op: str, headers: dict[str, str], ids: list[str],
              rng: random.Random) -> None:  # fmt: skip
    if op == "list":
        r = await client.get("/v1/memories", params={"limit": 20}, headers=headers)
    elif op == "get":
        r = await client.get(f"/v1/memories/{rng.choice(ids)}", headers=headers)
    elif op == "recall":
        body = {"query": recall_query(rng), "limit": 5}
        r = await client.post("/v1/recall", json=body, headers=headers)
    else:
        r = await client.post("/v1/store", json=memory_body(rng), headers=headers)
    r.raise_for_status()


async def lifespan_started(app: object) -> None:
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    asyncio.get_running_loop().create_task(app(scope, inbox.get, outbox.put))  # type: ignore[operator]
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started


async def measure(dsn: str, requests: int, top: int) -> None:
    settings = Settings(
        database=DatabaseSettings(url=dsn),
        limits=LimitsSettings(free_tier_calls=10**7, rate_limit_per_minute=0),
    )
    app = create_app(settings)
    await lifespan_started(app)
    admin = await asyncpg.connect(dsn)
    await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    rng = random.Random(3)
    headers = {"x-wallet-auth": sign_header(Account.create().key.hex())}
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://engram", timeout=60) as c:
        fill = {"memories": [memory_body(rng) for _ in range(FILL_PER_WALLET)]}
        r = await c.post("/v1/store/batch", json=fill, headers=headers)
        ids = r.json()["ids"]
        for op, _ in MIX:
            for _ in range(20):  # warm: connections, prepared statements, caches
                await one(c, op, headers, ids, rng)
            await admin.execute("SELECT pg_stat_statements_reset()")
            for _ in range(requests):
                await one(c, op, headers, ids, rng)
            rows = await admin.fetch(STATEMENTS)
            calls = sum(r["calls"] for r in rows) / requests
            spent = sum(r["exec"] + r["plan"] for r in rows) / requests
            print(f"\n{op}: {calls:.1f} statements per request, {spent:.3f} ms executing+planning")
            for row in rows[:top]:
                per, each = row["calls"] / requests, row["calls"]
                print(f"  {per:4.1f}/request  exec {row['exec'] / each:.3f}"
                      f"  plan {row['plan'] / each:.3f} ms  {row['query']}")  # fmt: skip
    await admin.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    embedded.SERVER_SETTINGS = {**embedded.SERVER_SETTINGS, **TRACKING}
    root = Path(tempfile.mkdtemp(prefix="engram-statements-"))
    server = embedded.EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        upgrade_to_head(dsn, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
        uvloop.run(measure(dsn, args.requests, args.top))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
