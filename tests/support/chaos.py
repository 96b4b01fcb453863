"""The chaos scenario's load and its bookkeeping, shared by tests/cli/test_chaos.py (short) and
bench/chaos.py (long): workers sending paid stores (a fresh x402 proof each, settled on a local
chain) and free one-item imports, phase by phase, every answer recorded; then a check of the
database and the chain that nothing acknowledged or paid was lost."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount

from app.auth.signature import sign_header
from app.dev.chain import DevChain
from tests.support.server import wait_healthy
from tests.support.x402 import offer_of, sign_proof

PRICE_ATOMIC = 5000  # $0.005, the store price
PAYER_FUNDS = 10**12
CLIENT_TIMEOUT_S = 60


@dataclass
class Answer:
    phase: str
    kind: str  # "paid_store" | "import"
    status: int  # 0: no HTTP answer (the connection failed)
    retry_after: bool
    replay: bool = False
    memory_id: str | None = None
    content: str | None = None
    body: str = ""


@dataclass
class PhaseStats:
    total: int = 0
    succeeded: int = 0
    unavailable_with_retry_after: int = 0
    statuses: Counter[int] = field(default_factory=Counter)


@dataclass
class Report:
    phases: dict[str, PhaseStats]
    server_errors: list[Answer]
    lost_writes: list[str]
    acknowledged_paid: int
    acknowledged_imports: int
    ledger_rows: int
    settled_on_chain: int
    health: dict[str, Counter[int]]

    @property
    def unrecorded_payments(self) -> int:
        """Transfers that reached the chain without a ledger row (money taken, nothing kept)."""
        return self.settled_on_chain - self.ledger_rows

    def summary(self) -> str:
        lines = [
            f"{name}: {s.total} calls, {s.succeeded} ok, {s.unavailable_with_retry_after} 503"
            f" with Retry-After, statuses {dict(s.statuses)}"
            for name, s in self.phases.items()
        ]
        lines += [f"/health during {name}: {dict(c)}" for name, c in self.health.items()]
        lines.append(
            f"acknowledged: {self.acknowledged_paid} paid stores, {self.acknowledged_imports}"
            f" imports; lost writes {len(self.lost_writes)}; ledger rows {self.ledger_rows},"
            f" transfers on chain {self.settled_on_chain}; 5xx other than 503:"
            f" {len(self.server_errors)}"
        )
        return "\n".join(lines)


class ChaosRun:
    def __init__(self, chain: DevChain) -> None:
        self.chain = chain
        self.payer: LocalAccount = Account.create()
        self.pay_to = str(Account.create().address)
        self.url = ""
        self.offer: dict[str, Any] = {}
        self.answers: list[Answer] = []
        self.health: dict[str, Counter[int]] = {}
        self._lock = threading.Lock()
        self._pay_to_before = 0
        self.last_paid: tuple[dict[str, Any], dict[str, str]] | None = None

    def server_env(self, dsn: str, redis_url: str) -> dict[str, str]:
        return {
            "ENGRAM_DATABASE_URL": dsn,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_FREE_TIER_CALLS": "0",  # every store pays
            "ENGRAM_RATE_LIMIT_PER_MINUTE": "1000000",  # counted (in Redis), never refused
            "ENGRAM_X402_PAY_TO": self.pay_to,
            "ENGRAM_X402_RPC_URL": self.chain.rpc_url,
            "ENGRAM_X402_RELAYER_KEY": self.chain.relayer.key.hex(),
        }

    def attach(self, url: str) -> None:
        """Fund the payer and read the server's offer (a 402), before any outage."""
        self.url = url
        self.chain.fund(self.payer.address, PAYER_FUNDS, eth_wei=0)
        self._pay_to_before = self.chain.usdc_balance(self.pay_to)
        r = httpx.post(f"{url}/v1/store", json={"content": "offer"}, headers=self._auth(),
                       timeout=CLIENT_TIMEOUT_S)  # fmt: skip
        assert r.status_code == 402, r.text
        self.offer = offer_of(r)

    def _auth(self) -> dict[str, str]:
        return {"x-wallet-auth": sign_header(self.payer.key.hex())}

    @contextlib.contextmanager
    def load(self, workers: int) -> Iterator[Load]:
        with ThreadPoolExecutor(workers) as pool:
            yield Load(self, pool, workers)

    def send(self, phase: str, client: httpx.Client, i: int) -> Answer:
        content = f"chaos {phase} {uuid.uuid4()}"
        kind = "paid_store" if i % 2 == 0 else "import"
        try:
            if kind == "paid_store":
                name, value = sign_proof(self.payer, self.offer)
                r = client.post("/v1/store", json={"content": content},
                                headers={**self._auth(), name: value})  # fmt: skip
            else:  # each from a wallet of its own: imports have a per-wallet rate limit
                importer = {"x-wallet-auth": sign_header(Account.create().key.hex())}
                r = client.post("/v1/import", json=[{"content": content}], headers=importer)
        except httpx.TransportError as exc:
            return Answer(phase, kind, 0, False, content=content, body=repr(exc))
        answer = Answer(
            phase, kind, r.status_code, "retry-after" in r.headers,
            replay=r.headers.get("x-idempotent-replay") == "true", content=content,
            body=r.text[:300],
        )  # fmt: skip
        if kind == "paid_store" and r.status_code == 201:
            answer.memory_id = r.json()["id"]
            self.last_paid = ({"content": content}, {name: value})
        return answer

    def replay_last_paid(self) -> httpx.Response:
        """The last acknowledged paid store, sent again with its proof: an idempotent replay."""
        assert self.last_paid is not None
        body, proof = self.last_paid
        return httpx.post(f"{self.url}/v1/store", json=body, headers={**self._auth(), **proof},
                          timeout=CLIENT_TIMEOUT_S)  # fmt: skip

    def record(self, answers: list[Answer]) -> None:
        with self._lock:
            self.answers.extend(answers)

    def verify(self, dsn: str) -> Report:
        return asyncio.run(self._verify(dsn))

    async def _verify(self, dsn: str) -> Report:
        acked_paid = [a for a in self.answers if a.kind == "paid_store" and a.status == 201]
        acked_imports = [a for a in self.answers if a.kind == "import" and a.status == 200]
        conn = await asyncpg.connect(dsn)
        try:
            wallet = self.payer.address.lower()
            rows = await conn.fetch(
                """SELECT id::text, content FROM memories
                   WHERE deleted_at IS NULL AND (user_id = $1 OR content = ANY($2::text[]))""",
                wallet, [a.content for a in acked_imports],
            )  # fmt: skip
            ledger = int(
                await conn.fetchval("SELECT count(*) FROM payments WHERE wallet = $1", wallet)
            )
        finally:
            await conn.close()
        # a store may be merged into a near-duplicate (its answer names that memory): by id;
        # an import keeps exact content: by content
        ids, contents = {r["id"] for r in rows}, {r["content"] for r in rows}
        lost = [f"store {a.memory_id}" for a in acked_paid if a.memory_id not in ids]
        lost += [f"import {a.content}" for a in acked_imports if a.content not in contents]
        settled = (self.chain.usdc_balance(self.pay_to) - self._pay_to_before) // PRICE_ATOMIC
        phases: dict[str, PhaseStats] = {}
        for a in self.answers:
            s = phases.setdefault(a.phase, PhaseStats())
            s.total += 1
            s.statuses[a.status] += 1
            s.succeeded += a.status in (200, 201)
            s.unavailable_with_retry_after += a.status == 503 and a.retry_after
        errors = [a for a in self.answers if a.status == 0 or (a.status >= 500 and a.status != 503)]
        return Report(
            phases, errors, lost, len(acked_paid), len(acked_imports), ledger, settled,
            self.health,
        )  # fmt: skip


class Load:
    def __init__(self, run: ChaosRun, pool: ThreadPoolExecutor, workers: int) -> None:
        self.run = run
        self.pool = pool
        self.workers = workers

    def phase(
        self,
        name: str,
        requests_per_worker: int,
        health_503: bool = False,
        during: Callable[[], None] | None = None,
    ) -> None:
        """`requests_per_worker` calls from each worker, all concurrently; `during` (an outage
        beginning) runs while they are in flight; /health is sampled after each call."""

        def worker(w: int) -> list[Answer]:
            with httpx.Client(base_url=self.run.url, timeout=CLIENT_TIMEOUT_S) as client:
                return [self.run.send(name, client, w + i) for i in range(requests_per_worker)]

        futures = [self.pool.submit(worker, w) for w in range(self.workers)]
        if during is not None:
            during()
        for f in futures:
            self.run.record(f.result())
        r = httpx.get(f"{self.run.url}/health", timeout=CLIENT_TIMEOUT_S)
        self.run.health.setdefault(name, Counter())[r.status_code] += 1
        if health_503:
            assert r.status_code == 503 and "retry-after" in r.headers, (name, r.text)

    def recover(self, name: str) -> None:
        wait_healthy(self.run.url)
