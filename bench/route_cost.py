"""CPU per request of each route in the mix, one route at a time: where a request's cost goes.

`engram serve` (one worker, embedded defaults) in a subprocess, one wallet filled with 50
memories, then for each operation of bench/throughput.py's mix (list, get, recall, store) N
requests from one client, one after another, with the CPU each party used (bench/throughput.py's
CpuMeter: the server's event-loop thread, its other threads, PostgreSQL, this client) divided by
N. One client at a time, so the figures are costs, not contention; the mix's own CPU per request
is their weighted sum plus what concurrency adds.

`--profile DIR` records the server with py-spy while each route runs (DIR/<route>.txt, raw
collapsed stacks, idle samples left out) and prints the event loop's time per request by layer
(uvicorn, Litestar, serialisation, the driver, logging and metrics, Engram's own code; `LAYERS`)
and each route's heaviest frames by self time.

Run: .venv/bin/python bench/route_cost.py [--requests 400] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import (
    FILL_PER_WALLET,
    MIX,
    CpuMeter,
    Server,
    Wallet,
    free_port,
    memory_body,
    recall_query,
    temporary_root,
)


async def one(client: httpx.AsyncClient, op: str, wallet: Wallet, rng: random.Random) -> None:
    h = wallet.headers()
    if op == "list":
        r = await client.get("/v1/memories", params={"limit": 20}, headers=h)
    elif op == "get":
        r = await client.get(f"/v1/memories/{rng.choice(wallet.ids)}", headers=h)
    elif op == "recall":
        r = await client.post(
            "/v1/recall", json={"query": recall_query(rng), "limit": 5}, headers=h
        )
    else:
        r = await client.post("/v1/store", json=memory_body(rng), headers=h)
    r.raise_for_status()


def start_py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    proc = subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
         "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return proc


def stop_py_spy(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(subprocess.signal.SIGINT)  # py-spy writes its output on SIGINT
    proc.wait(timeout=60)


def heaviest_frames(path: Path, top: int = 25) -> list[tuple[str, float, float]]:
    """(frame, self %, inclusive %) of the samples in a raw py-spy file, heaviest self first."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        total += int(n)
        own[frames[-1]] += int(n)
        for frame in set(frames):
            inclusive[frame] += int(n)
    total = total or 1
    return [(f, 100 * n / total, 100 * inclusive[f] / total) for f, n in own.most_common(top)]


# The event loop's samples by the layer of the frame they were taken in (self time), so that a
# route's loop time reads as framework, serialisation, driver and Engram's own code. Checked in
# order: the first prefix a frame's file starts with names its layer.
LAYERS = (
    ("loop and I/O in C (uvloop, httptools, asyncpg's protocol)", ("asyncio/runners.py",)),
    ("uvicorn", ("uvicorn/",)),
    ("serialisation (msgspec, json)", ("msgspec/", "json/", "litestar/serialization/")),
    ("litestar", ("litestar/",)),
    ("asyncio, anyio, sniffio, contextlib", ("asyncio/", "anyio/", "sniffio/", "contextlib.py")),
    ("asyncpg and its codecs", ("asyncpg/", "pgvector/", "app/db/pool.py")),
    ("logging and metrics", ("logging/", "prometheus_client/", "app/infra/logs.py")),
    ("engram's HTTP glue (app/http, auth, access, payments, free tier, usage, console)",
     ("app/http/", "app/auth/", "app/access/", "app/payments/", "app/free_tier/", "app/usage/",
      "app/console/")),
    ("engram's features (app/memory and the rest of app/)", ("app/",)),
)  # fmt: skip
OTHER_LAYER = "other (stdlib, numpy, ...)"


def _layer_of(frame: str) -> str:
    where = frame.rpartition(" (")[2]
    for name, prefixes in LAYERS:
        if where.startswith(prefixes):
            return name
    return OTHER_LAYER


def loop_layers(path: Path) -> dict[str, float]:
    """Each layer's share of the event loop's samples (the thread running asyncio's Runner; the
    embedding model's threads left out) in a raw py-spy file."""
    shares: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not n.isdigit() or not any(f.startswith("Runner.run (") for f in frames):
            continue
        shares[_layer_of(frames[-1])] += int(n)
    total = sum(shares.values()) or 1
    return {name: n / total for name, n in shares.items()}


async def measure(
    server: Server, requests: int, profile: Path | None = None
) -> dict[str, dict[str, float]]:
    rng = random.Random(11)
    wallet = Wallet.create()
    meter = CpuMeter(server.pid, server.postgres_pid())
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        body = {"memories": [memory_body(rng) for _ in range(FILL_PER_WALLET)]}
        r = await client.post("/v1/store/batch", json=body, headers=wallet.headers())
        wallet.ids = r.json()["ids"]
        out = {}
        for op, _ in MIX:
            for _ in range(20):  # warm: connections, plans, caches
                await one(client, op, wallet, rng)
            spy = start_py_spy(server.pid, profile / f"{op}.txt") if profile else None
            if spy:
                await asyncio.sleep(1)  # py-spy attaches
            before = meter.reading()
            for _ in range(requests):
                await one(client, op, wallet, rng)
            used = CpuMeter.seconds(before, meter.reading())
            if spy:
                stop_py_spy(spy)
            out[op] = {k: 1000 * v / requests for k, v in used.items()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--profile", type=Path, default=None, help="py-spy each route into DIR")
    args = p.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with temporary_root() as root:
        server = Server(root, free_port(), None, None, 1)
        try:
            server.start()
            figures = asyncio.run(measure(server, args.requests, args.profile))
        finally:
            server.stop()
    parties = ("wall", "server_loop", "server_threads", "postgres", "generator", "other")
    print(f"ms per request, {args.requests} sequential requests each, one client, one worker")
    print(f"{'route':<8}" + "".join(f"{p:>15}" for p in parties) + f"{'server+pg':>12}")
    weighted = 0.0
    for op, share in MIX:
        f = figures[op]
        cost = f["server_loop"] + f["server_threads"] + f["postgres"]
        weighted += share * cost
        print(f"{op:<8}" + "".join(f"{f[p]:>15.2f}" for p in parties) + f"{cost:>12.2f}")
    print(f"the mix's weights ({', '.join(f'{op} {s:.0%}' for op, s in MIX)}): {weighted:.2f} ms")

    if args.profile:
        print("\nthe event loop's ms per request by layer (py-spy self time x server_loop)")
        layers = {op: loop_layers(args.profile / f"{op}.txt") for op, _ in MIX}
        print(f"{'layer':<84}" + "".join(f"{op:>8}" for op, _ in MIX))
        for name in [n for n, _ in LAYERS] + [OTHER_LAYER]:
            cells = "".join(
                f"{layers[op].get(name, 0.0) * figures[op]['server_loop']:>8.2f}" for op, _ in MIX
            )
            print(f"{name[:83]:<84}{cells}")
    for op, _ in MIX if args.profile else ():
        print(f"\n{op}: heaviest frames by self time (self %, inclusive %)")
        for frame, own, inclusive in heaviest_frames(args.profile / f"{op}.txt"):
            print(f"  {own:5.1f} {inclusive:5.1f}  {frame[:150]}")


if __name__ == "__main__":
    main()
