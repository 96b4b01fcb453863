"""Does a big import starve other wallets? Other wallets' POST /v1/store latency, idle and during
a 10,000-item POST /v1/import, over real HTTP to `engram serve` in its own process.

Issue 11's target: store p95 during the import within 2x of idle. Idle and "during" use the same
clients (--clients concurrent, each storing one memory at a time from its own wallet); "during"
counts only stores that began and ended while the import was running.

Run: .venv/bin/python bench/import_lane.py [--items 10000] [--clients 2]
Prints the figures and writes bench/results/import_lane.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
from eth_account import Account
from throughput import Server, free_port

from app.auth.signature import sign_header

RESULTS = Path(__file__).parent / "results" / "import_lane.json"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--idle-stores", type=int, default=100, help="per client")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engram-import-lane-") as tmp:
        server = Server(Path(tmp), free_port(), pool_max=None)
        server.start()
        try:
            stores(server.url, args.clients, None, 10)  # warm: embedder loaded, pool filled
            idle = percentiles(stores(server.url, args.clients, None, args.idle_stores))
            items = [{"content": sentence(10**6 + i)} for i in range(args.items)]
            done = threading.Event()
            outcome: dict[str, object] = {}

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
            end = float(outcome["began"]) + float(outcome["seconds"])  # type: ignore[arg-type]
            during = percentiles(
                [(b, e) for b, e in spans if b >= float(outcome["began"]) and e <= end]  # type: ignore[arg-type]
            )
        finally:
            server.stop()
    report = {
        "items": args.items, "clients": args.clients, "idle": idle, "during_import": during,
        "p95_ratio": during["p95_ms"] / idle["p95_ms"],
        "import": {"status": outcome["status"], "answer": outcome["body"],
                   "seconds": outcome["seconds"]},
    }  # fmt: skip
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2))
    print(f"store idle:   n={idle['n']} p50 {idle['p50_ms']:.1f} ms, p95 {idle['p95_ms']:.1f} ms")
    print(f"store during: n={during['n']} p50 {during['p50_ms']:.1f} ms,"
          f" p95 {during['p95_ms']:.1f} ms (max {during['max_ms']:.0f} ms)")  # fmt: skip
    print(f"p95 ratio {report['p95_ratio']:.2f}x (target <= 2x); import of {args.items}:"
          f" {outcome['status']} {outcome['body']} in {outcome['seconds']:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
