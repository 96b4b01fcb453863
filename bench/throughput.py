"""Throughput and latency of Engram over real HTTP, with the server in its own process.

`engram serve` runs in a subprocess (its own CPU loop, its own embedded PostgreSQL in a temporary
ENGRAM_DATA_DIR, free tier and overall rate limit out of the way). Each simulated client has its
own wallet; its signed header is reused until it is a minute old (headers are valid 300 s), as an
agent would.

The load: the closed-loop levels and the mix are driven by --load-procs spawned processes (default
half the usable cores, at least 1), each running its share of the clients on its own event loop
with its own httpx clients; they start together and send back their raw latencies, merged here
before any percentile is taken. One Python process tops out near one core (issue 40: 97 % of a
core at ~750 req/s on 16 cores, where the figure measured the generator, not Engram), so each
row gives every load process's CPU and the report warns above 70 % of a core. This process keeps
the wallet setup (warm-up, fill: the ids go down to the load processes and back) and the open
loop (one arrival schedule, a few hundred req/s). On a 2-core machine the default is one load
process: the same single event loop as before, only outside the bench process, so figures should
not move; on bigger machines the default spreads the clients and the mix can rise where the old
single-process generator was the limit. `--load-procs 0` runs the load in this process as before.
The gen cpu column sums this process and the load processes.

Scenarios (each a row: req/s, p50/p95/p99 latency, errors; plus the CPU each side used):

1. closed loop at 1, 4, 16, 64 clients: POST /v1/store (one memory), POST /v1/store/batch
   (100 memories), POST /v1/recall (k=5, a fresh query each time);
2. open loop: recall at fixed arrival rates; latency counts from the scheduled send time (no
   coordinated omission), arrivals beyond --max-in-flight outstanding requests are dropped;
3. the mix: 64 clients on wallets filled with 50 memories each, 30% GET /v1/memories?limit=20,
   30% GET /v1/memories/{id} (ids the client stored), 25% recall, 15% store.

Text is generated from word lists (no external data). Results go to bench/results/throughput.json
and, with matplotlib installed (`pip install -e '.[bench]'`), bench/results/throughput.png.
`--profile FILE` records the server during the mix with py-spy (`pip install py-spy`), as
collapsed stacks. On a small machine the server, PostgreSQL and the load generator share the
cores: the cpu column shows who used what (percent of one core).

Run: .venv/bin/python bench/throughput.py [--seconds 10] [--only store,batch,recall,open,mix]
     [--load-procs N]
Workers sweep (the mix on a fresh server per `engram serve --workers` count, req/s, p99 and the
scaling against 1 worker; bench/results/throughput-sweep.json):
     .venv/bin/python bench/throughput.py --workers-sweep 1,2,4,8 --seconds 6
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import multiprocessing.process
import os
import platform
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from eth_account import Account
from provenance import stamp  # bench/ is on the path: the scripts run from it

from app.auth.signature import sign_header

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "bench" / "results"
RESIGN_AFTER_SECONDS = 60  # headers are valid 300 s; re-sign well before
FILL_PER_WALLET = 50
BATCH_SIZE = 100
RECALL_K = 5
MIX = (("list", 0.30), ("get", 0.30), ("recall", 0.25), ("store", 0.15))
TARGETS = {"mix_req_s": 500.0, "mix_p99_ms": 150.0, "mix_errors": 0, "batch_100_ms": 300.0}
# Anything that would point the server somewhere other than its embedded defaults.
CLEARED_ENV = (
    "ENGRAM_DATABASE_URL", "ENGRAM_REDIS_URL", "OPENAI_API_KEY", "ENGRAM_EMBED_BASE_URL",
    "ENGRAM_EMBED_MODEL", "ENGRAM_EMBED_DIMS", "ENGRAM_LLM_BASE_URL", "ENGRAM_X402_PAY_TO",
    "ENGRAM_X402_FACILITATOR_URL", "ENGRAM_X402_RPC_URL", "ENGRAM_X402_RELAYER_KEY",
)  # fmt: skip

# ---- text -------------------------------------------------------------------------------------

NAMES = (
    "Alice", "Bruno", "Carmen", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal",
    "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma",
    "Viktor", "Wen", "Yara", "Zoe",
)  # fmt: skip
PREFERENCES = (
    "dark mode", "short answers", "bullet points", "tabs over spaces", "morning meetings",
    "async standups", "vim keybindings", "metric units", "plain text email", "large fonts",
    "green tea", "quiet rooms", "video calls off", "weekly digests", "detailed diffs",
)  # fmt: skip
ACTIVITIES = (
    "code reviews", "writing reports", "travel planning", "debugging", "reading papers",
    "budget reviews", "onboarding", "design sessions", "incident calls", "sprint planning",
    "customer demos", "release notes", "hiring interviews", "data analysis",
)  # fmt: skip
PROJECTS = (
    "Atlas", "Borealis", "Cobalt", "Driftwood", "Ember", "Falcon", "Granite", "Harbor", "Iris",
    "Juniper", "Kestrel", "Lighthouse", "Monsoon", "Nimbus", "Orchid", "Pioneer",
)  # fmt: skip
MILESTONES = ("beta launch", "security audit", "public release", "design freeze", "migration",
              "load test", "board review", "pilot", "code freeze", "price change")  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
REASONS = (
    "a supplier delay", "a failing integration test", "the holiday schedule",
    "legal feedback", "a performance regression", "a staffing change", "customer requests",
    "an outage in the payment provider", "a flaky CI runner", "new compliance rules",
)  # fmt: skip
RELATIONS = ("sister", "brother", "daughter", "son", "partner", "manager", "mother", "father",
             "flatmate", "colleague")  # fmt: skip
FOODS = ("peanuts", "shellfish", "gluten", "lactose", "sesame", "eggs", "soy", "kiwi",
         "strawberries", "mustard")  # fmt: skip
EVENTS = ("the team dinner", "the offsite", "the birthday party", "the conference",
          "the quarterly review", "the hackathon", "the wedding", "the retro")  # fmt: skip
TECH = (
    "PostgreSQL", "SQLite", "Redis", "Kafka", "RabbitMQ", "Rust", "Go", "TypeScript",
    "Terraform", "Kubernetes", "Nomad", "GraphQL", "gRPC", "DuckDB", "ClickHouse", "Elixir",
)  # fmt: skip
COMPONENTS = (
    "billing service", "search indexer", "login flow", "export job", "notification queue",
    "mobile app", "admin dashboard", "data pipeline", "cache layer", "webhook handler",
    "report generator", "upload API",
)  # fmt: skip
CONDITIONS = (
    "the input has emoji", "two users edit at once", "the token expires mid-request",
    "the file is larger than 2 GB", "the clock skews", "the queue is empty",
    "the locale is Turkish", "the network drops for a second", "a retry overlaps",
)  # fmt: skip
CITIES = ("Lisbon", "Nairobi", "Osaka", "Toronto", "Tallinn", "Bogota", "Melbourne", "Accra",
          "Krakow", "Seoul", "Porto", "Montreal", "Hanoi", "Reykjavik")  # fmt: skip
COMPANIES = ("a logistics startup", "a hospital", "a bank", "a game studio", "a university",
             "a design agency", "a robotics lab", "a newspaper")  # fmt: skip
TASKS = ("the passport renewal", "the dentist appointment", "watering the plants",
         "the tax filing", "backing up the laptop", "the gym class", "paying rent",
         "the car service", "calling grandma", "renewing the domain")  # fmt: skip
PERIODS = ("week", "month", "Friday", "morning", "quarter", "evening", "other day")
TOPICS = ("market news", "open pull requests", "the error budget", "competitor launches",
          "support tickets", "cloud spend", "research papers", "team morale")  # fmt: skip
LANGUAGES = ("English", "Portuguese", "Japanese", "Spanish", "German", "French", "Korean")

# (memory type, template); each slot draws from the list of the same name.
TEMPLATES = (
    ("preference", "{name} prefers {preference} for {activity}."),
    ("project", "The {project} project moved its {milestone} to {weekday} because of {reason}."),
    ("correction", "{name}'s {relation} is allergic to {food}, so avoid it at {event}."),
    ("decision", "We decided to use {tech} instead of {tech2} for the {component} after {reason}."),
    ("observation", "The {component} in {project} fails when {condition}."),
    ("general", "{name} asked to be reminded about {task} every {period}."),
    ("correction", "Correction: the {project} budget is {number} dollars, not {number2}."),
    ("general", "{name} lives in {city} and works at {company} on {weekday}s."),
    ("observation", "{name} usually answers messages about {activity} on {weekday} {period}s."),
    ("preference", "{name} wants {period}ly summaries of {topic} in {language}."),
    ("project", "{name} owns the {component} of {project} until the {milestone}."),
    ("decision", "For {activity} we agreed that {name} decides and {name2} reviews."),
)
QUERIES = (
    "what does {name} prefer for {activity}?",
    "when is the {project} {milestone}?",
    "which food is {name}'s {relation} allergic to?",
    "why did we pick {tech} for the {component}?",
    "known bugs in the {component} of {project}",
    "where does {name} live and work?",
    "what should I remind {name} about?",
    "what is the budget of {project}?",
    "how does {name} like summaries of {topic}?",
    "who owns the {component}?",
    "{tech} versus {tech2} decision",
    "plans around {event} and {food}",
)
SLOTS: dict[str, tuple[str, ...]] = {
    "name": NAMES, "name2": NAMES, "preference": PREFERENCES, "activity": ACTIVITIES,
    "project": PROJECTS, "milestone": MILESTONES, "weekday": WEEKDAYS, "reason": REASONS,
    "relation": RELATIONS, "food": FOODS, "event": EVENTS, "tech": TECH, "tech2": TECH,
    "component": COMPONENTS, "condition": CONDITIONS, "city": CITIES, "company": COMPANIES,
    "task": TASKS, "period": PERIODS, "topic": TOPICS, "language": LANGUAGES,
}  # fmt: skip
SLOT_RE = re.compile(r"\{(\w+)\}")


def _fill(template: str, rng: random.Random) -> tuple[str, list[str]]:
    used: list[str] = []

    def pick(match: re.Match[str]) -> str:
        slot = match.group(1)
        if slot.startswith("number"):
            return f"{rng.randrange(1, 500) * 1000:,}"
        value = rng.choice(SLOTS[slot])
        used.append(value)
        return value

    return SLOT_RE.sub(pick, template), used


def memory_body(rng: random.Random) -> dict[str, Any]:
    memory_type, template = rng.choice(TEMPLATES)
    content, used = _fill(template, rng)
    if rng.random() < 0.4:  # some longer memories, as agents write them
        extra, more = _fill(rng.choice(TEMPLATES)[1], rng)
        content, used = f"{content} Also: {extra}", used + more
    tags = sorted({v.lower().replace(" ", "-") for v in used[:3] if len(v) <= 64})
    return {
        "content": content,
        "memory_type": memory_type,
        "importance": round(rng.uniform(0.2, 1.0), 2),
        "tags": tags,
    }


def recall_query(rng: random.Random) -> str:
    return _fill(rng.choice(QUERIES), rng)[0]


# ---- wallets and requests ---------------------------------------------------------------------


@dataclass
class Wallet:
    key: str
    ids: list[str] = field(default_factory=list)
    _header: str = ""
    _signed_at: float = -1e9

    @classmethod
    def create(cls) -> Wallet:
        return cls(key=Account.create().key.hex())

    def headers(self) -> dict[str, str]:
        now = time.time()
        if now - self._signed_at > RESIGN_AFTER_SECONDS:
            self._header = sign_header(self.key, int(now))
            self._signed_at = now
        return {"x-wallet-auth": self._header}

    def take_state(self, other: Wallet) -> None:
        """Adopt what a load process's copy of this wallet learnt: the ids it stored (later
        scenarios GET them) and its signed header."""
        self.ids, self._header, self._signed_at = other.ids, other._header, other._signed_at


@dataclass
class Samples:
    """Latencies (seconds) by operation, and failures by kind."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    deduplicated: int = 0
    dropped: int = 0
    max_send_lag: float = 0.0

    def add(self, op: str, seconds: float, error: str | None) -> None:
        self.latencies.setdefault(op, []).append(seconds)
        if error is not None:
            self.errors[f"{op}: {error}"] += 1

    def all(self) -> list[float]:
        return [s for values in self.latencies.values() for s in values]

    def merge(self, other: Samples) -> None:
        """Add another process's raw samples: percentiles are then taken over the union, never
        averaged across processes."""
        for op, values in other.latencies.items():
            self.latencies.setdefault(op, []).extend(values)
        self.errors.update(other.errors)
        self.deduplicated += other.deduplicated
        self.dropped += other.dropped
        self.max_send_lag = max(self.max_send_lag, other.max_send_lag)


