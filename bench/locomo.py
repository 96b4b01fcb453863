"""LoCoMo evidence recall through Engram's HTTP API, recalling as an auto-recall agent does.

Every dialogue turn of each conversation is stored with POST /v1/store/batch (one wallet per
conversation, content `[{session date}] {speaker}: {text}`, the turn id in metadata.dia_id, one
namespace per session so store's dedup never merges two turns of different sessions, no other
field); then every category 1-4 question is asked once, in order, with POST /v1/recall
(`query` and `limit` only), the server's access accounting live, as an agent recalling before
every turn would. recall@1/5/10/20, hit@10 and the context tokens at k=10 are printed per
category and overall, next to the dataset README's baselines, with the split check: the same
figures for the conversations the constants were fitted on (conv-26, conv-30, conv-41) and for
the two held out (conv-42, conv-43). Questions and turns only: `answer` and `evidence` are used
for scoring, never to build memories or queries.

The BEAM dev subset (../shared/bench/beam/beam500k-dev.json.gz, LoCoMo's shape plus `qa[].type`,
read gzipped in place) runs the same way: its categories are named by its README's mapping, the
figures are also printed per BEAM type, and its split check compares the first half of its
conversations (in file order: beam-500K-1..10) with the second (11..20); nothing in Engram was
fitted on either, so the check shows how much the figures move between two halves of one
benchmark. Its turns are long: a store batch is cut at 48 KiB of JSON (the body limit is 64 KiB)
as well as at 100 memories, which leaves LoCoMo's batches as they were.

--baselines also ranks, in the same run and on the same database, the default configuration's
stored turns by dense-only retrieval (the int8 MiniLM vectors Engram stored, exact cosine, as
a plain pgvector table would; the question embedded by the same model), by BM25 and by RRF(60)
of the two (bench/embedders.py's), scored and printed as the configurations are; with --ranks,
their top 20 per question go to PATH with a `.baselines.json` suffix (for
bench/rank_analysis.py). The turns are embedded once, by Engram.

--ranks PATH writes each question's ranked turn ids (top 20 of the scored recall) and, with
--ranks-depth N (default 200), a second pass after the scoring one: every question asked again
with limit N, each result's dia_id, rank and `_signals`, for bench/rank_analysis.py. The deeper
recall draws more candidates per side, so its order can differ a little from the scored top 20.

Configurations (`--configs`, comma-separated; default: all), each served on the same database:
- default: Engram as shipped;
- no-second-round, no-event-time, first-round, no-speaker: each retrieval step turned off, to
  show what it adds (ENGRAM_RECALL_SECOND_ROUND=0, ENGRAM_RECALL_EVENT_TIME=0, both;
  ENGRAM_RECALL_SPEAKER=0);
- memoclaw-access: every recalled memory counted as accessed, MemoClaw's accounting
  (ENGRAM_RECALL_COUNTS_ACCESS=1), on a fresh copy of the turns (its recalls change the data);
- event-time-field: the default, with each turn also sending `occurred_at` (its session date);
- idf-keyword: keyword_match as the plain IDF sum, its form before issue 37
  (ENGRAM_RECALL_KEYWORD_PASSAGES=0).
The default's recall over HTTP is timed next to the first round's, same run.

--db DIR keeps the database (and the wallet keys of the stored turns) in DIR: a later run with
the same DIR, dataset and --samples serves its configurations over the turns already stored
instead of storing them again (BEAM's dev subset takes ~15 min of CPU to store). Recall changes
nothing stored (access counting is off but for memoclaw-access, which stores its own copy).

Run: .venv/bin/python bench/locomo.py ../shared/bench/locomo/locomo-dev.json
     .venv/bin/python bench/locomo.py ../shared/bench/beam/beam500k-dev.json.gz \
         --configs default --out bench/results/beam.json [--samples N]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from provenance import save  # bench/ is on the path: the scripts run from it

from app.ai.embedders import build_embedder
from app.asgi import create_app
from app.auth.signature import sign_header
from app.config import DatabaseSettings, EmbedderSettings, LimitsSettings, Settings
from app.db.embedded import EmbeddedPostgres
from app.db.schema import upgrade_to_head

# where the results go, wherever the script is run from
RESULTS = Path(__file__).resolve().parent / "results"
KS = (1, 5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# the BEAM subset's README maps its question types onto the same four numbers
BEAM_CATEGORIES = {1: "multi-session", 2: "temporal/order", 3: "update/contra", 4: "extract/pref"}
BASELINES_R10 = {"BM25": 0.611, "dense MiniLM": 0.545, "RRF(60)": 0.625}
TARGET_R10 = 0.72
# every question's ranked turn ids, when --ranks asks for them (for looking at misses)
RANKS: list[dict[str, Any]] | None = None
# --min-similarity: the floor every recall sends (None: the server's default for its embedder)
FLOOR: float | None = None
DIA_ID_RE = re.compile(r"D(\d+):(\d+)")


def load_samples(path: Path) -> list[dict[str, Any]]:
    """A LoCoMo-shaped file, plain or gzipped (read in place: never copied)."""
    raw = path.read_bytes()
    samples: list[dict[str, Any]] = json.loads(
        gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    )
    return samples


def is_beam(samples: list[dict[str, Any]]) -> bool:
    """The BEAM subset carries each question's type."""
    return any("type" in qa for sample in samples for qa in sample["qa"])


