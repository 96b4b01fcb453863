"""LoCoMo evidence recall through Engram's HTTP API.

Every dialogue turn of each conversation is stored with POST /v1/store/batch (one wallet per
conversation, the turn id in metadata.dia_id, one namespace per session so store's dedup never
merges two turns of different sessions); every category 1-4 question is asked with POST
/v1/recall; recall@1/5/10/20, hit@10 and the context tokens at k=10 are printed per category and
overall, next to the dataset README's baselines. Questions and turns only: `answer` and
`evidence` are used for scoring, never to build memories or queries.

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
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from app.asgi import create_app
from app.auth.signature import sign_header
from app.config import LOCAL_EMBED_DIMS, Settings
from app.db.embedded import EmbeddedPostgres
from app.db.schema import upgrade_to_head

KS = (1, 5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
BASELINES_R10 = {"BM25": 0.611, "dense MiniLM": 0.545, "RRF(60)": 0.625}
TARGET_R10 = 0.72
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
            turns.append({"dia_id": turn["dia_id"], "session": n, "content": text[:8192]})
        n += 1
    return turns


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
    http: httpx.AsyncClient, key: str, turns: list[dict[str, Any]]
) -> None:
    by_session: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for turn in turns:
        by_session[turn["session"]].append(turn)
    for session, items in by_session.items():
        for start in range(0, len(items), 100):
            batch = [
                {"content": t["content"], "namespace": f"session-{session}",
                 "metadata": {"dia_id": t["dia_id"]}}
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


async def evaluate(base_url: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    per_category: dict[int, list[dict[str, float]]] = defaultdict(list)
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        for sample in samples:
            key = Account.create().key.hex()
            turns = turns_of(sample)
            known = {t["dia_id"] for t in turns}
            started = time.perf_counter()
            await store_conversation(http, key, turns)
            print(f"{sample['sample_id']}: {len(turns)} turns stored in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
            for qa in sample["qa"]:
                category = int(qa.get("category", 0))
                evidence = evidence_of(qa, known)
                if category not in CATEGORIES or not evidence:
                    continue
                t0 = time.perf_counter()
                memories = await ask(http, key, qa["question"], max(KS))
                latencies.append(time.perf_counter() - t0)
                ranked = [d for m in memories for d in dia_ids_of(m)]
                row = score(ranked, evidence, [m["content"] for m in memories[:10]])
                per_category[category].append(row)
    return {"per_category": per_category, "latencies": latencies}


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


def report(result: dict[str, Any]) -> dict[str, Any]:
    columns = COLUMNS
    table = summarise(result["per_category"])
    print(f"\n{'':16s}" + "".join(f"{c:>10s}" for c in [*columns, "questions"]))
    for name, figures in table.items():
        print(f"{name:16s}" + "".join(
            f"{figures[c]:10.3f}" if c != "tokens@10" else f"{figures[c]:10.0f}" for c in columns
        ) + f"{figures['questions']:10.0f}")  # fmt: skip
    lat = sorted(result["latencies"])
    p = lambda q: lat[int(q * (len(lat) - 1))] * 1e3  # noqa: E731
    print(f"\nrecall over HTTP: p50 {p(0.5):.1f} ms, p95 {p(0.95):.1f} ms ({len(lat)} queries)")
    print(f"target R@10 >= {TARGET_R10}; baselines R@10 on this split: "
          + ", ".join(f"{k} {v}" for k, v in BASELINES_R10.items()))  # fmt: skip
    return {"table": table, "latency_ms": {"p50": p(0.5), "p95": p(0.95)}}


async def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo evidence recall through Engram's API")
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--samples", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--out", type=Path, default=Path("bench/results/locomo.json"))
    parser.add_argument(
        "--scoring",
        choices=["contract", "no-access-boost", "both"],
        default="both",
        help="the contract's formula, the ENGRAM_RECALL_ACCESS_BOOST=0 option, or both runs",
    )
    args = parser.parse_args()
    samples = json.loads(args.dataset.read_text())
    if args.samples:
        samples = samples[: args.samples]
    root = Path(tempfile.mkdtemp(prefix="engram-locomo-"))
    server = EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        await asyncio.to_thread(upgrade_to_head, dsn, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
        from tests.conftest import served

        modes = ["contract", "no-access-boost"] if args.scoring == "both" else [args.scoring]
        figures = {}
        for mode in modes:
            settings = Settings(
                database_url=dsn, free_tier_calls=10**9, rate_limit_per_minute=0,
                recall_access_boost=mode == "contract",
            )  # fmt: skip
            print(f"\n== scoring: {mode} ==")
            with served(create_app(settings)) as url:
                figures[mode] = report(await evaluate(url, samples))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2))
        print(f"saved {args.out}")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
