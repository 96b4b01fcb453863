"""What a paid call costs through Engram, end to end on the dev chain: sequential paid stores and
recalls, p50/p95, for one or more checkouts of the code in the same run, alternated (to compare
a change on the paid path with the commit before it).

Beside each round, the same calls on the free tier (the same code served beside it with a free
tier, on the same machine and chain) are timed, so a paid call is also given as a ratio to a free
one measured in the same run, and the chain's transactions during the paid calls are counted.
`--block-time N` mines a block every N seconds instead of one per transaction (Base's block time
is 2 s), as a real chain would; anvil's default, automine, makes settlement look instant.

`--scheme exact` (default): each call is a 402, then the call with a signed EIP-3009 transfer,
settled on chain before the call commits (ENGRAM_X402_SCHEMES=exact). `--scheme batch`: x402's
payment channels (ENGRAM_X402_SCHEMES=exact,batch-settlement) paid by x402's own Python client
(`BatchSettlementEvmScheme`): the round's first call deposits (it waits for a block), every later
call carries a voucher and touches no chain. Two timings per route: the stock flow (a 402, then
the call with a voucher) and the voucher sent with the call (the client keeps the route's offer
from its first 402 and signs the next voucher up front: one request). The deposit covers
`--calls-per-deposit` calls of the route's price (x402's client lets the payer size it: a
`deposit_strategy`; 0: the client's default, the offer's `minDeposit`, 200 calls).

Run: .venv/bin/python bench/paid_calls.py [--scheme exact|batch] [--calls 40] [--rounds 2]
[--block-time 2] [--calls-per-deposit 300] [--code DIR ...] (each DIR is a checkout whose `app`
is served, e.g. a `git worktree` of the commit before; default: this checkout)
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount
from throughput import CLEARED_ENV, PROJECT, free_port
from x402 import x402ClientSync
from x402.http import x402HTTPClientSync
from x402.mechanisms.evm.batch_settlement.client import BatchSettlementEvmScheme
from x402.mechanisms.evm.batch_settlement.client.config import (
    BatchSettlementDepositStrategyContext,
    BatchSettlementEvmSchemeOptions,
)
from x402.mechanisms.evm.signers import EthAccountSigner
from x402.schemas import PaymentRequired

from app.auth.signature import sign_header
from app.dev.chain import DevChain
from app.dev.usdc import token_abi
from tests.support.x402 import offer_of, sign_proof

WARM_UP = 3  # calls per route and flow, not timed
ROUTES: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {
    "store": ("/v1/store", lambda i: {"content": f"paid call {i} {uuid.uuid4()}"}),
    "recall": ("/v1/recall", lambda i: {"query": f"what happened in call {i}?"}),
}
STATUS = {"store": 201, "recall": 200}


def serve(
    code: Path, chain: DevChain, root: Path, scheme: str, free_calls: int = 0
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env.update(
        PYTHONPATH=str(code), ENGRAM_DATA_DIR=str(root), ENGRAM_FREE_TIER_CALLS=str(free_calls),
        ENGRAM_RATE_LIMIT_PER_MINUTE="0", ENGRAM_X402_PAY_TO=Account.create().address,
        ENGRAM_X402_RPC_URL=chain.rpc_url, ENGRAM_X402_RELAYER_KEY=chain.relayer.key.hex(),
        ENGRAM_LOG_FORMAT="text",
    )  # fmt: skip
    # stated either way: channels are offered by default where Engram settles itself
    env["ENGRAM_X402_SCHEMES"] = "exact,batch-settlement" if scheme == "batch" else "exact"
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


def transactions_since(chain: DevChain, first_block: int) -> Counter[str]:
    """Transactions mined in the blocks after `first_block` (up to the latest), by the function
    they call (the escrow's deposit, claim, settle...; USDC's transferWithAuthorization)."""
    contracts = [chain.w3.eth.contract(abi=token_abi())]
    if chain.escrow_address is not None:
        contracts.insert(0, chain.escrow())
    mined: Counter[str] = Counter()
    for n in range(first_block + 1, chain.w3.eth.block_number + 1):
        for tx in chain.w3.eth.get_block(n, full_transactions=True)["transactions"]:
            mined[function_of(contracts, tx)] += 1
    return mined


def function_of(contracts: list[Any], tx: Any) -> str:
    for contract in contracts:
        try:
            return str(contract.decode_function_input(tx["input"])[0].fn_name)
        except ValueError:
            continue
    return "other"


@dataclass
class Timings:
    """Milliseconds per (route, flow), warm-up calls left out."""

    ms: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, route: str, flow: str, elapsed: float) -> None:
        self.ms.setdefault((route, flow), []).append(elapsed)

    def merge(self, other: Timings) -> None:
        for key, values in other.ms.items():
            self.ms.setdefault(key, []).extend(values)


def timed(call: Callable[[], httpx.Response], expected: int) -> float:
    started = time.perf_counter()
    r = call()
    elapsed = (time.perf_counter() - started) * 1000
    assert r.status_code == expected, r.text
    return elapsed


def wallet_auth(account: LocalAccount) -> dict[str, str]:
    return {"x-wallet-auth": sign_header(account.key.hex())}


def free_calls(url: str, calls: int) -> Timings:
    """The same calls on the free tier: the floor a paid call is compared with."""
    wallet = Account.create()
    timings = Timings()
    with httpx.Client(base_url=url, timeout=60) as http:
        for i in range(calls + WARM_UP):
            for route, (path, body) in ROUTES.items():
                payload = body(i)

                def call(path: str = path, payload: Any = payload) -> httpx.Response:
                    return http.post(path, json=payload, headers=wallet_auth(wallet))

                elapsed = timed(call, STATUS[route])
                if i >= WARM_UP:
                    timings.add(route, "free", elapsed)
    return timings


@dataclass
class Round:
    timings: Timings
    paid_calls: int  # every paid call, warm-up and deposit included
    transactions: Counter[str]  # mined meanwhile, by function (the payer's funding not counted)
    deposit_ms: float | None = None


def exact_calls(url: str, chain: DevChain, calls: int) -> Round:
    """Each call: its 402, then the call with a signed transfer, settled before it commits."""
    payer = Account.create()
    chain.fund(payer.address, 10**9, eth_wei=0)
    first_block = chain.w3.eth.block_number
    timings, paid = Timings(), 0
    with httpx.Client(base_url=url, timeout=60) as http:
        for i in range(calls + WARM_UP):
            for route, (path, body) in ROUTES.items():
                payload = body(i)

                def call(path: str = path, payload: Any = payload) -> httpx.Response:
                    r = http.post(path, json=payload, headers=wallet_auth(payer))
                    name, value = sign_proof(payer, offer_of(r))
                    return http.post(path, json=payload, headers={**wallet_auth(payer),
                                                                  name: value})  # fmt: skip

                elapsed = timed(call, STATUS[route])
                paid += 1
                if i >= WARM_UP:
                    timings.add(route, "402 + transfer", elapsed)
    # exact settles before its call commits, so every settlement is mined by now
    return Round(timings, paid, transactions_since(chain, first_block))


class ChannelPayer:
    """x402's stock Python client with its batch-settlement scheme, the deposit sized to
    `calls_per_deposit` calls (0: the client's default, the offer's minDeposit)."""

    def __init__(
        self, http: httpx.Client, network: str, account: LocalAccount, calls_per_deposit: int
    ) -> None:
        self.http = http
        self.account = account
        options = BatchSettlementEvmSchemeOptions(
            deposit_strategy=self._deposit if calls_per_deposit else None
        )
        self.calls_per_deposit = calls_per_deposit
        scheme = BatchSettlementEvmScheme(EthAccountSigner(account), options)
        self.client = x402HTTPClientSync(x402ClientSync().register(network, scheme))
        self.offers: dict[str, PaymentRequired] = {}  # per path, from its first 402

    def _deposit(self, context: BatchSettlementDepositStrategyContext) -> str:
        wanted = self.calls_per_deposit * int(context.request_amount)
        return str(max(wanted, int(context.minimum_deposit_amount)))

    def after_402(self, path: str, body: Any) -> httpx.Response:
        """The stock flow: the call, its 402, the call again with a voucher (or a deposit)."""
        r = self.http.post(path, json=body, headers=wallet_auth(self.account))
        assert r.status_code == 402, r.text
        required = self.client.get_payment_required_response(r.headers.get, r.content)
        assert isinstance(required, PaymentRequired)
        self.offers[path] = required
        return self._paid(path, body, required)

    def up_front(self, path: str, body: Any) -> httpx.Response:
        """The voucher sent with the call: the route's offer is known from its first 402."""
        return self._paid(path, body, self.offers[path])

    def _paid(self, path: str, body: Any, required: PaymentRequired) -> httpx.Response:
        payload = self.client.create_payment_payload(required)
        headers = self.client.encode_payment_signature_header(payload)
        r = self.http.post(path, json=body, headers={**wallet_auth(self.account), **headers})
        self.client.process_payment_result(payload, r.headers.get, r.status_code)
        return r