def category_names(samples: list[dict[str, Any]]) -> dict[int, str]:
    return BEAM_CATEGORIES if is_beam(samples) else CATEGORIES


def splits_of(samples: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """The split check's two halves: LoCoMo's fitted / held-out conversations; for any other
    file (BEAM), the first half of its conversations in file order against the second."""
    if not is_beam(samples):
        return [("fitted on conv-26/30/41", FITTED_ON), ("held out conv-42/43", HELD_OUT)]
    ids = [s["sample_id"] for s in samples]
    half = (len(ids) + 1) // 2
    first, second = tuple(ids[:half]), tuple(ids[half:])
    return [(f"first half {first[0]}..{first[-1]}", first)] + (
        [(f"second half {second[0]}..{second[-1]}", second)] if second else []
    )


def turns_of(sample: dict[str, Any]) -> list[dict[str, Any]]:
    conv = sample["conversation"]
    turns = []
    n = 1
    while f"session_{n}" in conv:
        date = conv.get(f"session_{n}_date_time", "")
        for turn in conv[f"session_{n}"]:
            text = f"[{date}] {turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares photo: {turn['blip_caption']}]"
            turns.append({"dia_id": turn["dia_id"], "session": n, "content": text[:8192],
                          "speaker": turn["speaker"],
                          "occurred_at": session_date(date)})  # fmt: skip
        n += 1
    return turns


def session_date(raw: str) -> str | None:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00Z' (for the event-time-field variant)."""
    try:
        moment = datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:00Z")


def evidence_of(qa: dict[str, Any], known: set[str]) -> list[str]:
    """Normalised evidence ids ('D8:6; D9:17', 'D:11:26', 'D30:05' ...), unknown ones dropped."""
    found = []
    for raw in qa.get("evidence") or []:
        for match in DIA_ID_RE.finditer(str(raw).replace("D:", "D")):
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
    return found


BATCH_ITEMS = 100
BATCH_BYTES = 48 * 1024  # of JSON per store batch: the body limit is 64 KiB


def batches(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive memories, at most BATCH_ITEMS and BATCH_BYTES of JSON a batch."""
    out: list[list[dict[str, Any]]] = []
    size = 0
    for item in items:
        length = len(json.dumps(item).encode()) + 1
        if not out or len(out[-1]) >= BATCH_ITEMS or size + length > BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(item)
        size += length
    return out


async def store_conversation(
    http: httpx.AsyncClient, key: str, turns: list[dict[str, Any]], event_time: bool = False
) -> int:
    """Store the turns, one namespace per session; returns how many store's dedup merged."""
    by_session: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for turn in turns:
        by_session[turn["session"]].append(turn)
    merged = 0
    for session, items in by_session.items():
        memories = [
            {"content": t["content"], "namespace": f"session-{session}",
             "metadata": {"dia_id": t["dia_id"]},
             **({"occurred_at": t["occurred_at"]} if event_time and t["occurred_at"] else {})}
            for t in items
        ]  # fmt: skip
        for batch in batches(memories):
            r = await http.post("/v1/store/batch", json={"memories": batch},
                                headers={"x-wallet-auth": sign_header(key)})  # fmt: skip
            r.raise_for_status()
            merged += int(r.json().get("deduplicated_count", 0))
    return merged


async def ask(
    http: httpx.AsyncClient, key: str, question: str, k: int, auth: str | None = None
) -> list[dict[str, Any]]:
    """Recall the top k; `auth` is a header signed beforehand (so timing covers the POST only)."""
    body: dict[str, Any] = {"query": question, "limit": k}
    if FLOOR is not None:
        body["min_similarity"] = FLOOR
    r = await http.post("/v1/recall", json=body,
                        headers={"x-wallet-auth": auth or sign_header(key)})  # fmt: skip
    r.raise_for_status()
    memories: list[dict[str, Any]] = r.json()["memories"]
    return memories


def dia_ids_of(memory: dict[str, Any]) -> list[str]:
    return [memory["metadata"]["dia_id"]] if "dia_id" in memory["metadata"] else []


def score(ranked: list[str], evidence: list[str], top10: list[str]) -> dict[str, float]:
    """One question's figures: ranked turn ids against its evidence, and the words of the top 10."""
    row = {f"R@{k}": len(set(ranked[:k]) & set(evidence)) / len(evidence) for k in KS}
    row["hit@10"] = float(bool(set(ranked[:10]) & set(evidence)))
    row["tokens@10"] = float(len(" ".join(top10).split()))
    return row


FITTED_ON = ("conv-26", "conv-30", "conv-41")
HELD_OUT = ("conv-42", "conv-43")
TARGETS = {"R@10": 0.76, "R@5": 0.66}


async def store_all(
    base_url: str, samples: list[dict[str, Any]], event_time: bool = False
) -> dict[str, str]:
    """Each conversation into a wallet of its own; returns the wallet key by sample id."""
    keys = {}
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        for sample in samples:
            key = Account.create().key.hex()
            started = time.perf_counter()
            turns = turns_of(sample)
            merged = await store_conversation(http, key, turns, event_time)
            print(f"{sample['sample_id']}: {len(turns)} turns stored in "
                  f"{time.perf_counter() - started:.1f} s, {merged} merged by dedup",
                  flush=True)  # fmt: skip
            keys[sample["sample_id"]] = key
    return keys


async def evaluate(
    base_url: str, samples: list[dict[str, Any]], keys: dict[str, str]
) -> dict[str, Any]:
    """Every question once, in order, as an auto-recall agent asks them."""
    per_sample: dict[str, dict[int, list[dict[str, float]]]] = {}
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        for sample in samples:
            key = keys[sample["sample_id"]]
            known = {t["dia_id"] for t in turns_of(sample)}
            per_category: dict[int, list[dict[str, float]]] = defaultdict(list)
            for qa in sample["qa"]:
                category = int(qa.get("category", 0))
                evidence = evidence_of(qa, known)
                if category not in CATEGORIES or not evidence:
                    continue
                auth = sign_header(key)
                t0 = time.perf_counter()
                memories = await ask(http, key, qa["question"], max(KS), auth)
                latencies.append(time.perf_counter() - t0)
                ranked = [d for m in memories for d in dia_ids_of(m)]
                row = score(ranked, evidence, [m["content"] for m in memories[:10]])
                row["type"] = qa.get("type", "")  # type: ignore[assignment]
                per_category[category].append(row)
                if RANKS is not None:
                    RANKS.append({"sample": sample["sample_id"], "category": category,
                                  "type": qa.get("type", ""), "question": qa["question"],
                                  "evidence": evidence, "ranked": ranked})  # fmt: skip
            per_sample[sample["sample_id"]] = per_category
    return {"per_sample": per_sample, "latencies": latencies}


async def foreign(base_url: str, samples: list[dict[str, Any]], keys: dict[str, str]) -> float:
    """Every question asked in the next conversation's wallet, where nothing is about it: the
    mean number of memories recall returns of 10 (what a similarity floor is there to cut)."""
    counts = []
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        for k, sample in enumerate(samples):
            key = keys[samples[(k + 1) % len(samples)]["sample_id"]]
            for qa in sample["qa"]:
                if int(qa.get("category", 0)) in CATEGORIES:
                    counts.append(len(await ask(http, key, qa["question"], 10)))
    mean = statistics.fmean(counts)
    print(f"asked in another conversation's wallet: {mean:.1f} memories of 10 ({len(counts)})")
    return mean


DENSE_ONLY = "dense-only (stored int8 MiniLM, cosine)"


async def baselines(
    dsn: str, samples: list[dict[str, Any]], keys: dict[str, str]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Dense-only, BM25 and RRF(60) over the turns as Engram stored them: each name's
    evaluate()-shaped result, and its ranks (bench/embedders.py --ranks' shape)."""
    import asyncpg
    import numpy as np
    from embedders import RRF_K, bm25_orders, questions_of, rrf_orders

    from app.ai.embedders import LocalMiniLMEmbedder

    embedder = LocalMiniLMEmbedder(int8=True)
    lexical = bm25_orders(samples)
    dense: dict[str, np.ndarray] = {}
    conn = await asyncpg.connect(dsn)
    try:
        for sample in samples:
            wallet = Account.from_key(keys[sample["sample_id"]]).address.lower()
            rows = await conn.fetch(
                "SELECT metadata->>'dia_id' AS dia_id, embedding::text AS v FROM memories"
                " WHERE user_id = $1 AND deleted_at IS NULL",
                wallet,
            )
            turns = turns_of(sample)
            ids = [t["dia_id"] for t in turns]
            vectors = {r["dia_id"]: np.array(json.loads(r["v"]), dtype=np.float32) for r in rows}
            dims = len(next(iter(vectors.values())))
            # a turn merged away by store's dedup has no row of its own: it cannot be found
            matrix = np.stack([vectors.get(i, np.zeros(dims, dtype=np.float32)) for i in ids])
            matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
            questions = questions_of(sample, set(ids))
            embedded = await embedder.embed([q[1] for q in questions])
            queries = np.array(embedded.vectors, dtype=np.float32)
            dense[sample["sample_id"]] = np.argsort(-(queries @ matrix.T), axis=1, kind="stable")
    finally:
        await conn.close()
    results, ranks = {}, {}
    for name, orders in ((DENSE_ONLY, dense), ("BM25", lexical),
                         (f"RRF({RRF_K}) BM25 + dense", rrf_orders(dense, lexical))):  # fmt: skip
        per_sample: dict[str, dict[int, list[dict[str, float]]]] = {}
        ranked_rows = []
        for sample in samples:
            turns = turns_of(sample)
            ids = [t["dia_id"] for t in turns]
            content = {t["dia_id"]: t["content"] for t in turns}
            per_category: dict[int, list[dict[str, float]]] = defaultdict(list)
            questions = questions_of(sample, set(ids))
            for question, order in zip(questions, orders[sample["sample_id"]], strict=True):
                category, text, evidence, kind = question
                ranked = [ids[i] for i in order[: max(KS)]]
                row = score(ranked, evidence, [content[i] for i in ranked[:10]])
                row["type"] = kind  # type: ignore[assignment]
                per_category[category].append(row)
                ranked_rows.append({"sample": sample["sample_id"], "category": category,
                                    "type": kind, "question": text, "evidence": evidence,
                                    "ranked": ranked})  # fmt: skip
            per_sample[sample["sample_id"]] = per_category
        results[name] = {"per_sample": per_sample, "latencies": []}
        ranks[name] = ranked_rows
    return results, ranks


async def deep_ranks(
    base_url: str, samples: list[dict[str, Any]], keys: dict[str, str], depth: int,
    ranks: list[dict[str, Any]],
) -> None:  # fmt: skip
    """After the scored pass: each question again with limit `depth`, keeping every result's
    dia_id and `_signals` in its --ranks entry (the order in which `evaluate` appended them)."""
    started = time.perf_counter()
    entries = iter([r for r in ranks if "deep" not in r])
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        for sample in samples:
            key = keys[sample["sample_id"]]
            known = {t["dia_id"] for t in turns_of(sample)}
            for qa in sample["qa"]:
                if int(qa.get("category", 0)) not in CATEGORIES or not evidence_of(qa, known):
                    continue
                entry = next(entries)
                assert entry["question"] == qa["question"]
                memories = await ask(http, key, qa["question"], depth)
                entry["deep"] = [{"dia_id": (dia_ids_of(m) or [""])[0], "signals": m["_signals"]}
                                 for m in memories]  # fmt: skip
    print(f"signals pass (limit {depth}): {time.perf_counter() - started:.1f} s", flush=True)


def merged(per_sample: dict[str, dict[int, list[dict[str, float]]]], ids: tuple[str, ...] | None
           ) -> dict[int, list[dict[str, float]]]:  # fmt: skip
    out: dict[int, list[dict[str, float]]] = defaultdict(list)
    for sample_id, per_category in per_sample.items():
        if ids is None or sample_id in ids:
            for category, rows in per_category.items():
                out[category].extend(rows)
    return out


COLUMNS = [*(f"R@{k}" for k in KS), "hit@10", "tokens@10"]


def summarise(
    per_category: dict[int, list[dict[str, float]]], names: dict[int, str] = CATEGORIES
) -> dict[str, dict[str, float]]:
    """Mean of each figure per category, per type (when the questions have one) and overall,
    with the number of questions."""
    table: dict[str, dict[str, float]] = {}
    everything = [row for rows in per_category.values() for row in rows]
    by_type: dict[str, list[dict[str, float]]] = defaultdict(list)
    for row in everything:
        if row.get("type"):
            by_type[str(row["type"])].append(row)
    for name, rows in [*((f"{c} {names[c]}", per_category[c]) for c in sorted(per_category)),
                       *((f"  {t}", by_type[t]) for t in sorted(by_type)),
                       ("overall", everything)]:  # fmt: skip
        table[name] = {col: statistics.fmean(r[col] for r in rows) for col in COLUMNS}
        table[name]["questions"] = len(rows)
    return table


def print_table(table: dict[str, dict[str, float]]) -> None:
    width = max(16, *(len(name) + 1 for name in table))
    print(" " * width + "".join(f"{c:>10s}" for c in [*COLUMNS, "questions"]))
    for name, figures in table.items():
        print(f"{name:{width}s}" + "".join(
            f"{figures[c]:10.3f}" if c != "tokens@10" else f"{figures[c]:10.0f}" for c in COLUMNS
        ) + f"{figures['questions']:10.0f}")  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] * 1e3 if ordered else 0.0


def report(result: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, Any]:
    per_sample = result["per_sample"]
    names = category_names(samples)
    table = summarise(merged(per_sample, None), names)
    print_table(table)
    split = {}
    for name, ids in splits_of(samples):
        chosen = merged(per_sample, ids)
        if chosen:
            split[name] = summarise(chosen, names)
            print(f"\n{name}:")
            print_table(split[name])
    lat = result["latencies"]
    p50, p95 = percentile(lat, 0.5), percentile(lat, 0.95)
    if lat:  # a baseline ranked in process has none
        print(f"\nrecall over HTTP: p50 {p50:.1f} ms, p95 {p95:.1f} ms ({len(lat)} queries)")
    overall = table["overall"]
    if is_beam(samples) or not lat:  # LoCoMo's targets are Engram's, for LoCoMo
        return {"table": table, "split": split, "latency_ms": {"p50": p50, "p95": p95}}
    print("targets: " + ", ".join(
        f"{k} >= {v} ({'met' if overall[k] >= v else 'NOT met'}: {overall[k]:.3f})"
        for k, v in TARGETS.items()
    ) + "; baselines R@10: " + ", ".join(f"{k} {v}" for k, v in BASELINES_R10.items()))  # fmt: skip
    return {"table": table, "split": split, "latency_ms": {"p50": p50, "p95": p95}}


# name -> (Settings.recall changes, stores its own copy of the turns, sends occurred_at)
CONFIGS: dict[str, tuple[dict[str, Any], bool, bool]] = {
    "default": ({}, False, False),
    "no-second-round": ({"second_round": False}, False, False),
    "no-event-time": ({"event_time": False}, False, False),
    "first-round": ({"second_round": False, "event_time": False}, False, False),
    "no-speaker": ({"speaker": False}, False, False),
    "memoclaw-access": ({"counts_access": True}, True, False),
    "event-time-field": ({}, True, True),
    # keyword_match's form before issue 37: the plain IDF sum (ENGRAM_RECALL_KEYWORD_PASSAGES=0)
    "idf-keyword": ({"keyword_passages": False}, False, False),
    # a long memory scored by its best window (ENGRAM_RECALL_PASSAGES=1; its passages must be
    # stored: a database stored without them gets them from `engram reembed` with it set)
    "passages": ({"passages": True}, False, False),
}


async def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo evidence recall through Engram's API")
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--samples", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--out", type=Path, default=RESULTS / "locomo.json")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated, of: {', '.join(CONFIGS)}")  # fmt: skip
    parser.add_argument(
        "--embed-onnx-dir",
        type=Path,
        help="another local model (ENGRAM_EMBED_ONNX_DIR) instead of MiniLM",
    )
    parser.add_argument(
        "--embed-static-dir",
        type=Path,
        help="a model2vec static model (ENGRAM_EMBED_STATIC_DIR) instead of MiniLM",
    )
    parser.add_argument(
        "--min-similarity",
        type=float,
        help="send this similarity floor with every recall (a floor sweep on one --db)",
    )
    parser.add_argument(
        "--foreign",
        action="store_true",
        help="also ask each question in another conversation's wallet and count the results",
    )
    parser.add_argument(
        "--embed-float", action="store_true", help="MiniLM in float, not int8 (ENGRAM_EMBED_INT8=0)"
    )
    parser.add_argument("--ranks", type=Path, help="also write each question's ranked turn ids")
    parser.add_argument(
        "--baselines", action="store_true", help="also dense-only, BM25 and RRF, same database"
    )
    parser.add_argument(
        "--db",
        type=Path,
        help="keep the database in DIR; a later run with the same DIR and dataset reuses its"
        " stored turns (the configurations that share them) instead of storing them again",
    )
    parser.add_argument(
        "--ranks-depth",
        type=int,
        default=200,
        help="with --ranks: the signals pass's limit (0: none)",
    )
    args = parser.parse_args()
    global RANKS, FLOOR
    RANKS = [] if args.ranks else None
    FLOOR = args.min_similarity
    samples = load_samples(args.dataset)
    if args.samples:
        samples = samples[: args.samples]
    root = args.db or Path(tempfile.mkdtemp(prefix="engram-locomo-"))
    root.mkdir(parents=True, exist_ok=True)
    stored = root / f"keys-{args.dataset.name}-{args.samples}.json"
    server = EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        embedding = EmbedderSettings(
            onnx_dir=args.embed_onnx_dir,
            int8=not args.embed_float,
            static_dir=args.embed_static_dir,
        )
        probe = build_embedder(embedding)  # the database is made for its dimension
        await asyncio.to_thread(upgrade_to_head, dsn, probe.dims, probe.model_name)
        from tests.support.server import served
        from tests.support.settings import changed

        base = Settings(
            database=DatabaseSettings(url=dsn),
            limits=LimitsSettings(free_tier_calls=10**9, rate_limit_per_minute=0),
            embedder=embedding,
        )
        shared_keys: dict[str, str] | None = (
            json.loads(stored.read_text()) if args.db and stored.exists() else None
        )
        if shared_keys:
            print(f"reusing the turns stored in {root} ({stored.name})", flush=True)
        figures = {}
        for name in args.configs.split(","):
            changes, own_copy, event_time = CONFIGS[name]
            print(f"\n== {name} ==", flush=True)
            with served(create_app(changed(base, recall=changes))) as url:
                if own_copy:
                    keys = await store_all(url, samples, event_time)
                else:
                    if not shared_keys:
                        shared_keys = await store_all(url, samples)
                        stored.write_text(json.dumps(shared_keys))
                    keys = shared_keys
                if name == "default" and args.baselines:
                    results, baseline_ranks = await baselines(dsn, samples, keys)
                    for baseline, result in results.items():
                        print(f"\n== {baseline} ==", flush=True)
                        figures[baseline] = report(result, samples)
                    if args.ranks:
                        path = args.ranks.with_suffix(".baselines.json")
                        path.write_text(json.dumps(baseline_ranks))
                    print(f"\n== {name} (through the API) ==", flush=True)
                figures[name] = report(await evaluate(url, samples, keys), samples)
                if args.foreign:
                    figures[name]["foreign"] = await foreign(url, samples, keys)
                if name == "default" and RANKS is not None and args.ranks_depth:
                    await deep_ranks(url, samples, keys, args.ranks_depth, RANKS)
        if "default" in figures and "first-round" in figures:
            ratio = (
                figures["default"]["latency_ms"]["p50"]
                / figures["first-round"]["latency_ms"]["p50"]
            )
            print(f"\nrecall p50, default / first round only (same run): {ratio:.2f}x")
        save(args.out, figures)
        if args.ranks and RANKS is not None:
            args.ranks.write_text(json.dumps(RANKS))
    finally:
        server.stop()
        if not args.db:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
