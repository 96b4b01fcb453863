"""Consolidation on one wallet with 10,000 memories: how long POST /v1/memories/consolidate takes.

Starts its own embedded PostgreSQL (temporary), fills one wallet with N memories of realistic
embedding geometry (384-d unit vectors in a few hundred topics, with near-duplicate groups), then
calls the endpoint in dry-run and in rule mode and prints the server-side time of each.

Run: .venv/bin/python bench/consolidate.py [N]
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import numpy as np
from eth_account import Account
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.asgi import create_app
from app.auth.signature import sign_header
from app.config import LOCAL_EMBED_DIMS, DatabaseSettings, LimitsSettings, Settings
from app.db.embedded import EmbeddedPostgres
from app.db.schema import upgrade_to_head

DUPLICATE_SHARE = 0.1  # a tenth of the memories restate another one


def memories(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    topics = rng.standard_normal((max(n // 30, 10), LOCAL_EMBED_DIMS))
    vectors = []
    for i in range(n):
        if i and rng.random() < DUPLICATE_SHARE:
            v = vectors[int(rng.integers(0, i))] + 0.015 * rng.standard_normal(LOCAL_EMBED_DIMS)
        else:
            topic = topics[int(rng.integers(0, len(topics)))]
            v = topic + 0.9 * rng.standard_normal(LOCAL_EMBED_DIMS)
        vectors.append((v / np.linalg.norm(v)).astype(np.float32))
    return vectors


async def fill(dsn: str, wallet: str, vectors: list[np.ndarray]) -> None:
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    rows = [
        (wallet, "default", f"memory {i}", hashlib.sha256(str(i).encode()).digest(), v, "bench",
         '{"tags": ["bench"]}', float(i % 10) / 10)
        for i, v in enumerate(vectors)
    ]  # fmt: skip
    await conn.copy_records_to_table(
        "memories", records=rows,
        columns=["user_id", "namespace", "content", "content_hash", "embedding",
                 "embedding_model", "metadata", "importance"],
    )  # fmt: skip
    await conn.close()


async def main(n: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    server = EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        await asyncio.to_thread(upgrade_to_head, dsn, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
        account = Account.create()
        await fill(dsn, account.address.lower(), memories(n, np.random.default_rng(1)))
        app = create_app(
            Settings(database=DatabaseSettings(url=dsn), limits=LimitsSettings(free_tier_calls=10))
        )
        async with AsyncTestClient(app=app, timeout=600) as client:
            for label, body in (("dry run", {"dry_run": True}), ("rule mode", {})):
                headers = {"x-wallet-auth": sign_header(account.key.hex())}
                started = time.perf_counter()
                r = await client.post("/v1/memories/consolidate", json=body, headers=headers)
                elapsed = time.perf_counter() - started
                r.raise_for_status()
                report = r.json()
                print(
                    f"{label:9s} {n} memories: {elapsed:6.2f} s, {report['clusters_found']}"
                    f" clusters, {report['memories_merged']} merged"
                )
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
