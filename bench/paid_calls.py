"""What a paid call costs through Engram, end to end on the dev chain: sequential paid stores
(402, sign, pay: verify, settle, commit), p50/p95, for one or more checkouts of the code in the
same run, alternated (to compare a change on the paid path with the commit before it).

Run: .venv/bin/python bench/paid_calls.py [--calls 40] [--rounds 2] [--code DIR ...]
(each DIR is a checkout whose `app` is served, e.g. a `git worktree` of the commit before;
default: this checkout)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import httpx
from eth_account import Account
from throughput import CLEARED_ENV, PROJECT, free_port

from app.auth.signature import sign_header
from app.dev.chain import DevChain
from tests.support.x402 import offer_of, sign_proof


def serve(code: Path, chain: DevChain, root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env.update(
        PYTHONPATH=str(code), ENGRAM_DATA_DIR=str(root), ENGRAM_FREE_TIER_CALLS="0",
        ENGRAM_RATE_LIMIT_PER_MINUTE="0", ENGRAM_X402_PAY_TO=Account.create().address,
        ENGRAM_X402_RPC_URL=chain.rpc_url, ENGRAM_X402_RELAYER_KEY=chain.relayer.key.hex(),
        ENGRAM_LOG_FORMAT="text",
    )  # fmt: skip
    log = (root / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=code)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(900):
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{code}: no /ready")


def paid_stores(url: str, chain: DevChain, calls: int) -> list[float]:
    payer = Account.create()
    chain.fund(payer.address, 10**9, eth_wei=0)
    times = []
    with httpx.Client(base_url=url, timeout=60) as http:
        for i in range(calls + 3):  # 3 to warm up
            body = {"content": f"paid call {i} {uuid.uuid4()}"}
            auth = {"x-wallet-auth": sign_header(payer.key.hex())}
            started = time.perf_counter()
            r = http.post("/v1/store", json=body, headers=auth)
            name, value = sign_proof(payer, offer_of(r))
            r = http.post("/v1/store", json=body, headers={**auth, name: value})
            elapsed = (time.perf_counter() - started) * 1000
            assert r.status_code == 201, r.text
            if i >= 3:
                times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--code", type=Path, nargs="*", default=[PROJECT])
    args = parser.parse_args()
    with DevChain(chain_id=8453) as chain, tempfile.TemporaryDirectory() as tmp:
        chain.install_usdc()
        servers = {}
        for n, code in enumerate(args.code):
            root = Path(tmp, f"code{n}")
            root.mkdir()
            servers[code] = serve(code, chain, root)
        try:
            results: dict[Path, list[float]] = {code: [] for code in args.code}
            for round_ in range(args.rounds):
                for code, (_, url) in servers.items():
                    times = paid_stores(url, chain, args.calls)
                    results[code] += times
                    print(f"round {round_ + 1} {code}: p50 {statistics.median(times):.1f} ms")
            for code, times in results.items():
                ordered = sorted(times)
                p95 = ordered[int(0.95 * (len(ordered) - 1))]
                print(f"{code}: {len(times)} paid stores (402 + paid call), "
                      f"p50 {statistics.median(ordered):.1f} ms, p95 {p95:.1f} ms")  # fmt: skip
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=40)


if __name__ == "__main__":
    main()
