"""Where a long memory's passages live at scale: one vector per memory in the HNSW index with
its passages looked up for re-scoring, or every window a row of the index (issue 37, point 2).

Two layouts of the same synthetic memories, in one embedded PostgreSQL:

- per memory (what Engram does, migration 0021): `mem` (one vector per memory, HNSW) and
  `pas` (the windows past the first, primary key (memory, seq)); a recall walks the index for
  its `--per-side` nearest memories, then scores each by its best window (one probe each);
- window rows: `win` (every window a row, HNSW); a recall walks the index until it holds
  `--per-side` distinct memories (a memory's windows crowd the walk: it asks for 4x the rows).

Per layout: rows in the index, HNSW build time and size, recall latency p50/p95 over --queries
query vectors (ef_search 400, as Engram sets it), and memory recall@10 against the exact answer
(each memory as near as its best window) -- the tail a per-memory index can miss. Vectors are
384-d unit vectors clustered by topic (as bench/scale.py's: harder for HNSW than real sentence
embeddings); a long memory's windows are its topic's centre plus their own noise, so its tail can
be nearer a query than its head. --long is the share of memories past the model's window and
--windows the windows past the first each has (BEAM's dev set: 0.46 and 4.0 measured).

Run: .venv/bin/python bench/passages_scale.py [--memories 100000] [--long 0.46] [--windows 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import save  # bench/ is on the path: the scripts run from it

from app.db.embedded import EmbeddedPostgres
from app.db.pool import asyncpg_dsn

DIMS = 384


def unit(m: np.ndarray) -> np.ndarray:
    out: np.ndarray = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)
    return out


def corpus(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Head vectors, then the windows past the head (their memory's index and vector)."""
    rng = np.random.default_rng(7)
    topics = unit(rng.standard_normal((args.memories // 50, DIMS)))
    topic_of = rng.integers(0, len(topics), args.memories)
    heads = unit(topics[topic_of] + 0.09 * rng.standard_normal((args.memories, DIMS)))
    long = np.flatnonzero(rng.random(args.memories) < args.long)
    counts = rng.poisson(args.windows - 1, len(long)) + 1
    owner = np.repeat(long, counts)
    tails = unit(topics[topic_of[owner]] + 0.09 * rng.standard_normal((len(owner), DIMS)))
    return heads, owner, tails


async def load(
    conn: asyncpg.Connection, heads: np.ndarray, owner: np.ndarray, tails: np.ndarray
) -> None:
    await conn.execute(
        f"""CREATE TABLE mem (id int PRIMARY KEY, embedding vector({DIMS}));
            CREATE TABLE pas (mem int, seq int, embedding vector({DIMS}),
                              PRIMARY KEY (mem, seq));
            CREATE TABLE win (mem int, seq int, embedding vector({DIMS}))"""
    )
    seq = np.zeros(len(owner), dtype=int)
    for i in range(1, len(owner)):
        seq[i] = seq[i - 1] + 1 if owner[i] == owner[i - 1] else 1
    await conn.copy_records_to_table("mem", records=[(i, v) for i, v in enumerate(heads)])
    pas = [(int(m), int(s), v) for m, s, v in zip(owner, seq, tails, strict=True)]
    await conn.copy_records_to_table("pas", records=pas)
    await conn.copy_records_to_table("win", records=[(i, 0, v) for i, v in enumerate(heads)])
    await conn.copy_records_to_table("win", records=pas)
    await conn.execute("ANALYZE mem; ANALYZE pas; ANALYZE win")


async def build(conn: asyncpg.Connection, table: str) -> dict[str, Any]:
    t = time.perf_counter()
    await conn.execute(
        f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)"
    )
    took = time.perf_counter() - t
    await conn.execute(f"ANALYZE {table}")
    size = await conn.fetchval(f"SELECT pg_relation_size('{table}_hnsw')")
    rows = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return {"rows": rows, "build_s": round(took, 1), "index_mb": round(size / 2**20, 1)}


PER_MEMORY = """
WITH vec AS (SELECT id, embedding FROM mem ORDER BY embedding <=> $1 LIMIT $2)
SELECT vec.id, LEAST(vec.embedding <=> $1,
       (SELECT min(p.embedding <=> $1) FROM pas p WHERE p.mem = vec.id)) AS d
FROM vec ORDER BY d LIMIT 10"""

WINDOW_ROWS = """
WITH w AS (SELECT mem, embedding <=> $1 AS d FROM win ORDER BY embedding <=> $1 LIMIT $2)
SELECT mem, min(d) AS d FROM w GROUP BY mem ORDER BY min(d) LIMIT 10"""


async def recall(
    conn: asyncpg.Connection, sql: str, queries: np.ndarray, limit: int
) -> tuple[list[float], list[list[int]], list[int]]:
    times, answers, distinct = [], [], []
    for q in queries:
        t = time.perf_counter()
        rows = await conn.fetch(sql, q, limit)
        times.append((time.perf_counter() - t) * 1000)
        answers.append([int(r[0]) for r in rows])
    if "win" in sql:
        for q in queries[:50]:
            distinct.append(
                await conn.fetchval(
                    "SELECT count(DISTINCT mem) FROM (SELECT mem FROM win"
                    " ORDER BY embedding <=> $1 LIMIT $2) w",
                    q,
                    limit,
                )
            )
    return times, answers, distinct


def truth(
    queries: np.ndarray, heads: np.ndarray, owner: np.ndarray, tails: np.ndarray
) -> list[list[int]]:
    best = queries @ heads.T
    tail_sims = queries @ tails.T
    for j in range(len(queries)):
        np.maximum.at(best[j], owner, tail_sims[j])
    return [list(np.argsort(-row)[:10]) for row in best]


def hit_rate(answers: list[list[int]], exact: list[list[int]]) -> float:
    return statistics.mean(len(set(a) & set(e)) / 10 for a, e in zip(answers, exact, strict=True))


def stats(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[int(0.95 * len(ordered))], 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--long", type=float, default=0.46)
    parser.add_argument("--windows", type=float, default=4.0)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--per-side", type=int, default=50)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results/passages-scale.json"
    )
    args = parser.parse_args()
    heads, owner, tails = corpus(args)
    rng = np.random.default_rng(11)
    # a query near a random window (head or tail) of a random memory
    picks = rng.integers(0, len(heads) + len(tails), args.queries)
    pool = np.vstack([heads, tails])
    queries = unit(pool[picks] + 0.12 * rng.standard_normal((args.queries, DIMS)))
    exact = truth(queries, heads, owner, tails)
    with tempfile.TemporaryDirectory(prefix="engram-passages-") as root:
        server = EmbeddedPostgres(Path(root) / "pgdata")
        dsn = server.start()
        try:
            conn = await asyncpg.connect(asyncpg_dsn(dsn))
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            await register_vector(conn)
            await conn.execute("SET maintenance_work_mem = '1GB'")
            await load(conn, heads, owner, tails)
            figures: dict[str, Any] = {
                "memories": args.memories,
                "long": args.long,
                "windows": args.windows,
                "passages": len(tails),
            }
            # the index walk, as a big wallet's recall takes it (a small one's exact scan reads
            # its passages beside its rows: app/memory/repository/recall.py)
            await conn.execute("SET hnsw.ef_search = 400; SET enable_seqscan = off")
            for name, table, sql, limit in (
                ("per memory", "mem", PER_MEMORY, args.per_side),
                ("window rows", "win", WINDOW_ROWS, 4 * args.per_side),
            ):
                built = await build(conn, table)
                await recall(conn, sql, queries[:20], limit)  # warm the cache
                times, answers, distinct = await recall(conn, sql, queries, limit)
                figures[name] = {
                    **built,
                    "latency_ms": stats(times),
                    "recall_at_10": round(hit_rate(answers, exact), 3),
                }
                if distinct:
                    figures[name]["distinct_memories_in_walk"] = statistics.mean(distinct)
                print(name, figures[name], flush=True)
            await conn.close()
        finally:
            server.stop()
    save(args.out, figures)


if __name__ == "__main__":
    asyncio.run(main())
