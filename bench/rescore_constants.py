"""The 4-signal score's constants swept from stored ranks: each question's deepest results
re-scored with one constant changed, R@10 printed for the whole split, the fitted and the
held-out conversations, and per category. A look at what a constant would do, not a fit: it
changes nothing.

The ranks come from bench/locomo.py --ranks R.json --ranks-depth 60 (`deep`: every result of a
recall with that limit, with its `_signals`). A result's score is rebuilt from its signals as
app/memory/scoring.py builds it (hybrid × context importance × access boost × type decay ×
event-time and speaker boosts, the second round's carried score kept as measured); the first row,
the constants as they are, gives back the run's own R@10 and R@5.

Rows: the vector weight, the cosine stretched about its median or about 0 (potion-base-8M's
cosines spread 0.083 against MiniLM's 0.105, docs/pages/benchmarks/recall.md), and the keyword
signal scaled.

Run: .venv/bin/python bench/rescore_constants.py R.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rank_analysis import score  # bench/ is on the path

from app.memory import scoring

FITTED = {"conv-26", "conv-30", "conv-41"}  # bench/locomo.py's split check
TOP = 10
Map = Callable[[float], float]


def _same(value: float) -> float:
    return value


def rescored(
    entry: dict[str, Any],
    vector_weight: float = scoring.VECTOR_WEIGHT,
    vector: Map = _same,
    keyword: Map = _same,
) -> list[str]:
    """The question's deep results in the order the changed constants give (each score rebuilt
    by bench/rank_analysis.py's `score` from the signals, mapped)."""
    scored = []
    for result in entry["deep"]:
        s = dict(result["signals"])
        s["vector"] = min(max(vector(s["vector"]), 0.0), 1.0)
        s["keyword"] = keyword(s["keyword"])
        scored.append((score(s, vector_weight=vector_weight), result["dia_id"]))
    scored.sort(key=lambda pair: -pair[0])
    return [dia_id for _, dia_id in scored]


def recall_at(ranked: list[str], evidence: list[str], k: int) -> float:
    return len(set(evidence) & set(ranked[:k])) / len(set(evidence))


def figures(entries: list[dict[str, Any]], **change: Any) -> dict[str, float]:
    by: dict[str, list[float]] = {"all": [], "r5": [], "fitted": [], "held out": []}
    for e in entries:
        if not e["evidence"]:
            continue
        ranked = rescored(e, **change)
        r10 = recall_at(ranked, e["evidence"], TOP)
        by["all"].append(r10)
        by["r5"].append(recall_at(ranked, e["evidence"], 5))
        by["fitted" if e["sample"] in FITTED else "held out"].append(r10)
        by.setdefault(f"category {e['category']}", []).append(r10)
    return {name: sum(values) / len(values) for name, values in sorted(by.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ranks", type=Path, help="bench/locomo.py --ranks output with `deep`")
    args = parser.parse_args()
    entries = json.loads(args.ranks.read_text())
    median = sorted(d["signals"]["vector"] for e in entries for d in e["deep"])
    centre = median[len(median) // 2]
    rows: list[tuple[str, dict[str, Any]]] = [("as is", {})]
    rows += [(f"vector weight {w}", {"vector_weight": w}) for w in (0.45, 0.65, 0.75, 0.85)]
    for stretch in (1.15, 1.27, 1.4):
        for about in (centre, 0.0):
            label = f"cosine x{stretch} about {about:.3f}"
            rows.append((label, {"vector": lambda v, s=stretch, c=about: c + s * (v - c)}))
    rows += [(f"keyword x{f}", {"keyword": lambda k, f=f: k * f}) for f in (0.6, 0.8, 1.2)]
    first = True
    for label, change in rows:
        row = figures(entries, **change)
        if first:
            print(f"{'':32s}" + "".join(f"{name:>12s}" for name in row))
            first = False
        print(f"{label:32s}" + "".join(f"{value:12.3f}" for value in row.values()))


if __name__ == "__main__":
    main()
