"""Engram and mem0 side by side on LoCoMo: same turns, same questions, same embedder, same database
engine, one run; evidence recall scored by bench/locomo.py's own functions, plus search latency.

- Database: one embedded PostgreSQL+pgvector; Engram in its `engram` database (migrated as
  bench/locomo.py does), mem0 in a `mem0` database of the same server (its pgvector store, HNSW).
- Embedder: Engram's default local embedder (int8 all-MiniLM-L6-v2, 384 dims), built from the
  same Settings as the Engram servers, as create_app builds it. Engram runs it in process; mem0
  reaches the same model through a local server speaking OpenAI's embeddings wire format.
- mem0 (mem0ai 2.2.1) runs in its own virtualenv, bench/.venv-mem0, created on first use from PyPI,
  in bench/mem0_runner.py (a subprocess driven over JSON lines): add(infer=False) for every turn
  (the text Engram stores, the turn id in metadata, one user_id per conversation), then
  search(question, top_k=20) per question, each call timed in the runner. No LLM is configured to
  be reachable; none is called.
- Engram: stores and recalls through its HTTP API as bench/locomo.py does, in both of its scorings
  (two `engram serve` processes, one worker each, on the same database); each POST /v1/recall is
  timed from the client (the auth header is signed before the clock starts).
- After each conversation is stored, both databases are ANALYZEd before any question (what
  autovacuum does within a minute of a load; Engram's generic plans are made from the statistics
  of the moment): the figures are those of a running system, not of its first minute after a
  bulk load. `--no-analyze` times the searches on the statistics of before the load.
- Per conversation, every system stores the turns, then each question is put to the three in a
  rotating order, so load from anything else on the machine weighs on all of them alike. Each
  gets one untimed warm-up search for an empty user first. Questions and turns only: `answer` and
  `evidence` are used for scoring, never to build memories or queries.

Run: .venv/bin/python bench/mem0_side.py ../shared/bench/locomo/locomo-dev.json [--samples N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg
import httpx
from eth_account import Account

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run as a script from anywhere
sys.path.insert(0, str(BENCH))

from locomo import (  # noqa: E402  (bench/ is not a package: imported as a sibling script)
    CATEGORIES,
    COLUMNS,
    KS,
    ask,
    dia_ids_of,
    evidence_of,
    score,
    store_conversation,
    summarise,
    turns_of,
)
from provenance import save  # noqa: E402
from throughput import Server, free_port  # noqa: E402

from app.ai.embedders import Embedder, EmbedResult, build_embedder  # noqa: E402
from app.auth.signature import sign_header  # noqa: E402
from app.config import (  # noqa: E402
    LOCAL_EMBED_DIMS,
    DatabaseSettings,
    LimitsSettings,
    RecallSettings,
    Settings,
)
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from app.db.schema import upgrade_to_head  # noqa: E402
from tests.support.db import create_database  # noqa: E402
from tests.support.wire import JsonHandler  # noqa: E402

MEM0_VERSION = "2.2.1"
MEM0_VENV = BENCH / ".venv-mem0"
# mem0's pgvector store imports psycopg 3 with psycopg_pool (else psycopg2); the ranges are those
# of mem0ai's own `vector-stores` extra. The binary wheel brings libpq along.
MEM0_REQUIREMENTS = [f"mem0ai=={MEM0_VERSION}", "psycopg[binary]>=3.2.8", "psycopg-pool>=3.2.6,<4"]
MEM0_RUNNER = BENCH / "mem0_runner.py"
LIMIT = max(KS)
TARGET_LATENCY_RATIO = 1.0  # issue 40: Engram's recall p50 at most mem0's (once: half)


# --------------------------------------------------------------------------- mem0's virtualenv


def mem0_python() -> Path:
    """bench/.venv-mem0's interpreter, creating the virtualenv first if it is missing or stale."""
    python = MEM0_VENV / "bin" / "python"
    probe = (
        "import importlib.metadata as m, psycopg, psycopg_pool; "
        f"assert m.version('mem0ai') == {MEM0_VERSION!r}"
    )
    if (
        python.exists()
        and subprocess.run([python, "-c", probe], capture_output=True).returncode == 0
    ):
        return python
    print(f"creating {MEM0_VENV} with {', '.join(MEM0_REQUIREMENTS)} ...", flush=True)
    base = shutil.which("python3") or sys.executable
    subprocess.run([base, "-m", "venv", str(MEM0_VENV)], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *MEM0_REQUIREMENTS], check=True)
    subprocess.run([python, "-c", probe], check=True)
    return python