class Load:
    """One httpx client and the samples its requests feed."""

    def __init__(self, client: httpx.AsyncClient, samples: Samples) -> None:
        self.client = client
        self.samples = samples

    async def request(
        self,
        op: str,
        method: str,
        url: str,
        wallet: Wallet,
        expect: int,
        started: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Send, time (from `started` when given: the scheduled send time), return the JSON body
        or None on failure."""
        started = time.perf_counter() if started is None else started
        try:
            response = await self.client.request(method, url, headers=wallet.headers(), **kwargs)
        except httpx.HTTPError as exc:
            self.samples.add(op, time.perf_counter() - started, type(exc).__name__)
            return None
        elapsed = time.perf_counter() - started
        if response.status_code != expect:
            self.samples.add(op, elapsed, f"HTTP {response.status_code}")
            return None
        self.samples.add(op, elapsed, None)
        return response.json()


Op = Callable[[Load, Wallet, random.Random, float | None], Awaitable[None]]


async def op_store(load: Load, wallet: Wallet, rng: random.Random, at: float | None) -> None:
    body = await load.request("store", "POST", "/v1/store", wallet, 201, at, json=memory_body(rng))
    if body is not None:
        if body["deduplicated"]:
            load.samples.deduplicated += 1
        else:
            wallet.ids.append(body["id"])


async def op_batch(load: Load, wallet: Wallet, rng: random.Random, at: float | None) -> None:
    memories = [memory_body(rng) for _ in range(BATCH_SIZE)]
    body = await load.request(
        "batch", "POST", "/v1/store/batch", wallet, 201, at, json={"memories": memories}
    )
    if body is not None:
        load.samples.deduplicated += body["deduplicated_count"]
        wallet.ids.extend(body["ids"])


async def op_recall(load: Load, wallet: Wallet, rng: random.Random, at: float | None) -> None:
    query = {"query": recall_query(rng), "limit": RECALL_K}
    await load.request("recall", "POST", "/v1/recall", wallet, 200, at, json=query)


async def op_list(load: Load, wallet: Wallet, rng: random.Random, at: float | None) -> None:
    await load.request("list", "GET", "/v1/memories", wallet, 200, at, params={"limit": 20})


async def op_get(load: Load, wallet: Wallet, rng: random.Random, at: float | None) -> None:
    if not wallet.ids:
        return await op_list(load, wallet, rng, at)
    memory_id = rng.choice(wallet.ids)
    await load.request("get", "GET", f"/v1/memories/{memory_id}", wallet, 200, at)


async def op_mix(load: Load, wallet: Wallet, rng: random.Random, at: float | None) -> None:
    x = rng.random()
    ops = {"list": op_list, "get": op_get, "recall": op_recall, "store": op_store}
    for name, share in MIX:
        if x < share:
            return await ops[name](load, wallet, rng, at)
        x -= share
    return await op_store(load, wallet, rng, at)


# ---- load shapes ------------------------------------------------------------------------------


async def closed_loop(
    clients: list[httpx.AsyncClient],
    op: Op,
    wallets: list[Wallet],
    seconds: float,
    seed: int,
    first: int = 0,
) -> tuple[Samples, float]:
    """len(wallets) clients, each sending its next request when the last one is answered.
    `first` is the index of wallets[0] among all the scenario's clients: a client draws the same
    texts whichever load process runs it."""
    samples = Samples()
    deadline = time.perf_counter() + seconds

    async def client_loop(i: int) -> None:
        rng = random.Random(seed * 1000 + first + i)
        load = Load(clients[i], samples)
        while time.perf_counter() < deadline:
            await op(load, wallets[i], rng, None)

    started = time.perf_counter()
    await asyncio.gather(*(client_loop(i) for i in range(len(wallets))))
    return samples, time.perf_counter() - started


async def open_loop(
    clients: list[httpx.AsyncClient],
    op: Op,
    wallets: list[Wallet],
    rate: float,
    seconds: float,
    seed: int,
) -> tuple[Samples, float]:
    """Requests sent at a fixed rate whatever the answers do, each on a free connection; an
    arrival that finds all len(clients) connections busy is dropped."""
    samples = Samples()
    rng = random.Random(seed)
    idle = list(clients)
    in_flight: set[asyncio.Task[None]] = set()

    async def send(client: httpx.AsyncClient, wallet: Wallet, at: float) -> None:
        try:
            await op(Load(client, samples), wallet, rng, at)
        finally:
            idle.append(client)

    started = time.perf_counter() + 0.05
    for i in range(round(rate * seconds)):
        at = started + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        samples.max_send_lag = max(samples.max_send_lag, time.perf_counter() - at)
        if not idle:
            samples.dropped += 1
            continue
        task = asyncio.create_task(send(idle.pop(), wallets[i % len(wallets)], at))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    await asyncio.gather(*in_flight)
    return samples, time.perf_counter() - started


# ---- load processes ---------------------------------------------------------------------------

# One client with one connection per simulated client: a single httpx client sharing a pool of
# 64+ connections costs ~5x more generator CPU per request. Idle connections are dropped before
# uvicorn's 5 s keep-alive timeout closes them, so a request never races a server-side close (a
# ReadError that is the client's doing).
CLIENT_LIMITS = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=3)
OPS: dict[str, Op] = {"store": op_store, "batch": op_batch, "recall": op_recall, "mix": op_mix}
# A load process above this share of one core may be what limits the figure, not the server.
GENERATOR_WARN_PERCENT = 70.0
# How long the parent lets every process reach the common start time after all are ready.
START_MARGIN_SECONDS = 0.05


async def open_clients(
    stack: contextlib.AsyncExitStack, url: str, request_timeout: float, n: int
) -> list[httpx.AsyncClient]:
    """n clients of one connection each, closed with the stack."""
    return [
        await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, timeout=request_timeout, limits=CLIENT_LIMITS)
        )
        for _ in range(n)
    ]


def default_load_procs() -> int:
    """Half the cores this process may run on, at least one.

    The generator costs ~1.3 ms of CPU per request (97 % of one core at 756 req/s in issue 40)
    against 3.5 ms or more of server and PostgreSQL CPU, so when the server saturates every core
    the generator needs at most ~27 % of the machine: spread over half the cores as processes,
    each stays near 55 % of one core, under the 70 % warning."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // 2)


@dataclass
class Prepare:
    """Open n clients to url in each load process, before any scenario's window."""

    url: str
    timeout: float
    n: int


class Clients:
    """A load process's httpx clients, kept from one job to the next: building one costs tens of
    milliseconds of CPU (its TLS context, even for http://), which must not land inside a
    scenario's window."""

    def __init__(self) -> None:
        self.key: tuple[str, float] | None = None
        self.stack = contextlib.AsyncExitStack()
        self.clients: list[httpx.AsyncClient] = []

    async def get(self, url: str, request_timeout: float, n: int) -> list[httpx.AsyncClient]:
        if self.key != (url, request_timeout):  # a new server (the workers sweep)
            await self.close()
            self.key = (url, request_timeout)
        if len(self.clients) < n:
            self.clients += await open_clients(
                self.stack, url, request_timeout, n - len(self.clients)
            )
        return self.clients[:n]

    async def close(self) -> None:
        await self.stack.aclose()
        self.stack, self.clients, self.key = contextlib.AsyncExitStack(), [], None


@dataclass
class LoadJob:
    """One load process's share of a closed-loop scenario."""

    url: str
    timeout: float
    op: str  # a key of OPS
    wallets: list[Wallet]
    first: int  # index of wallets[0] among the scenario's clients (seeds its texts)
    seconds: float
    seed: int


@dataclass
class LoadShare:
    """What a load process sends back: its raw samples (summarised only once merged), its copies
    of the wallets, when it ran (time.monotonic(): one clock for every process of the machine),
    and the CPU it used meanwhile."""

    samples: Samples
    wallets: list[Wallet]
    started: float
    ended: float
    cpu_seconds: float

    @property
    def cpu_percent(self) -> float:
        """Percent of one core over this process's run."""
        return round(100 * self.cpu_seconds / max(self.ended - self.started, 1e-9), 1)


def _cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


async def _run_share(job: LoadJob, conn: Connection, cache: Clients) -> LoadShare:
    """Take the share's clients, say ready, start at the time the parent sends, run the loop."""
    clients = await cache.get(job.url, job.timeout, len(job.wallets))
    conn.send(("ready", None))
    start_at: float = await asyncio.to_thread(conn.recv)
    await asyncio.sleep(max(start_at - time.monotonic(), 0.0))
    me = psutil.Process()
    cpu_before, started = _cpu_seconds(me), time.monotonic()
    samples, _ = await closed_loop(
        clients, OPS[job.op], job.wallets, job.seconds, job.seed, job.first
    )
    ended, cpu = time.monotonic(), _cpu_seconds(me) - cpu_before
    return LoadShare(samples, job.wallets, started, ended, cpu)


def load_process(conn: Connection) -> None:
    """A load process's main: run what it is sent on one event loop (its clients live from job
    to job) until it is sent None."""
    cache = Clients()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        try:
            while (job := conn.recv()) is not None:
                if isinstance(job, Prepare):
                    runner.run(cache.get(job.url, job.timeout, job.n))
                    conn.send(("prepared", None))
                else:
                    conn.send(("done", runner.run(_run_share(job, conn, cache))))
        except Exception:
            conn.send(("error", traceback.format_exc()))
        finally:
            runner.run(cache.close())


class LoadPool:
    """N spawned load processes, started once and reused by every closed-loop scenario. A
    single Python process tops out near one core of generator CPU (issue 40 measured 97 % at
    ~750 req/s): beyond that its figure is the generator's, not the server's."""

    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[multiprocessing.process.BaseProcess] = []
        for i in range(size):
            ours, theirs = context.Pipe()
            proc = context.Process(
                target=load_process, args=(theirs,), name=f"engram-load-{i}", daemon=True
            )
            proc.start()
            theirs.close()
            self.conns.append(ours)
            self.procs.append(proc)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def prepare(self, url: str, timeout: float, clients: int) -> None:
        """Open, in each process, the clients its largest share of `clients` will need."""
        per_process = -(-clients // len(self.conns))
        for conn in self.conns:
            conn.send(Prepare(url, timeout, per_process))
        for conn in self.conns:
            self._receive(conn, "prepared")

    def run(
        self, url: str, timeout: float, op: str, wallets: list[Wallet], seconds: float, seed: int
    ) -> tuple[Samples, float, list[float]]:
        """Split the clients over the processes, start them together, merge what they measured:
        (samples, elapsed seconds from the first start to the last answer, CPU % per process)."""
        n = min(len(self.conns), len(wallets))
        bounds = [len(wallets) * k // n for k in range(n + 1)]
        shares = list(zip(self.conns[:n], bounds, bounds[1:], strict=False))
        for conn, lo, hi in shares:
            conn.send(LoadJob(url, timeout, op, wallets[lo:hi], lo, seconds, seed))
        for conn, _, _ in shares:
            self._receive(conn, "ready")
        start_at = time.monotonic() + START_MARGIN_SECONDS
        for conn, _, _ in shares:
            conn.send(start_at)
        results: list[LoadShare] = [self._receive(conn, "done") for conn, _, _ in shares]
        merged = Samples()
        for (_, lo, _), share in zip(shares, results, strict=True):
            merged.merge(share.samples)
            for mine, theirs in zip(wallets[lo:], share.wallets, strict=False):
                mine.take_state(theirs)
        elapsed = max(r.ended for r in results) - min(r.started for r in results)
        return merged, elapsed, [r.cpu_percent for r in results]

    def _receive(self, conn: Connection, expected: str) -> Any:
        kind, payload = conn.recv()
        if kind != expected:
            raise SystemExit(f"a load process failed:\n{payload}")
        return payload

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()


@contextlib.contextmanager
def load_pool(size: int) -> Iterator[LoadPool | None]:
    """--load-procs processes; 0: none, the load runs in this process as it once did."""
    pool = LoadPool(size) if size > 0 else None
    try:
        yield pool
    finally:
        if pool is not None:
            pool.close()


# ---- the server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """`engram serve` in a subprocess on a temporary data directory, output in a file."""

    def __init__(
        self,
        root: Path,
        port: int,
        pool_max: int | None,
        command: str | None = None,
        workers: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workers = workers
        self.env = env or {}
        self.root = root
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = root / "server.log"
        self.pool_max = pool_max
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> None:
        env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
        env.update(
            ENGRAM_DATA_DIR=str(self.root),
            ENGRAM_FREE_TIER_CALLS="10000000",
            ENGRAM_RATE_LIMIT_PER_MINUTE="0",
        )
        if self.pool_max:
            env["ENGRAM_DB_POOL_MAX"] = str(self.pool_max)
        env.update(self.env)
        engram = Path(sys.executable).parent / "engram"
        command = [str(engram)] if engram.exists() else [sys.executable, "-m", "app"]
        if self.command:
            command = shlex.split(self.command)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [*command, "serve", "--port", str(self.port), "--workers", str(self.workers)],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=PROJECT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"engram serve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"no /health from engram serve in {timeout} s:\n{self.tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # stops uvicorn, then the embedded PostgreSQL
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def postgres_pid(self) -> int | None:
        pid_file = self.root / "pgdata" / "postmaster.pid"
        try:
            return int(pid_file.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


class CpuMeter:
    """CPU seconds between two readings, by who used them: the server's event-loop thread, its
    other threads (the embedder's worker and onnxruntime's pool: embedding), PostgreSQL
    (postmaster and backends), the load generator (this process and its load processes), and
    anything else on the machine."""

    def __init__(
        self, server_pid: int, postgres_pid: int | None, load_pids: Sequence[int] = ()
    ) -> None:
        self.server = psutil.Process(server_pid)
        self.postgres = psutil.Process(postgres_pid) if postgres_pid else None
        self.generator = [psutil.Process(), *(psutil.Process(pid) for pid in load_pids)]

    def _server_processes(self) -> list[psutil.Process]:
        """The serve process and, with --workers, its uvicorn worker processes."""
        children = self.server.children(recursive=True)
        return [self.server, *(c for c in children if c.name() not in ("postgres", "pg_ctl"))]

    @staticmethod
    def _used(proc: psutil.Process) -> float:
        return _cpu_seconds(proc)

    def reading(self) -> dict[str, Any]:
        pg: dict[int, float] = {}
        if self.postgres is not None:
            for proc in [self.postgres, *self.postgres.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    pg[proc.pid] = self._used(proc)
        server = loop = 0.0
        for proc in self._server_processes():
            with contextlib.suppress(psutil.Error):
                server += self._used(proc)
                loop += sum(t.user_time + t.system_time for t in proc.threads() if t.id == proc.pid)
        generator = 0.0
        for proc in self.generator:
            with contextlib.suppress(psutil.Error):
                generator += self._used(proc)
        machine = psutil.cpu_times()
        return {
            "server": server,
            "loop": loop,
            "postgres": pg,
            "generator": generator,
            "busy": sum(machine) - machine.idle - getattr(machine, "iowait", 0.0),
            "at": time.perf_counter(),
        }

    @staticmethod
    def seconds(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
        """CPU seconds used by each party, and the wall time, between two readings."""
        pg = sum(v - before["postgres"].get(pid, 0.0) for pid, v in after["postgres"].items())
        server = after["server"] - before["server"]
        loop = after["loop"] - before["loop"]
        ours = server + pg + after["generator"] - before["generator"]
        return {
            "wall": after["at"] - before["at"],
            "server_loop": loop,
            "server_threads": max(server - loop, 0.0),
            "postgres": pg,
            "generator": after["generator"] - before["generator"],
            "other": max(after["busy"] - before["busy"] - ours, 0.0),
        }

    async def quiesce(self, limit: float) -> float:
        """Wait until the server is idle (work of requests its clients gave up on goes on after
        they leave); returns how long that took."""
        started = time.perf_counter()
        while time.perf_counter() - started < limit:
            before = self.reading()["server"]
            await asyncio.sleep(0.5)
            if self.reading()["server"] - before < 0.05:
                break
        return time.perf_counter() - started


# ---- figures ----------------------------------------------------------------------------------


def _ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1e3, 1) if values else float("nan")


def summarise(
    scenario: str,
    mode: str,
    concurrency: int | None,
    rate: float | None,
    samples: Samples,
    elapsed: float,
    cpu: dict[str, float],
) -> dict[str, Any]:
    """One row of figures; `cpu` is CpuMeter.seconds() over the scenario."""
    every = samples.all()
    parties = ("server_loop", "server_threads", "postgres", "generator", "other")
    row: dict[str, Any] = {
        "scenario": scenario,
        "mode": mode,
        "concurrency": concurrency,
        "offered_rate": rate,
        "seconds": round(elapsed, 2),
        "requests": len(every),
        "req_s": round(len(every) / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": _ms(every, 50),
        "p95_ms": _ms(every, 95),
        "p99_ms": _ms(every, 99),
        "errors": sum(samples.errors.values()),
        "error_kinds": dict(samples.errors),
        "dropped": samples.dropped,
        "deduplicated": samples.deduplicated,
        # percent of one core over the scenario's wall time, and CPU ms per request served
        "cpu_percent": {k: round(100 * cpu[k] / cpu["wall"], 1) for k in parties},
        "cpu_ms_per_request": {k: round(1e3 * cpu[k] / max(len(every), 1), 2) for k in parties[:3]},
    }
    if mode == "open":
        row["max_send_lag_ms"] = round(samples.max_send_lag * 1e3, 1)
    if len(samples.latencies) > 1:
        row["by_op"] = {
            op: {"requests": len(v), "p50_ms": _ms(v, 50), "p95_ms": _ms(v, 95),
                 "p99_ms": _ms(v, 99)}
            for op, v in sorted(samples.latencies.items())
        }  # fmt: skip
    return row


def note_generator(row: dict[str, Any], procs: int, percents: list[float]) -> None:
    """Record each load process's CPU (percent of one core over the run; procs 0: the load ran
    in this process) and whether any passed GENERATOR_WARN_PERCENT."""
    row["load_procs"] = procs
    row["load_cpu_percent"] = percents
    row["load_cpu_max_percent"] = max(percents, default=0.0)
    row["generator_bound"] = row["load_cpu_max_percent"] > GENERATOR_WARN_PERCENT


def processes(n: int) -> str:
    """How many load processes, in words (0: the load ran in the bench process)."""
    return f"{n} load process{'es' if n > 1 else ''}" if n else "the bench process"


def generator_warning(row: dict[str, Any]) -> str:
    who = "a load process" if row["load_procs"] else "the bench process"
    return (
        f"WARNING: {who} used {row['load_cpu_max_percent']:.0f}% of one core in"
        f" {row['scenario']} at {row['concurrency']} clients (over"
        f" {GENERATOR_WARN_PERCENT:.0f}%): the load generator may be the bottleneck;"
        " raise --load-procs"
    )


HEADER = (
    f"{'scenario':14s} {'clients':>8s} {'req/s':>8s} {'p50 ms':>8s} {'p95 ms':>8s}"
    f" {'p99 ms':>8s} {'errors':>7s}  cpu%: loop  emb   pg  gen other"
)
CPU_NOTE = (
    "cpu% is percent of one core: loop = the server's event-loop thread, emb = its other threads"
    " (embedding worker and onnxruntime pool), pg = PostgreSQL, gen = the load generator (this"
    " process and its --load-procs processes, summed), other = everything else on the machine"
)


def format_row(row: dict[str, Any]) -> str:
    load = f"@{row['offered_rate']:g}/s" if row["mode"] == "open" else str(row["concurrency"])
    errors = str(row["errors"]) + (f"+{row['dropped']}d" if row["dropped"] else "")
    cpu = row["cpu_percent"]
    return (
        f"{row['scenario']:14s} {load:>8s} {row['req_s']:8.1f} {row['p50_ms']:8.1f}"
        f" {row['p95_ms']:8.1f} {row['p99_ms']:8.1f} {errors:>7s}       "
        + " ".join(
            f"{cpu[k]:4.0f}"
            for k in ("server_loop", "server_threads", "postgres", "generator", "other")
        )
    )


def details(row: dict[str, Any]) -> list[str]:
    lines = []
    for op, s in (row.get("by_op") or {}).items():
        lines.append(
            f"    {op:10s} {s['requests']:6d} req  p50 {s['p50_ms']:7.1f}"
            f"  p95 {s['p95_ms']:7.1f}  p99 {s['p99_ms']:7.1f} ms"
        )
    if row["error_kinds"]:
        lines.append(f"    errors: {row['error_kinds']}")
    if row["mode"] == "open":
        lines.append(
            f"    offered {row['offered_rate']:g}/s, dropped {row['dropped']},"
            f" generator send lag max {row['max_send_lag_ms']:.1f} ms"
        )
    if row["deduplicated"]:
        lines.append(f"    deduplicated by the server: {row['deduplicated']}")
    if "load_procs" in row:
        where = processes(row["load_procs"])
        each = ", ".join(f"{p:.0f}" for p in row["load_cpu_percent"])
        lines.append(f"    load generator: {where}, cpu% of one core each: {each}")
        if row["generator_bound"]:
            lines.append("    " + generator_warning(row))
    per = row["cpu_ms_per_request"]
    lines.append(
        f"    cpu per request: server loop {per['server_loop']:.1f} ms, embedding threads"
        f" {per['server_threads']:.1f} ms, postgres {per['postgres']:.1f} ms"
    )
    if row.get("server_drain_s"):
        lines.append(
            f"    server still busy {row['server_drain_s']:.1f} s after the scenario ended"
            " (requests its clients had given up on)"
        )
    return lines


def targets(rows: list[dict[str, Any]]) -> list[str]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = []
    mix = next((r for r in rows if r["scenario"] == "mix"), None)
    if mix is not None:
        lines += [
            f"mix req/s     {mix['req_s']:8.1f}   target >= {TARGETS['mix_req_s']:g}:"
            f" {verdict(mix['req_s'] >= TARGETS['mix_req_s'])}",
            f"mix p99       {mix['p99_ms']:8.1f} ms target <= {TARGETS['mix_p99_ms']:g} ms:"
            f" {verdict(mix['p99_ms'] <= TARGETS['mix_p99_ms'])}",
            f"mix errors    {mix['errors']:8d}    target 0:"
            f" {verdict(mix['errors'] == TARGETS['mix_errors'])}",
        ]
    batch = next((r for r in rows if r["scenario"] == "store_batch100" and
                  r["concurrency"] == 1), None)  # fmt: skip
    if batch is not None:
        limit = TARGETS["batch_100_ms"]
        lines.append(
            f"batch of 100  p50 {batch['p50_ms']:.1f} ms, p99 {batch['p99_ms']:.1f} ms (1 client)"
            f"   target <= {limit:g} ms: p50 {verdict(batch['p50_ms'] <= limit)},"
            f" p99 {verdict(batch['p99_ms'] <= limit)}"
        )
    bound = [r for r in rows if r.get("generator_bound")]
    if bound:
        lines += [generator_warning(r) for r in bound]
    busy = [r for r in rows if r["cpu_percent"]["other"] > 25]
    if busy:
        worst = max(r["cpu_percent"]["other"] for r in busy)
        lines.append(
            f"caution: other processes used up to {worst:.0f}% of a core during {len(busy)}"
            " scenario(s) (cpu column 'other'): those figures are lower than this machine can do"
        )
    return lines


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    series = (
        ("store", "o", "store"),
        ("store_batch100", "s", "store_batch100 (batches of 100)"),
        ("recall", "^", "recall"),
    )
    for scenario, marker, label in series:
        closed = [r for r in rows if r["scenario"] == scenario and r["mode"] == "closed"]
        if not closed:
            continue
        xs = [r["concurrency"] for r in closed]
        left.plot(xs, [r["req_s"] for r in closed], marker=marker, label=label)
        right.plot(xs, [r["p99_ms"] for r in closed], marker=marker, label=label)
    for r in rows:
        if r["scenario"] == "mix":
            left.plot([r["concurrency"]], [r["req_s"]], "k*", markersize=14, label="mix")
            right.plot([r["concurrency"]], [r["p99_ms"]], "k*", markersize=14, label="mix")
    left.axhline(TARGETS["mix_req_s"], color="grey", linestyle="--", label="mix target")
    right.axhline(TARGETS["mix_p99_ms"], color="grey", linestyle="--", label="mix p99 target")
    right.axhline(TARGETS["batch_100_ms"], color="grey", linestyle=":", label="batch target")
    for ax, label in ((left, "requests/s"), (right, "p99 latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 4, 16, 64], ["1", "4", "16", "64"])
        ax.set_xlabel("concurrent clients (closed loop)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---- the run ----------------------------------------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    server: Server
    meter: CpuMeter
    clients: list[httpx.AsyncClient]
    pool: LoadPool | None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        print(format_row(row), flush=True)
        for line in details(row):
            print(line, flush=True)

    async def closed(self, scenario: str, op: str, wallets: list[Wallet], seconds: float) -> None:
        """A closed-loop level, its clients driven by the load processes (or, without any, by
        this process)."""
        before = self.meter.reading()
        # Each scenario and level draws its own texts: no accidental repeats of an earlier run's.
        seed = zlib.crc32(f"{scenario}/{len(wallets)}".encode())
        if self.pool is None:
            samples, elapsed = await closed_loop(self.clients, OPS[op], wallets, seconds, seed)
        else:
            url, timeout = self.server.url, self.args.timeout
            samples, elapsed, load_cpu = await asyncio.to_thread(
                self.pool.run, url, timeout, op, wallets, seconds, seed
            )
        cpu = CpuMeter.seconds(before, self.meter.reading())
        row = summarise(scenario, "closed", len(wallets), None, samples, elapsed, cpu)
        if self.pool is None:
            note_generator(row, 0, [row["cpu_percent"]["generator"]])
        else:
            note_generator(row, len(load_cpu), load_cpu)
        await self.settle(row)

    async def open(self, scenario: str, op: Op, wallets: list[Wallet], rate: float) -> None:
        before = self.meter.reading()
        clients = self.clients[: self.args.max_in_flight]
        samples, elapsed = await open_loop(
            clients, op, wallets, rate, self.args.seconds, seed=int(rate)
        )
        cpu = CpuMeter.seconds(before, self.meter.reading())
        row = summarise(scenario, "open", None, rate, samples, elapsed, cpu)
        # The open loop's arrivals come from one schedule in this process; at its rates (a few
        # hundred per second) that process is far from a core, and its send lag says if not.
        note_generator(row, 0, [row["cpu_percent"]["generator"]])
        await self.settle(row)

    async def settle(self, row: dict[str, Any]) -> None:
        """Record the row once the server has finished what the scenario left it."""
        drained = await self.meter.quiesce(self.args.timeout + 60)
        if drained > 1.0:
            row["server_drain_s"] = round(drained, 1)
        self.record(row)


async def fill(clients: list[httpx.AsyncClient], wallets: list[Wallet], per_wallet: int) -> str:
    samples = Samples()
    idle: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
    for client in clients[:8]:  # 8 batches at a time
        idle.put_nowait(client)

    async def one(i: int, wallet: Wallet) -> None:
        rng = random.Random(10_000 + i)
        memories = [memory_body(rng) for _ in range(per_wallet)]
        client = await idle.get()
        try:
            body = await Load(client, samples).request(
                "fill", "POST", "/v1/store/batch", wallet, 201, json={"memories": memories}
            )
        finally:
            idle.put_nowait(client)
        if body is not None:
            wallet.ids.extend(body["ids"])
            samples.deduplicated += body["deduplicated_count"]

    started = time.perf_counter()
    await asyncio.gather(*(one(i, w) for i, w in enumerate(wallets)))
    elapsed = time.perf_counter() - started
    if samples.errors:
        raise SystemExit(f"fill failed: {dict(samples.errors)}")
    stored = sum(len(set(w.ids)) for w in wallets)
    return (
        f"fill: {len(wallets)} wallets x {per_wallet} memories (batch store, 8 at a time) in"
        f" {elapsed:.1f} s, {stored} distinct memories, {samples.deduplicated} deduplicated,"
        f" batch of {per_wallet} p50 {_ms(samples.all(), 50):.0f} ms"
    )


async def run(
    args: argparse.Namespace, server: Server, pool: LoadPool | None, only: set[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    levels = [int(c) for c in args.concurrency.split(",")]
    most = max([*levels, args.mix_clients])
    notes: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = await open_clients(stack, server.url, args.timeout, max(most, args.max_in_flight))
        meter = CpuMeter(server.pid, server.postgres_pid(), pool.pids if pool else ())
        bench = Bench(args, server, meter, clients, pool)
        if pool is not None:
            await asyncio.to_thread(pool.prepare, server.url, args.timeout, most)
        data = [Wallet.create() for _ in range(max(most, args.mix_clients))]
        scratch = [Wallet.create() for _ in range(most)]
        # The first embedding loads the model: not part of any figure.
        warm = Samples()
        for i in range(3):
            await op_recall(Load(clients[0], warm), scratch[0], random.Random(i), None)
        if warm.errors:
            raise SystemExit(f"warm-up failed: {dict(warm.errors)}\n{server.tail()}")
        note = await fill(clients, data, FILL_PER_WALLET)
        print(note, flush=True)
        notes.append(note)
        print(CPU_NOTE, flush=True)
        print(HEADER, flush=True)
        if "store" in only:
            for c in levels:
                await bench.closed("store", "store", scratch[:c], args.seconds)
        if "batch" in only:
            for c in levels:
                await bench.closed("store_batch100", "batch", scratch[:c], args.seconds)
        if "recall" in only:
            for c in levels:
                await bench.closed("recall", "recall", data[:c], args.seconds)
        if "open" in only:
            for rate in (float(r) for r in args.rates.split(",")):
                await bench.open("recall_open", op_recall, data, rate)
        if "mix" in only:
            profiler = start_profiler(args, server.pid)
            await bench.closed("mix", "mix", data[: args.mix_clients], args.mix_seconds)
            if profiler is not None:
                await asyncio.to_thread(profiler.wait, args.mix_seconds + 60)
                lines = [f"py-spy profile of the mix (server, active samples): {args.profile}"]
                lines += [f"  {pct:5.1f}%  {name}" for name, pct in profile_breakdown(args.profile)]
                print("\n".join(lines), flush=True)
                notes += lines
        return bench.rows, notes


# Where server time goes, from py-spy's samples: each stack counts for the deepest frame that
# matches one of these (first match in this order for that frame).
PROFILE_CATEGORIES = (
    ("embedding: onnxruntime inference", r"Session\.run|onnxruntime"),
    ("embedding: tokenise, pool, normalise", r"app/ai/embedders|tokenizers|numpy"),
    ("wallet signature recovery", r"app/auth/signature|eth_keys|coincurve|eth_account|eth_utils"),
    ("JSON encode/decode", r"json/|msgspec|encode_json|decode_json"),
    ("response rendering (memory_to_wire, iso)", r"memory_to_wire|_recalled_to_wire|\biso \("),
    ("recall scoring", r"app/memory/scoring"),
    ("asyncpg (protocol, codecs, pool)", r"asyncpg|pgvector"),
    ("uvicorn + httptools (HTTP)", r"uvicorn/|httptools"),
    ("litestar (routing, DI, middleware, hooks)", r"litestar/"),
    ("app code (auth, gate, headers, services)", r"app/"),
    # the loop's own C code: uvloop socket I/O, and asyncpg's and httptools' protocol parsing
    ("event loop C code (uvloop I/O, protocol parsing)", r"asyncio/|uvloop"),
    ("threads, executor", r"concurrent/futures|threading\.py|queue\.py"),
)


def profile_breakdown(path: Path) -> list[tuple[str, float]]:
    """Share of py-spy's active samples (raw/collapsed format) by category."""
    compiled = [(name, re.compile(rx)) for name, rx in PROFILE_CATEGORIES]
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        category = "other"
        for frame in reversed(stack.split(";")):
            hit = next((name for name, rx in compiled if rx.search(frame)), None)
            if hit is not None:
                category = hit
                break
        counts[category] += int(n)
    total = sum(counts.values()) or 1
    return [(name, round(100 * n / total, 1)) for name, n in counts.most_common()]


def start_profiler(args: argparse.Namespace, pid: int) -> subprocess.Popen[bytes] | None:
    if not args.profile:
        return None
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    return subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), "--duration", str(int(args.mix_seconds)),
         "--rate", "100", "--format", "raw", "--subprocesses", "--output", str(args.profile)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (uvicorn[standard] brings it): less generator CPU per request."""
    try:
        import uvloop
    except ImportError:
        return None
    new_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new_loop


@contextlib.contextmanager
def temporary_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="engram-bench-throughput-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--seconds", type=float, default=10.0, help="per closed/open-loop level")
    p.add_argument("--mix-seconds", type=float, default=None, help="default: 2 x --seconds")
    p.add_argument("--concurrency", default="1,4,16,64", help="closed-loop client counts")
    p.add_argument("--rates", default="50,100,200", help="open-loop recall rates (req/s)")
    p.add_argument("--mix-clients", type=int, default=64)
    p.add_argument(
        "--max-in-flight", type=int, default=256, help="open loop: connections; drop beyond"
    )
    p.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    p.add_argument("--only", default="", help="comma list of store,batch,recall,open,mix")
    p.add_argument("--pool-max", type=int, default=None, help="ENGRAM_DB_POOL_MAX for the server")
    p.add_argument("--workers", type=int, default=1, help="engram serve --workers")
    p.add_argument(
        "--load-procs",
        type=int,
        default=default_load_procs(),
        help="processes driving the closed-loop and mix clients, each its share with its own"
        " event loop (default: half the usable cores, at least 1, here %(default)s: the generator"
        " needs ~1.3 ms CPU per request against >= 3.5 ms of server and PostgreSQL, so half the"
        " cores keep each process near 55%% of a core when the server fills the machine);"
        " 0: in the bench process. The report warns when one passes"
        f" {GENERATOR_WARN_PERCENT:.0f}%% of a core",
    )
    p.add_argument(
        "--workers-sweep",
        default="",
        help="comma list of `engram serve --workers` counts (e.g. 1,2,4,8): the mix alone on a"
        " fresh server per count, then a table of req/s, p99, scaling against 1 worker and"
        " the load generator's CPU; written to throughput-sweep.json (replaces --workers,"
        " not with --only)",
    )
    p.add_argument(
        "--server-command",
        default=None,
        help="instead of `engram` (e.g. a wrapper that patches the app for an experiment);"
        " run as COMMAND serve --port P",
    )
    p.add_argument("--profile", type=Path, default=None, help="py-spy raw profile of the mix")
    p.add_argument("--out", type=Path, default=RESULTS, help="where the JSON and PNG go")
    args = p.parse_args()
    if args.mix_seconds is None:
        args.mix_seconds = 2 * args.seconds
    if args.load_procs < 0:
        p.error("--load-procs must be 0 or more")
    if args.workers_sweep:
        if args.only:
            p.error("--workers-sweep runs the mix alone: drop --only")
        try:
            args.sweep = [int(w) for w in args.workers_sweep.split(",")]
        except ValueError:
            p.error("--workers-sweep takes a comma list of worker counts, e.g. 1,2,4")
        if any(w < 1 for w in args.sweep):
            p.error("--workers-sweep: worker counts are 1 or more")
    return args


def serve_and_run(
    args: argparse.Namespace, workers: int, pool: LoadPool | None, only: set[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """A fresh `engram serve` (its own data directory) for one run of the chosen scenarios."""
    with temporary_root() as root:
        server = Server(root, free_port(), args.pool_max, args.server_command, workers)
        started = time.perf_counter()
        try:
            server.start()
            print(
                f"server up in {time.perf_counter() - started:.1f} s (pid {server.pid},"
                f" {workers} worker{'s' if workers > 1 else ''})",
                flush=True,
            )
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                return runner.run(run(args, server, pool, only))
        finally:
            server.stop()


def write_json(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(path)
    print(f"\nwrote {path.relative_to(PROJECT) if path.is_relative_to(PROJECT) else path}")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "command": "bench/throughput.py " + shlex.join(sys.argv[1:]),
        "seconds": args.seconds, "mix_seconds": args.mix_seconds,
        "concurrency": args.concurrency, "rates": args.rates,
        "mix_clients": args.mix_clients, "mix": dict(MIX), "batch_size": BATCH_SIZE,
        "recall_k": RECALL_K, "fill_per_wallet": FILL_PER_WALLET,
        "max_in_flight": args.max_in_flight, "pool_max": args.pool_max,
        "workers": args.workers, "load_procs": args.load_procs,
        "server_command": args.server_command,
        "profiled": bool(args.profile),
    }  # fmt: skip


def single(args: argparse.Namespace, machine: dict[str, Any], pool: LoadPool | None) -> None:
    """The scenarios of --only (default: all) on one server with --workers workers."""
    only = set(args.only.split(",")) if args.only else {"store", "batch", "recall", "open", "mix"}
    rows, notes = serve_and_run(args, args.workers, pool, only)
    summary = targets(rows)
    print("\ntargets (from the issue):")
    for line in summary:
        print("  " + line)
    result = {
        "machine": machine,
        "settings": settings(args),
        "provenance": stamp(sys.argv),
        "notes": notes,
        "rows": rows,
        "targets": TARGETS,
        "target_summary": summary,
        "generator_warnings": [generator_warning(r) for r in rows if r.get("generator_bound")],
    }
    write_json(args.out / "throughput.json", result)
    png = args.out / "throughput.png"
    title = f"Engram throughput ({machine['cpus']} CPUs, server + PostgreSQL + load on one host)"
    if plot(rows, png, title):
        print(f"wrote {png.relative_to(PROJECT) if png.is_relative_to(PROJECT) else png}")
    else:
        print("matplotlib not installed: no plot (pip install -e '.[bench]')")


def sweep_table(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """One entry per worker count; scaling is req/s over the 1-worker run's (else the first's)."""
    base = next((r for r in rows if r["workers"] == 1), rows[0])
    entries = [
        {
            "workers": r["workers"],
            "req_s": r["req_s"],
            "p99_ms": r["p99_ms"],
            "errors": r["errors"],
            "scaling": round(r["req_s"] / base["req_s"], 2) if base["req_s"] else None,
            "load_procs": r["load_procs"],
            "load_cpu_max_percent": r["load_cpu_max_percent"],
            "generator_bound": r["generator_bound"],
        }
        for r in rows
    ]
    against = "1 worker" if base["workers"] == 1 else f"{base['workers']} workers (no 1 in sweep)"
    lines = [
        f"{'workers':>7s} {'req/s':>8s} {'p99 ms':>8s} {'errors':>7s} {'scaling':>8s}"
        f"  load gen max cpu% (of one core, per process)",
        *(
            f"{e['workers']:7d} {e['req_s']:8.1f} {e['p99_ms']:8.1f} {e['errors']:7d}"
            f" {(e['scaling'] or 0):7.2f}x  {e['load_cpu_max_percent']:5.0f}"
            + ("  WARNING: generator-bound" if e["generator_bound"] else "")
            for e in entries
        ),
        f"scaling: req/s against {against}",
    ]
    return entries, lines


def sweep(args: argparse.Namespace, machine: dict[str, Any], pool: LoadPool | None) -> None:
    """The mix once per worker count, each on a fresh server and freshly filled wallets."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for workers in args.sweep:
        print(f"\n== --workers {workers}", flush=True)
        run_rows, run_notes = serve_and_run(args, workers, pool, {"mix"})
        row = next(r for r in run_rows if r["scenario"] == "mix")
        row["workers"] = workers
        rows.append(row)
        notes += [f"workers {workers}: {n}" for n in run_notes]
    entries, lines = sweep_table(rows)
    print(
        f"\nworkers sweep: the mix, {args.mix_clients} clients, {args.mix_seconds:g} s per count,"
        f" load from {processes(args.load_procs)}, {machine['cpus']} CPUs"
    )
    for line in lines:
        print("  " + line)
    warnings = [generator_warning(r) for r in rows if r["generator_bound"]]
    for line in warnings:
        print("  " + line)
    result = {
        "machine": machine,
        "settings": {**settings(args), "workers": None, "workers_sweep": args.sweep},
        "provenance": stamp(sys.argv),
        "notes": notes,
        "workers_sweep": entries,
        "rows": rows,
        "generator_warnings": warnings,
    }
    write_json(args.out / "throughput-sweep.json", result)


def main() -> None:
    args = parse_args()
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(
        f"engram throughput: {machine['cpus']} CPUs, server in a subprocess, load from httpx in"
        f" {processes(args.load_procs)}"
    )
    with load_pool(args.load_procs) as pool:
        if args.workers_sweep:
            sweep(args, machine, pool)
        else:
            single(args, machine, pool)


if __name__ == "__main__":
    main()
