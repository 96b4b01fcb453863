"""The console's speed on a big wallet: the memories view of a 100,000-memory wallet (first page,
deep pages, the last page, each filter, each sort), and console search against recall with the
same queries, alternated in one run.

Data: bench/scale.py's synthetic corpus (COPY into an embedded PostgreSQL, the migration's
indexes, ANALYZE), one wallet of --big-wallet memories among --wallets. Query embeddings are
pre-computed (scale.py's PrecomputedEmbedder behind the app's cache), so search and recall both
measure Engram, not the embedder. Engram is served by uvicorn on a real socket; the console is
signed in through its one-time link, as `engram console` does. Times are HTTP round trips on
loopback, which bound the server's time from above.

Run: .venv/bin/python bench/console.py [--keep-db /tmp/engram-console-db] [--requests 40]
Prints figures, never asserts them; writes bench/results/console.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from scale import (
    CachedEmbedder,
    PrecomputedEmbedder,
    UvicornThread,
    bench_app,
    bench_pool,
    make_queries,
    prepare_database,
)

from app import asgi
from app.auth.signature import sign_header
from app.console.link import console_link
from app.db.embedded import EmbeddedPostgres

RESULTS = Path(__file__).resolve().parent / "results" / "console.json"
TARGET_MS = 300.0
SEARCH_LIMIT = 20  # the console's (app/console/memories_controller.py SEARCH_LIMIT)


def ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
        "max": round(ordered[-1], 1),
        "n": len(ordered),
    }


def timed(client: httpx.Client, method: str, path: str, **kw: Any) -> float:
    t = time.perf_counter()
    r = client.request(method, path, **kw)
    elapsed = (time.perf_counter() - t) * 1000
    if r.status_code != 200:
        raise SystemExit(f"{method} {path}: {r.status_code} {r.text[:300]}")
    return elapsed


def list_views(meta: dict[str, Any], rows: int, page_size: int) -> dict[str, str]:
    last = max(1, -(-rows // page_size))
    return {
        "first page": "/console/memories",
        "page 100": "/console/memories?page=100",
        f"last page ({last})": f"/console/memories?page={last}",
        "namespace filter": "/console/memories?namespace=default",
        "tag filter": f"/console/memories?tags={meta['tag']}",
        "type filter": "/console/memories?memory_type=preference",
        "pinned filter": "/console/memories?pinned=true",
        "sort by importance": "/console/memories?sort=importance",
        "oldest first": "/console/memories?order=asc",
    }


async def prepare(args: argparse.Namespace, dsn: str) -> tuple[dict[str, Any], list[Any]]:
    scale_args = argparse.Namespace(rows=args.rows, wallets=args.wallets,
                                    big_wallet=args.big_wallet, seed=args.seed)  # fmt: skip
    meta = await prepare_database(dsn, scale_args)
    pool = await bench_pool(dsn)
    try:
        queries = await make_queries(pool, meta["big_wallet"], args.queries, args.seed)
        async with pool.acquire() as conn:
            rows = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE user_id = $1 AND deleted_at IS NULL",
                meta["big_wallet"],
            )
            tag = await conn.fetchval(
                "SELECT metadata -> 'tags' ->> 0 FROM memories WHERE user_id = $1"
                " AND metadata ? 'tags' LIMIT 1",
                meta["big_wallet"],
            )
    finally:
        await pool.close()
    return {**meta, "rows_of_big_wallet": int(rows), "tag": tag}, queries


def run(args: argparse.Namespace, dsn: str, meta: dict[str, Any], queries: list[Any]) -> dict:
    vectors = {q.text: q.vector for q in queries}
    embedder = CachedEmbedder(PrecomputedEmbedder(vectors), size=len(vectors) + 10)
    asyncio.run(embedder.embed(list(vectors)))  # every query embedding below is a cache hit

    # The served app's start-up check refuses a database embedded with another model than its
    # own (app/db/schema.py); here every query vector is pre-computed in the corpus's space, so
    # the check is skipped for this run (the corpus's 130k vectors are never re-embedded).
    async def same_model(*_: Any) -> None:
        return None

    asgi.check_embedding_model = same_model  # type: ignore[assignment]
    served = bench_app(dsn, embedder)
    from app.console.memories_controller import PAGE_SIZE

    with UvicornThread(served) as url:
        link = console_link(url, meta["big_key"])
        with httpx.Client(base_url=url, timeout=120) as client:
            client.get(link)  # the link's page; its script posts the link back, as here
            r = client.post(link, headers={"origin": url}, follow_redirects=False)
            assert r.status_code == 303, r.text
            views = list_views(meta, meta["rows_of_big_wallet"], PAGE_SIZE)
            listing: dict[str, list[float]] = {name: [] for name in views}
            for path in views.values():  # warm each once, untimed
                timed(client, "GET", path)
            for _ in range(args.requests):
                for name, path in views.items():
                    listing[name].append(timed(client, "GET", path))
            search: list[float] = []
            recall: list[float] = []
            account_key = meta["big_key"]
            for q in queries[: args.warmup]:
                timed(client, "GET", "/console/memories", params={"q": q.text})
            for q in queries[args.warmup :]:
                # alternated, the same query each: console search, then POST /v1/recall
                search.append(timed(client, "GET", "/console/memories", params={"q": q.text}))
                headers = {"x-wallet-auth": sign_header(account_key)}
                body = {"query": q.text, "limit": SEARCH_LIMIT}
                recall.append(timed(client, "POST", "/v1/recall", json=body, headers=headers))
    return {
        "list_ms": {name: ms(samples) for name, samples in listing.items()},
        "search_ms": ms(search),
        "recall_ms": ms(recall),
        "search_over_recall_p50": round(statistics.median(search) / statistics.median(recall), 3),
    }


def report(result: dict[str, Any]) -> None:
    print(f"\nmemories view of a {result['meta']['rows_of_big_wallet']:,}-memory wallet"
          f" (HTTP on loopback, ms; target <= {TARGET_MS:.0f}):")  # fmt: skip
    for name, s in result["list_ms"].items():
        flag = "" if s["p95"] <= TARGET_MS else "  OVER TARGET"
        print(
            f"  {name:<22} p50 {s['p50']:>7.1f}  p95 {s['p95']:>7.1f}  max {s['max']:>7.1f}{flag}"
        )
    s, r = result["search_ms"], result["recall_ms"]
    print(f"\nconsole search  p50 {s['p50']:.1f}  p95 {s['p95']:.1f}  (n={s['n']})")
    print(f"POST /v1/recall p50 {r['p50']:.1f}  p95 {r['p95']:.1f}  (n={r['n']})")
    print(f"search / recall (p50): {result['search_over_recall_p50']}")


def main(args: argparse.Namespace) -> None:
    root = Path(args.keep_db) if args.keep_db else Path(tempfile.mkdtemp(prefix="engram-console-"))
    server = EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        meta, queries = asyncio.run(prepare(args, dsn))
        result = run(args, dsn, meta, queries)
        result["meta"] = {k: v for k, v in meta.items() if not k.endswith("_key")}
        result["args"] = vars(args)
        report(result)
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2, default=str))
        print(f"\nwrote {RESULTS}")
    finally:
        server.stop()
        if not args.keep_db:
            shutil.rmtree(root, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=130_000, help="memories in all")
    p.add_argument("--wallets", type=int, default=100)
    p.add_argument("--big-wallet", type=int, default=100_000, help="memories of the measured one")
    p.add_argument("--requests", type=int, default=30, help="timed requests per list view")
    p.add_argument("--queries", type=int, default=80, help="search and recall queries")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--keep-db", metavar="DIR", help="keep (and reuse) the filled database here")
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


if __name__ == "__main__":
    os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
    main(parse_args())