# --------------------------------------------------------------------------- embeddings server


class _EmbeddingsHandler(JsonHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connection, like with OpenAI
    # Headers and body go out in two writes; with Nagle on, the body waits for the client's
    # delayed ACK (~40 ms a request on Linux), which would be charged to mem0's search time.
    disable_nagle_algorithm = True
    server: EmbeddingsServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path.rstrip("/") != "/v1/embeddings":
            return self._reply(404, {"error": {"message": f"no route {self.path}"}})
        embedder = self.server.embedder
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if body.get("encoding_format", "float") != "float" or not all(
            isinstance(t, str) for t in texts
        ):
            error = {"message": "only string inputs and encoding_format=float are served"}
            return self._reply(400, {"error": error})
        if body.get("dimensions") not in (None, embedder.dims):
            error = {"message": f"{embedder.model_name} has {embedder.dims} dimensions"}
            return self._reply(400, {"error": error})
        t0 = time.perf_counter()
        result = self.server.embed(texts)
        self.server.timings.append((texts, time.perf_counter() - t0))
        data = [
            {"object": "embedding", "index": i, "embedding": vector.tolist()}
            for i, vector in enumerate(result.vectors)
        ]
        usage = {"prompt_tokens": result.tokens, "total_tokens": result.tokens}
        self._reply(
            200, {"object": "list", "data": data, "model": embedder.model_name, "usage": usage}
        )


class EmbeddingsServer(ThreadingHTTPServer):
    """POST /v1/embeddings in OpenAI's wire format, answered by an Engram embedder.

    The embedder is async; it runs on a private event loop in its own thread, and request threads
    hand it their texts.
    """

    daemon_threads = True

    def __init__(self, embedder: Embedder) -> None:
        super().__init__(("127.0.0.1", 0), _EmbeddingsHandler)
        self.embedder = embedder
        self.timings: list[tuple[list[str], float]] = []  # (texts, seconds spent embedding them)
        self._loop = asyncio.new_event_loop()
        self._workers = [
            threading.Thread(target=self._loop.run_forever, daemon=True),
            threading.Thread(target=self.serve_forever, daemon=True),
        ]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def embed(self, texts: list[str]) -> EmbedResult:
        return asyncio.run_coroutine_threadsafe(self.embedder.embed(texts), self._loop).result()

    def __enter__(self) -> EmbeddingsServer:
        for thread in self._workers:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._loop.call_soon_threadsafe(self._loop.stop)


def closed_local_url() -> str:
    """A local URL nobody listens on: where mem0's LLM would go, so a call would fail at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# --------------------------------------------------------------------------- the data


def conversations_of(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per conversation: its turns, and its scored questions (categories 1-4 with evidence)."""
    conversations = []
    for sample in samples:
        turns = turns_of(sample)
        known = {t["dia_id"] for t in turns}
        questions = []
        for i, qa in enumerate(sample["qa"]):
            category = int(qa.get("category", 0))
            evidence = evidence_of(qa, known)
            if category in CATEGORIES and evidence:
                questions.append({"qid": i, "question": qa["question"], "category": category,
                                  "evidence": evidence})  # fmt: skip
        conversations.append({"sample_id": sample["sample_id"], "turns": turns,
                              "questions": questions})  # fmt: skip
    return conversations


# --------------------------------------------------------------------------- the systems


class Found(NamedTuple):
    seconds: float  # wall time of the search call
    dia_ids: list[str]  # turn ids of the results, best first
    texts: list[str]  # their texts, best first


class EngramSide:
    """Engram through its HTTP API: one wallet per conversation, as bench/locomo.py does."""

    def __init__(self, name: str, http: httpx.AsyncClient) -> None:
        self.name = name
        self.http = http
        self.keys: dict[str, str] = {}

    async def warm_up(self) -> None:
        # A wallet with no memories: opens connections, touches nobody's access counts.
        await ask(self.http, Account.create().key.hex(), "warm up", LIMIT)

    async def store(self, conv: dict[str, Any]) -> float:
        key = self.keys[conv["sample_id"]] = Account.create().key.hex()
        started = time.perf_counter()
        await store_conversation(self.http, key, conv["turns"])
        return time.perf_counter() - started

    async def search(self, conv: dict[str, Any], question: str) -> Found:
        key = self.keys[conv["sample_id"]]
        auth = sign_header(key)  # signed before the clock starts: client work, not the server's
        started = time.perf_counter()
        memories = await ask(self.http, key, question, LIMIT, auth)
        seconds = time.perf_counter() - started
        ranked = [d for m in memories for d in dia_ids_of(m)]
        return Found(seconds, ranked, [m["content"] for m in memories])


class Mem0Side:
    """mem0 in bench/mem0_runner.py, a subprocess in mem0's virtualenv, over JSON lines; the
    runner times each call itself, so the pipe is not counted."""

    name = "mem0"

    def __init__(self, python: Path, config: dict[str, Any], work: Path) -> None:
        env = {**os.environ, "MEM0_TELEMETRY": "False", "MEM0_DIR": str(work / "mem0-dir")}
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
            env.pop(name, None)  # nothing but the config may steer mem0's clients
        self.process = subprocess.Popen(
            [python, MEM0_RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            text=True,
        )  # fmt: skip
        assert self._call(config) == {"ready": True}

    def _call(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"mem0 runner exited ({self.process.wait()}); see its log above")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"mem0 runner: {answer['error']}")
        return answer

    async def warm_up(self) -> None:
        self._call({"op": "search", "user_id": "mem0-side-warm-up", "question": "warm up"})

    async def store(self, conv: dict[str, Any]) -> float:
        turns = [{"dia_id": t["dia_id"], "content": t["content"]} for t in conv["turns"]]
        answer = self._call({"op": "add", "user_id": conv["sample_id"], "turns": turns})
        return float(answer["seconds"])

    async def search(self, conv: dict[str, Any], question: str) -> Found:
        command = {"op": "search", "user_id": conv["sample_id"], "question": question}
        answer = self._call(command)
        return Found(answer["seconds"], [d for d in answer["dia_ids"] if d], answer["texts"])

    def close(self) -> None:
        try:
            self._call({"op": "quit"})
        except (RuntimeError, BrokenPipeError, json.JSONDecodeError):
            pass
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


System = EngramSide | Mem0Side


async def run(
    systems: list[System], conversations: list[dict[str, Any]], analyzed: list[str]
) -> dict[str, Any]:
    """Per conversation: store its turns in every system (then ANALYZE the `analyzed`
    databases), then ask each question of every system.

    Searches are interleaved question by question, in an order that rotates, so that whatever
    else the machine is doing weighs on every system alike.
    """
    results: dict[str, dict[str, Any]] = {
        s.name: {"per_category": defaultdict(list), "latencies": [], "store_seconds": 0.0}
        for s in systems
    }
    for system in systems:
        await system.warm_up()
    asked = 0
    for conv in conversations:
        for system in systems:
            seconds = await system.store(conv)
            results[system.name]["store_seconds"] += seconds
            print(f"{system.name}: {conv['sample_id']}, {len(conv['turns'])} turns stored in "
                  f"{seconds:.1f} s", flush=True)  # fmt: skip
        await analyze(analyzed)
        for q in conv["questions"]:
            turn = asked % len(systems)
            asked += 1
            for system in systems[turn:] + systems[:turn]:
                found = await system.search(conv, q["question"])
                row = score(found.dia_ids, q["evidence"], found.texts[:10])
                row["returned"] = float(len(found.texts))
                results[system.name]["per_category"][q["category"]].append(row)
                results[system.name]["latencies"].append(found.seconds)
        print(f"{len(conv['questions'])} questions asked of each system", flush=True)
    return results


def engram_settings(dsn: str, scoring: str) -> Settings:
    return Settings(
        database=DatabaseSettings(url=dsn),
        limits=LimitsSettings(free_tier_calls=10**9, rate_limit_per_minute=0),
        recall=RecallSettings(access_boost=scoring == "contract"),
    )


def engram_embedder(settings: Settings) -> Embedder:
    """The embedder create_app builds from these settings (no key: the local MiniLM)."""
    return build_embedder(settings.embedder)


@contextmanager
def engram_served(dsn: str, scoring: str, root: Path) -> Iterator[str]:
    """`engram serve` (one worker) in its own process on the shared database, as it is deployed:
    not a thread of this process, whose event loop, HTTP client and mem0's embeddings server
    would share its interpreter lock."""
    server = Server(root / f"engram-{scoring}", free_port(), None, env={
        "ENGRAM_DATABASE_URL": dsn,
        "ENGRAM_RECALL_ACCESS_BOOST": "1" if scoring == "contract" else "0",
    })  # fmt: skip
    server.root.mkdir(parents=True)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


async def analyze(dsns: list[str]) -> None:
    """ANALYZE each database: what autovacuum does within a minute of a load, before its
    queries are timed. Engram's statements run as generic plans made from the statistics of the
    moment (app/db/pool.py); for the first minute after a conversation is stored they would be
    plans made for an empty table."""
    for dsn in dsns:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("ANALYZE")
        finally:
            await conn.close()


def question_embedding_seconds(
    embeddings: EmbeddingsServer, conversations: list[dict[str, Any]]
) -> list[float]:
    """The part of mem0's search time its embedder spent on the question, measured in the server
    (mem0 trims the query and replaces newlines before embedding it)."""
    asked = {
        q["question"].strip().replace("\n", " ") for c in conversations for q in c["questions"]
    }
    return [s for texts, s in embeddings.timings if len(texts) == 1 and texts[0] in asked]


# --------------------------------------------------------------------------- report


def percentiles_ms(latencies: list[float]) -> dict[str, float]:
    """p50/p95/p99 picked the way bench/locomo.py picks them (nearest rank below), and the mean."""
    lat = sorted(latencies)
    figures = {f"p{q}": lat[int(q / 100 * (len(lat) - 1))] * 1e3 for q in (50, 95, 99)}
    figures["mean"] = sum(lat) / len(lat) * 1e3
    return figures


def report(systems: dict[str, dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for name, result in systems.items():
        table = summarise(result["per_category"])
        returned = [r["returned"] for rows in result["per_category"].values() for r in rows]
        figures[name] = {
            "table": table,
            "latency_ms": percentiles_ms(result["latencies"]),
            "mean_results_returned": sum(returned) / len(returned),
            "store_seconds": result["store_seconds"],
        }
        if result.get("embed_seconds"):
            figures[name]["question_embedding_ms"] = percentiles_ms(result["embed_seconds"])
    categories = [c for c in next(iter(figures.values()))["table"] if c != "overall"]
    print("\nR@10 per category")
    print(f"{'':26s}" + "".join(f"{c:>14s}" for c in categories))
    for name, f in figures.items():
        print(f"{name:26s}" + "".join(f"{f['table'][c]['R@10']:14.3f}" for c in categories))
    questions = int(next(iter(figures.values()))["table"]["overall"]["questions"])
    print(f"\noverall, {questions} questions; search latency per call in ms")
    columns = [c for c in COLUMNS if c != "tokens@10"]
    print(f"{'':26s}" + "".join(f"{c:>8s}" for c in [*columns, "tok@10", "p50", "p95", "p99"]))
    for name, f in figures.items():
        overall, lat = f["table"]["overall"], f["latency_ms"]
        print(f"{name:26s}" + "".join(f"{overall[c]:8.3f}" for c in columns)
              + f"{overall['tokens@10']:8.0f}"
              + "".join(f"{lat[p]:8.1f}" for p in ("p50", "p95", "p99")))  # fmt: skip
    mem0 = figures["mem0"]["latency_ms"]
    ratios = {}
    for name, f in figures.items():
        if name == "mem0":
            continue
        ratios[name] = {p: f["latency_ms"][p] / mem0[p] for p in ("p50", "p95", "p99")}
        shown = ", ".join(f"{p} {r:.2f}" for p, r in ratios[name].items())
        print(f"latency ratio {name}/mem0: {shown} (target <= {TARGET_LATENCY_RATIO})")
    print("results returned per search (of 20): " + ", ".join(
        f"{name} {f['mean_results_returned']:.1f}" for name, f in figures.items()))  # fmt: skip
    if "question_embedding_ms" in figures["mem0"]:
        embed = figures["mem0"]["question_embedding_ms"]
        print(f"of mem0's search time, embedding the question (in the embeddings server): "
              f"p50 {embed['p50']:.1f} ms, p95 {embed['p95']:.1f} ms")  # fmt: skip
    print("store/add time: " + ", ".join(
        f"{name} {f['store_seconds']:.0f} s" for name, f in figures.items()))  # fmt: skip
    return {
        "systems": figures,
        "latency_ratio": ratios,
        "target_latency_ratio": TARGET_LATENCY_RATIO,
    }


# --------------------------------------------------------------------------- main


async def main() -> None:
    parser = argparse.ArgumentParser(description="Engram and mem0 side by side on LoCoMo")
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--samples", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "mem0.json")
    parser.add_argument(
        "--no-analyze", dest="analyze", action="store_false",
        help="time the searches right after each load, on the statistics of before it",
    )  # fmt: skip
    args = parser.parse_args()
    samples = json.loads(args.dataset.read_text())
    if args.samples:
        samples = samples[: args.samples]
    conversations = conversations_of(samples)
    python = mem0_python()
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="engram-mem0-side-"))
    server = EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        await asyncio.to_thread(upgrade_to_head, dsn, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
        mem0_database = await create_database(dsn, "mem0")
        plain = engram_settings(dsn, "no-access-boost")
        with (
            engram_served(dsn, "contract", root) as contract_url,
            engram_served(dsn, "no-access-boost", root) as plain_url,
            EmbeddingsServer(engram_embedder(plain)) as embeddings,
        ):
            embeddings.embed(["warm up"])  # load the model before mem0 starts any clock
            mem0 = Mem0Side(python, {
                "database_url": mem0_database,
                "collection": f"locomo_{int(time.time())}",
                "dims": embeddings.embedder.dims,
                "embed_model": embeddings.embedder.model_name,
                "embed_base_url": embeddings.base_url,
                "unused_llm_url": closed_local_url(),
                "history_db_path": str(root / "mem0-history.db"),
                "limit": LIMIT,
            }, root)  # fmt: skip
            try:
                async with (
                    httpx.AsyncClient(base_url=contract_url, timeout=120) as contract_http,
                    httpx.AsyncClient(base_url=plain_url, timeout=120) as plain_http,
                ):
                    systems: list[System] = [
                        EngramSide("engram (contract)", contract_http),
                        EngramSide("engram (no-access-boost)", plain_http),
                        mem0,
                    ]
                    loaded = [dsn, mem0_database] if args.analyze else []
                    results = await run(systems, conversations, loaded)
            finally:
                mem0.close()
            results["mem0"]["embed_seconds"] = question_embedding_seconds(embeddings, conversations)
        figures = report(results)
        figures["setup"] = {
            "dataset": args.dataset.name,
            "conversations": [c["sample_id"] for c in conversations],
            "mem0": f"mem0ai=={MEM0_VERSION} without its [nlp] extra, pgvector (HNSW), add with "
            "infer=False, openai embedder pointed at the local embeddings server",
            "embedder": {  # Engram's local embedder, from the same settings on both sides
                "model": embeddings.embedder.model_name,
                "dims": embeddings.embedder.dims,
                "int8": plain.embedder.int8,
            },
            "search_limit": LIMIT,
            "latency": "wall time per call, searches interleaved question by question: Engram "
            "POST /v1/recall from an HTTP client to `engram serve` (its own process); mem0 "
            "Memory.search() in its process (its embedding goes over local HTTP)",
            "analyzed_after_each_load": args.analyze,
            "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()},
            "cpus": os.cpu_count(),
        }
        save(args.out, figures)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