def batch_calls(url: str, chain: DevChain, calls: int, calls_per_deposit: int) -> Round:
    """The round's first call deposits; then, per route, the stock flow and the voucher sent
    with the call, alternated."""
    account = Account.create()
    chain.fund(account.address, 10**9, eth_wei=0)
    first_block = chain.w3.eth.block_number
    timings, paid = Timings(), 0
    with httpx.Client(base_url=url, timeout=60) as http:
        payer = ChannelPayer(http, chain.network, account, calls_per_deposit)
        path, body = ROUTES["store"]
        deposit_ms = timed(lambda: payer.after_402(path, body(-1)), STATUS["store"])
        paid += 1
        for i in range(calls + WARM_UP):
            for route, (path, body) in ROUTES.items():
                for flow, pay in (("402 + voucher", payer.after_402),
                                  ("voucher with the call", payer.up_front)):  # fmt: skip
                    payload = body(i)
                    elapsed = timed(lambda: pay(path, payload), STATUS[route])  # noqa: B023
                    paid += 1
                    if i >= WARM_UP:
                        timings.add(route, flow, elapsed)
    return Round(timings, paid, transactions_since(chain, first_block), deposit_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scheme", choices=("exact", "batch"), default="exact")
    parser.add_argument("--calls", type=int, default=40, help="timed calls per route and flow")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--code", type=Path, nargs="*", default=[PROJECT])
    parser.add_argument(
        "--block-time", type=int, default=0,
        help="seconds between blocks (0: anvil's automine, a block per transaction)",
    )  # fmt: skip
    parser.add_argument(
        "--calls-per-deposit", type=int, default=300,
        help="batch: a deposit covers this many calls (0: the client's default, the offer's "
        "minDeposit)",
    )  # fmt: skip
    args = parser.parse_args()
    with DevChain(chain_id=8453) as chain, tempfile.TemporaryDirectory() as tmp:
        chain.install_usdc()
        if args.scheme == "batch":
            chain.install_batch_settlement()
        servers, free_servers = {}, {}
        for n, code in enumerate(args.code):
            root, free_root = Path(tmp, f"code{n}"), Path(tmp, f"code{n}-free")
            root.mkdir()
            free_root.mkdir()
            servers[code] = serve(code, chain, root, args.scheme)
            free_servers[code] = serve(code, chain, free_root, args.scheme, free_calls=10**6)
        if args.block_time:
            chain.rpc("evm_setIntervalMining", [args.block_time])
        mining = f"a block every {args.block_time} s" if args.block_time else "automine"
        print(f"dev chain: {mining}; scheme {args.scheme}")
        try:
            totals = {code: Round(Timings(), 0, Counter()) for code in args.code}
            deposits: dict[Path, list[float]] = {code: [] for code in args.code}
            for round_ in range(args.rounds):
                for code, (_, url) in servers.items():
                    total = totals[code]
                    total.timings.merge(free_calls(free_servers[code][1], args.calls))
                    if args.scheme == "batch":
                        done = batch_calls(url, chain, args.calls, args.calls_per_deposit)
                    else:
                        done = exact_calls(url, chain, args.calls)
                    total.timings.merge(done.timings)
                    total.paid_calls += done.paid_calls
                    total.transactions.update(done.transactions)
                    if done.deposit_ms is not None:
                        deposits[code].append(done.deposit_ms)
                    print(f"round {round_ + 1} {code}: {done.paid_calls} paid calls,"
                          f" on-chain transactions {dict(done.transactions)}")  # fmt: skip
            for code, total in totals.items():
                report(code, total, deposits[code], args)
        finally:
            for proc, _ in [*servers.values(), *free_servers.values()]:
                proc.terminate()
                proc.wait(timeout=40)


def report(code: Path, total: Round, deposits: list[float], args: argparse.Namespace) -> None:
    print(f"{code} ({args.scheme}):")
    if deposits:
        each = ", ".join(f"{ms:.0f}" for ms in deposits)
        print(f"  the deposit call of each round (402 + deposit, mined): {each} ms")
    for route in ROUTES:
        free = total.timings.ms[(route, "free")]
        print(f"  {route:6} free tier: p50 {percentile(free, 0.5):.1f} ms,"
              f" p95 {percentile(free, 0.95):.1f} ms")  # fmt: skip
        for (of, flow), times in total.timings.ms.items():
            if of == route and flow != "free":
                ratio = percentile(times, 0.5) / percentile(free, 0.5)
                print(f"  {route:6} paid, {flow}: {fmt_ms(times)}; paid/free p50 {ratio:.2f}x")
    mined = sum(total.transactions.values())
    per_100 = 100 * mined / total.paid_calls
    sizing = (
        f"{args.calls_per_deposit} calls" if args.calls_per_deposit else "the offer's minDeposit"
    )
    deposit = f", a deposit of {sizing}" * (args.scheme == "batch")
    print(f"  on-chain transactions: {mined} for {total.paid_calls} paid calls"
          f" ({per_100:.2f} per 100 paid calls{deposit}): {dict(total.transactions)}")  # fmt: skip


def fmt_ms(values: list[float]) -> str:
    return (f"p50 {percentile(values, 0.5):.1f} ms, p95 {percentile(values, 0.95):.1f} ms"
            f" (n={len(values)})")  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if q != 0.5 else statistics.median(ordered)


if __name__ == "__main__":
    main()
