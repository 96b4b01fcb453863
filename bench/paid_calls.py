"""What a paid call costs through Engram, end to end on the dev chain: sequential paid stores
(402, sign, pay: verify, settle, commit), p50/p95, for one or more checkouts of the code in the
same run, alternated (to compare a change on the paid path with the commit before it).

Beside each round, the same store on the free tier (the same code served beside it with a free
tier, on the same machine and chain) is timed, so
a paid call is also given as a ratio to a free one measured in the same run, and the chain's
transactions during the paid calls are counted (per paid call). `--block-time N` mines a block
every N seconds instead of one per transaction (Base's block time is 2 s), as a real chain
would; anvil's default, automine, makes settlement look instant.

Run: .venv/bin/python bench/paid_calls.py [--calls 40] [--rounds 2] [--block-time 2]
[--code DIR ...] (each DIR is a checkout whose `app` is served, e.g. a `git worktree` of the
commit before; default: this checkout)
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


def serve(
    code: Path, chain: DevChain, root: Path, free_calls: int = 0
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env.update(
        PYTHONPATH=str(code), ENGRAM_DATA_DIR=str(root), ENGRAM_FREE_TIER_CALLS=str(free_calls),
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


def transactions_since(chain: DevChain, first_block: int) -> int:
    """Transactions mined in the blocks after `first_block` (up to the latest)."""
    latest = chain.w3.eth.block_number
    return sum(
        chain.w3.eth.get_block_transaction_count(n) for n in range(first_block + 1, latest + 1)
    )


def free_stores(url: str, calls: int) -> list[float]:
    """The same store on the free tier: the floor a paid call is compared with."""
    wallet = Account.create()
    times = []
    with httpx.Client(base_url=url, timeout=60) as http:
        for i in range(calls + 3):  # 3 to warm up
            body = {"content": f"free call {i} {uuid.uuid4()}"}
            started = time.perf_counter()
            r = http.post("/v1/store", json=body,
                          headers={"x-wallet-auth": sign_header(wallet.key.hex())})  # fmt: skip
            elapsed = (time.perf_counter() - started) * 1000
            assert r.status_code == 201, r.text
            if i >= 3:
                times.append(elapsed)
    return times


def paid_stores(url: str, chain: DevChain, calls: int) -> tuple[list[float], int]:
    """The paid stores' times, and the transactions the chain mined meanwhile (the payer's
    funding and the warm-up calls not counted)."""
    payer = Account.create()
    chain.fund(payer.address, 10**9, eth_wei=0)
    first_block = 0
    times = []
    with httpx.Client(base_url=url, timeout=60) as http:
        for i in range(calls + 3):  # 3 to warm up
            if i == 3:
                first_block = chain.w3.eth.block_number
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
    # exact settles before its call commits, so every settlement is mined by now
    return times, transactions_since(chain, first_block)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--code", type=Path, nargs="*", default=[PROJECT])
    parser.add_argument(
        "--block-time", type=int, default=0,
        help="seconds between blocks (0: anvil's automine, a block per transaction)",
    )  # fmt: skip
    args = parser.parse_args()
    with DevChain(chain_id=8453) as chain, tempfile.TemporaryDirectory() as tmp:
        chain.install_usdc()
        servers, free_servers = {}, {}
        for n, code in enumerate(args.code):
            root, free_root = Path(tmp, f"code{n}"), Path(tmp, f"code{n}-free")
            root.mkdir()
            free_root.mkdir()
            servers[code] = serve(code, chain, root)
            free_servers[code] = serve(code, chain, free_root, free_calls=10**6)
        if args.block_time:
            chain.rpc("evm_setIntervalMining", [args.block_time])
        mining = f"a block every {args.block_time} s" if args.block_time else "automine"
        print(f"dev chain: {mining}")
        try:
            paid: dict[Path, list[float]] = {code: [] for code in args.code}
            free: dict[Path, list[float]] = {code: [] for code in args.code}
            txs: dict[Path, int] = dict.fromkeys(args.code, 0)
            for round_ in range(args.rounds):
                for code, (_, url) in servers.items():
                    free[code] += free_stores(free_servers[code][1], args.calls)
                    times, mined = paid_stores(url, chain, args.calls)
                    txs[code] += mined
                    paid[code] += times
                    print(f"round {round_ + 1} {code}: paid p50 {statistics.median(times):.1f} ms")
            for code, times in paid.items():
                p50, p95 = percentile(times, 0.5), percentile(times, 0.95)
                free_p50 = percentile(free[code], 0.5)
                print(f"{code}: {len(times)} paid stores (402 + paid call), p50 {p50:.1f} ms,"
                      f" p95 {p95:.1f} ms; free-tier store p50 {free_p50:.1f} ms;"
                      f" paid/free p50 {p50 / free_p50:.2f}x; on-chain transactions"
                      f" {txs[code]} ({txs[code] / len(times):.2f} per paid call)")  # fmt: skip
        finally:
            for proc, _ in [*servers.values(), *free_servers.values()]:
                proc.terminate()
                proc.wait(timeout=40)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if q != 0.5 else statistics.median(ordered)


if __name__ == "__main__":
    main()
