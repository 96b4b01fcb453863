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

Configurations (`--configs`, comma-separated; default: all), each served on the same database:
- default: Engram as shipped;
- no-second-round, no-event-time, first-round, no-speaker: each retrieval step turned off, to
  show what it adds (ENGRAM_RECALL_SECOND_ROUND=0, ENGRAM_RECALL_EVENT_TIME=0, both;
  ENGRAM_RECALL_SPEAKER=0);
- memoclaw-access: every recalled memory counted as accessed, MemoClaw's accounting
  (ENGRAM_RECALL_COUNTS_ACCESS=1), on a fresh copy of the turns (its recalls change the data);
- event-time-field: the default, with each turn also sending `occurred_at` (its session date).
The default's recall over HTTP is timed next to the first round's, same run.

Run: .venv/bin/python bench/locomo.py ../shared/bench/locomo/locomo-dev.json
"""

from __future__ import annotations

import argparse
import asyncio
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
BASELINES_R10 = {"BM25": 0.611, "dense MiniLM": 0.545, "RRF(60)": 0.625}
TARGET_R10 = 0.72
# every question's ranked turn ids, when --ranks asks for them (for looking at misses)
RANKS: list[dict[str, Any]] | None = None
DIA_ID_RE = re.compile(r"D(\d+):(\d+)")


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


async def store_conversation(
    http: httpx.AsyncClient, key: str, turns: list[dict[str, Any]], event_time: bool = False
) -> None:
    by_session: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for turn in turns:
        by_session[turn["session"]].append(turn)
    for session, items in by_session.items():
        for start in range(0, len(items), 100):
            batch = [
                {"content": t["content"], "namespace": f"session-{session}",
                 "metadata": {"dia_id": t["dia_id"]},
                 **({"occurred_at": t["occurred_at"]} if event_time and t["occurred_at"] else {})}
                for t in items[start : start + 100]
            ]  # fmt: skip
            r = await http.post("/v1/store/batch", json={"memories": batch},
                                headers={"x-wallet-auth": sign_header(key)})  # fmt: skip
            r.raise_for_status()


async def ask(
    http: httpx.AsyncClient, key: str, question: str, k: int, auth: str | None = None
) -> list[dict[str, Any]]:
    """Recall the top k; `auth` is a header signed beforehand (so timing covers the POST only)."""
    r = await http.post("/v1/recall", json={"query": question, "limit": k},
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
            await store_conversation(http, key, turns_of(sample), event_time)
            print(f"{sample['sample_id']}: stored in {time.perf_counter() - started:.1f} s",
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
                per_category[category].append(row)
                if RANKS is not None:
                    RANKS.append({"sample": sample["sample_id"], "category": category,
                                  "question": qa["question"], "evidence": evidence,
                                  "ranked": ranked})  # fmt: skip
            per_sample[sample["sample_id"]] = per_category
    return {"per_sample": per_sample, "latencies": latencies}


def merged(per_sample: dict[str, dict[int, list[dict[str, float]]]], ids: tuple[str, ...] | None
           ) -> dict[int, list[dict[str, float]]]:  # fmt: skip
    out: dict[int, list[dict[str, float]]] = defaultdict(list)
    for sample_id, per_category in per_sample.items():
        if ids is None or sample_id in ids:
            for category, rows in per_category.items():
                out[category].extend(rows)
    return out


COLUMNS = [*(f"R@{k}" for k in KS), "hit@10", "tokens@10"]


def summarise(per_category: dict[int, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Mean of each figure per category and overall, with the number of questions."""
    table: dict[str, dict[str, float]] = {}
    everything = [row for rows in per_category.values() for row in rows]
    for name, rows in [*((f"{c} {CATEGORIES[c]}", per_category[c]) for c in sorted(per_category)),
                       ("overall", everything)]:  # fmt: skip
        table[name] = {col: statistics.fmean(r[col] for r in rows) for col in COLUMNS}
        table[name]["questions"] = len(rows)
    return table


def print_table(table: dict[str, dict[str, float]]) -> None:
    print(f"{'':16s}" + "".join(f"{c:>10s}" for c in [*COLUMNS, "questions"]))
    for name, figures in table.items():
        print(f"{name:16s}" + "".join(
            f"{figures[c]:10.3f}" if c != "tokens@10" else f"{figures[c]:10.0f}" for c in COLUMNS
        ) + f"{figures['questions']:10.0f}")  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] * 1e3 if ordered else 0.0


def report(result: dict[str, Any]) -> dict[str, Any]:
    per_sample = result["per_sample"]
    table = summarise(merged(per_sample, None))
    print_table(table)
    split = {}
    for name, ids in (("fitted on conv-26/30/41", FITTED_ON), ("held out conv-42/43", HELD_OUT)):
        chosen = merged(per_sample, ids)
        if chosen:
            split[name] = summarise(chosen)
            print(f"\n{name}:")
            print_table(split[name])
    lat = result["latencies"]
    p50, p95 = percentile(lat, 0.5), percentile(lat, 0.95)
    print(f"\nrecall over HTTP: p50 {p50:.1f} ms, p95 {p95:.1f} ms ({len(lat)} queries)")
    overall = table["overall"]
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
        "--embed-float", action="store_true", help="MiniLM in float, not int8 (ENGRAM_EMBED_INT8=0)"
    )
    parser.add_argument("--ranks", type=Path, help="also write each question's ranked turn ids")
    args = parser.parse_args()
    global RANKS
    RANKS = [] if args.ranks else None
    samples = json.loads(args.dataset.read_text())
    if args.samples:
        samples = samples[: args.samples]
    root = Path(tempfile.mkdtemp(prefix="engram-locomo-"))
    server = EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        embedding = EmbedderSettings(onnx_dir=args.embed_onnx_dir, int8=not args.embed_float)
        probe = build_embedder(embedding)  # the database is made for its dimension
        await asyncio.to_thread(upgrade_to_head, dsn, probe.dims, probe.model_name)
        from tests.support.server import served
        from tests.support.settings import changed

        base = Settings(
            database=DatabaseSettings(url=dsn),
            limits=LimitsSettings(free_tier_calls=10**9, rate_limit_per_minute=0),
            embedder=embedding,
        )
        shared_keys: dict[str, str] | None = None
        figures = {}
        for name in args.configs.split(","):
            changes, own_copy, event_time = CONFIGS[name]
            print(f"\n== {name} ==", flush=True)
            with served(create_app(changed(base, recall=changes))) as url:
                if own_copy:
                    keys = await store_all(url, samples, event_time)
                else:
                    shared_keys = shared_keys or await store_all(url, samples)
                    keys = shared_keys
                figures[name] = report(await evaluate(url, samples, keys))
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
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
