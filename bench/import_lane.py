"""Do imports starve other wallets? Other wallets' POST /v1/store latency, idle and during
POST /v1/import, over real HTTP to `engram serve` in its own process. Two loads:

- one big import (the default): a 10,000-item import; issue 11's target, store p95 during the
  import within 2x of idle. "During" counts only stores that began and ended while it ran.
- many small ones (--importers N): N wallets, each looping imports of --items items for
  --seconds; issue 23's target, store p50 and p95 within 3x of idle. An importer told 429
  retries after 0.1 s whatever Retry-After says, and swaps a wallet at its own rate limit (30
  imports a minute) for a fresh one, as wallets cost nothing.

Idle and "during" use the same clients (--clients concurrent, each storing one memory at a time
from its own wallet).

Run: .venv/bin/python bench/import_lane.py [--items 10000] [--clients 2]
     .venv/bin/python bench/import_lane.py --importers 8 --items 60 --clients 1 [--seconds 10]
Prints the figures and writes bench/results/import_lane.json (import_lane_small.json for
--importers).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from eth_account import Account
from throughput import Server, free_port

from app.auth.signature import sign_header

RESULTS = Path(__file__).parent / "results" / "import_lane.json"
SMALL_RESULTS = RESULTS.with_name("import_lane_small.json")
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"
    " november oscar papa quebec romeo sierra tango uniform victor whiskey"
).split()


def sentence(i: int) -> str:
    rng = np.random.default_rng(i)
    return f"memory {i}: " + " ".join(rng.choice(WORDS, size=12))


def stores(url: str, clients: int, until: threading.Event | None, count: int) -> list[tuple]:
    """(began, ended) of each store; `count` per client, or until `until` is set."""
    results: list[tuple[float, float]] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        key = Account.create().key.hex()
        with httpx.Client(base_url=url, timeout=120) as http:
            n = 0
            while (until is None and n < count) or (until is not None and not until.is_set()):
                body = {"content": f"interactive {c} {n} {uuid.uuid4()} " + sentence(n)}
                began = time.monotonic()
                r = http.post("/v1/store", json=body, headers={"x-wallet-auth": sign_header(key)})
                ended = time.monotonic()
                assert r.status_code == 201, r.text
                with lock:
                    results.append((began, ended))
                n += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def percentiles(spans: list[tuple[float, float]]) -> dict[str, float]:
    ms = np.array([(e - b) * 1000 for b, e in spans])
    return {"n": len(ms), "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)), "max_ms": float(ms.max())}  # fmt: skip


def small_imports(url: str, importers: int, items: int, until: threading.Event) -> dict[str, Any]:
    """`importers` wallets looping `items`-item imports until `until`: their answers."""
    answers: Counter[str] = Counter()
    imported = [0]
    lock = threading.Lock()

    def importer(i: int) -> None:
        key = Account.create().key.hex()
        with httpx.Client(base_url=url, timeout=120) as http:
            n = 0
            while not until.is_set():
                body = [{"content": f"small import {i} {n} {uuid.uuid4()} " + sentence(n)}
                        for _ in range(items)]  # fmt: skip
                r = http.post("/v1/import", json=body, headers={"x-wallet-auth": sign_header(key)})
                n += 1
                retry_after = "retry-after" in r.headers
                with lock:
                    answers[f"{r.status_code}{' with Retry-After' if retry_after else ''}"] += 1
                    imported[0] += r.json()["imported"] if r.status_code == 200 else 0
                if r.status_code == 429:
                    if "limit" in r.json()["error"]["details"]:  # the wallet's own rate limit
                        key = Account.create().key.hex()
                    until.wait(0.1)

    threads = [threading.Thread(target=importer, args=(i,)) for i in range(importers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"answers": dict(answers), "memories_imported": imported[0]}


def run_small(server: Server, args: argparse.Namespace, idle: dict[str, float]) -> dict[str, Any]:
    until = threading.Event()
    outcome: dict[str, Any] = {}
    importers = threading.Thread(
        target=lambda: outcome.update(small_imports(server.url, args.importers, args.items, until))
    )
    began = time.monotonic()
    importers.start()
    time.sleep(1)  # the lane at work
    timer = threading.Timer(args.seconds, until.set)
    timer.start()
    during = percentiles(stores(server.url, args.clients, until, 0))
    importers.join()
    seconds = time.monotonic() - began
    report = {
        "importers": args.importers, "items_per_import": args.items, "clients": args.clients,
        "idle": idle, "during_imports": during,
        "p50_ratio": during["p50_ms"] / idle["p50_ms"],
        "p95_ratio": during["p95_ms"] / idle["p95_ms"],
        "imports": {**outcome, "seconds": seconds},
    }  # fmt: skip
    print(f"store idle:   n={idle['n']} p50 {idle['p50_ms']:.1f} ms, p95 {idle['p95_ms']:.1f} ms")
    print(f"store during: n={during['n']} p50 {during['p50_ms']:.1f} ms,"
          f" p95 {during['p95_ms']:.1f} ms (max {during['max_ms']:.0f} ms)")  # fmt: skip
    print(f"p50 ratio {report['p50_ratio']:.2f}x, p95 ratio {report['p95_ratio']:.2f}x (target"
          f" <= 3x); {args.importers} importers of {args.items} items: {outcome['answers']},"
          f" {outcome['memories_imported']} memories in {seconds:.1f} s")  # fmt: skip
    return report


def run_big(server: Server, args: argparse.Namespace, idle: dict[str, float]) -> dict[str, Any]:
    items = [{"content": sentence(10**6 + i)} for i in range(args.items)]
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def run_import() -> None:
        key = Account.create().key.hex()
        began = time.monotonic()
        r = httpx.post(f"{server.url}/v1/import", json=items, timeout=3600,
                       headers={"x-wallet-auth": sign_header(key)})  # fmt: skip
        outcome.update(status=r.status_code, body=r.json(),
                       seconds=time.monotonic() - began, began=began)  # fmt: skip
        done.set()

    importer = threading.Thread(target=run_import)
    importer.start()
    spans = stores(server.url, args.clients, done, 0)
    importer.join()
    end = outcome["began"] + outcome["seconds"]
    during = percentiles([(b, e) for b, e in spans if b >= outcome["began"] and e <= end])
    report = {
        "items": args.items, "clients": args.clients, "idle": idle, "during_import": during,
        "p95_ratio": during["p95_ms"] / idle["p95_ms"],
        "import": {"status": outcome["status"], "answer": outcome["body"],
                   "seconds": outcome["seconds"]},
    }  # fmt: skip
    print(f"store idle:   n={idle['n']} p50 {idle['p50_ms']:.1f} ms, p95 {idle['p95_ms']:.1f} ms")
    print(f"store during: n={during['n']} p50 {during['p50_ms']:.1f} ms,"
          f" p95 {during['p95_ms']:.1f} ms (max {during['max_ms']:.0f} ms)")  # fmt: skip
    print(f"p95 ratio {report['p95_ratio']:.2f}x (target <= 2x); import of {args.items}:"
          f" {outcome['status']} {outcome['body']} in {outcome['seconds']:.1f} s")  # fmt: skip
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--items", type=int, help="per import (default 10,000; 60 with --importers)"
    )
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--idle-stores", type=int, default=100, help="per client")
    parser.add_argument("--importers", type=int, default=0, help="wallets looping small imports")
    parser.add_argument("--seconds", type=float, default=10, help="of small imports")
    args = parser.parse_args()
    if args.items is None:
        args.items = 60 if args.importers else 10_000
    with tempfile.TemporaryDirectory(prefix="engram-import-lane-") as tmp:
        server = Server(Path(tmp), free_port(), pool_max=None)
        server.start()
        try:
            stores(server.url, args.clients, None, 10)  # warm: embedder loaded, pool filled
            idle = percentiles(stores(server.url, args.clients, None, args.idle_stores))
            report = (run_small if args.importers else run_big)(server, args, idle)
        finally:
            server.stop()
    results = SMALL_RESULTS if args.importers else RESULTS
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
