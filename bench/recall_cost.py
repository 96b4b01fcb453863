"""What each recall step costs on a conversation-sized wallet, over real HTTP.

`engram serve` (one worker, embedded defaults) in a subprocess, per configuration: one wallet
filled with 400 memories (LoCoMo's conversations hold 370-690 turns), then 300 recalls with
`limit` 20 (as bench/mem0_side.py asks) from one client, one after another: latency p50/p95 and
the CPU each party used per recall (bench/throughput.py's CpuMeter). Configurations: the
default, without the second round (ENGRAM_RECALL_SECOND_ROUND=0), without the event-time boost
(ENGRAM_RECALL_EVENT_TIME=0), keyword_match as the plain IDF sum (ENGRAM_RECALL_KEYWORD_PASSAGES=0,
its form before issue 37), a long memory by its best window (ENGRAM_RECALL_PASSAGES=1), and
the default again (the spread of the two defaults is the noise).
--only picks some of them by name (comma-separated).

Run: .venv/bin/python bench/recall_cost.py [--recalls 300] [--memories 400] [--only NAMES]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import (
    CpuMeter,
    Server,
    Wallet,
    free_port,
    memory_body,
    recall_query,
    temporary_root,
)

CONFIGS = {
    "default": {},
    "no second round": {"ENGRAM_RECALL_SECOND_ROUND": "0"},
    "no event-time boost": {"ENGRAM_RECALL_EVENT_TIME": "0"},
    "plain IDF sum": {"ENGRAM_RECALL_KEYWORD_PASSAGES": "0"},  # keyword_match before issue 37
    "passages": {"ENGRAM_RECALL_PASSAGES": "1"},  # a long memory by its best window (opt-in)
    "default again": {},
}
BATCH, LIMIT, WARM = 100, 20, 30


async def fill(client: httpx.AsyncClient, wallet: Wallet, n: int, rng: random.Random) -> None:
    for start in range(0, n, BATCH):
        body = {"memories": [memory_body(rng) for _ in range(min(BATCH, n - start))]}
        r = await client.post("/v1/store/batch", json=body, headers=wallet.headers())
        r.raise_for_status()


async def measure(env: dict[str, str], memories: int, recalls: int) -> dict[str, float]:
    os.environ.update(env)
    try:
        with temporary_root() as root:
            server = Server(root, free_port(), None)
            server.start()
            try:
                return await _recalls(server, memories, recalls)
            finally:
                server.stop()
    finally:
        for name in env:
            os.environ.pop(name)


async def _recalls(server: Server, memories: int, recalls: int) -> dict[str, float]:
    rng = random.Random(5)
    wallet = Wallet.create()
    meter = CpuMeter(server.pid, server.postgres_pid())
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        await fill(client, wallet, memories, rng)
        queries = [recall_query(rng) for _ in range(WARM + recalls)]
        for q in queries[:WARM]:  # connections, plans, caches
            await client.post(
                "/v1/recall", json={"query": q, "limit": LIMIT}, headers=wallet.headers()
            )
        before, took = meter.reading(), []
        for q in queries[WARM:]:
            t = time.perf_counter()
            r = await client.post(
                "/v1/recall", json={"query": q, "limit": LIMIT}, headers=wallet.headers()
            )
            took.append(time.perf_counter() - t)
            r.raise_for_status()
        used = CpuMeter.seconds(before, meter.reading())
    ms = np.array(took) * 1000
    out = {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95))}
    out |= {f"cpu_{k}_ms": 1000 * v / recalls for k, v in used.items() if k != "wall"}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recalls", type=int, default=300)
    p.add_argument("--memories", type=int, default=400)
    p.add_argument("--only", help=f"comma-separated, of: {', '.join(CONFIGS)}")
    args = p.parse_args()
    chosen = args.only.split(",") if args.only else list(CONFIGS)
    print(f"{args.memories} memories, {args.recalls} recalls of limit {LIMIT}; CPU ms per recall")
    for label in chosen:
        r = asyncio.run(measure(CONFIGS[label], args.memories, args.recalls))
        cpu = " ".join(f"{k[4:-3]} {v:.2f}" for k, v in r.items() if k.startswith("cpu_"))
        print(f"{label:22s} p50 {r['p50_ms']:5.1f} p95 {r['p95_ms']:5.1f} ms; {cpu}", flush=True)


if __name__ == "__main__":
    main()
