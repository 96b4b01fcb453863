"""Where Engram loses evidence that dense-only retrieval finds, and which signal pushed it down.

Reads two rank files of the same dataset, measured in one sitting:
- bench/locomo.py --ranks ENGRAM.json (--configs default): per question, Engram's scored top 20
  (`ranked`) and the signals pass (`deep`: every result of a recall with a larger limit, in
  order, with its `_signals`);
- the dense-only ranks: bench/locomo.py --baselines --ranks ENGRAM.json writes them beside it
  (ENGRAM.baselines.json: the vectors Engram stored, exact cosine, same run; the default), or
  bench/embedders.py --ranks DENSE.json with --retriever "MiniLM-L6 int8 (Engram)".

A loss is an evidence turn that dense-only ranks in its top 10 and Engram's scored top 10 does
not hold. For each loss, from the signals pass (constants read from app/memory/scoring.py,
none changed):
- where Engram ranks it (its position in the signals pass; absent: below that pass's limit,
  under the similarity floor, or merged by store's dedup, which bench/locomo.py reports);
- counterfactual re-ranking: each signal neutralised alone in every result's score (keyword 0;
  recency 0 for every result, its term removed; context importance 1; type decay 1; event-time
  boost 1; speaker boost 1; second-round carried score 0; and keyword with carried, as the
  carried scores came from seeds the keyword scored), the results re-sorted: the share of
  losses that come back into the top 10. A signal whose removal brings a loss back is one that
  pushed it down (the second round's carried scores are kept as measured, not recomputed);
- the items above it: of the results Engram ranks above the loss within its top 10, the share
  whose cosine is lower than the loss's (dense would have put them below it), and of those,
  the share each signal alone accounts for (neutralising it puts the loss above the item).
Printed per BEAM type (or LoCoMo category) and overall. A look at the ranks, not a fit: it
changes nothing.

Run: .venv/bin/python bench/rank_analysis.py ENGRAM_RANKS.json ENGRAM_RANKS.baselines.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from locomo import BEAM_CATEGORIES, CATEGORIES, DENSE_ONLY  # bench/ is on the path

from app.memory.scoring import (
    CONTEXT_IMPORTANCE_FLOOR,
    KEYWORD_WEIGHT,
    RECENCY_WEIGHT,
    VECTOR_WEIGHT,
)

SHORT = {"keyword": "kw", "recency": "recency", "context_imp": "ctx_imp", "type_decay": "decay",
         "event_time": "event", "speaker": "speaker", "carried": "carried",
         "keyword+carried": "kw+carried"}  # fmt: skip
TOP = 10
# each signal neutralised alone: the name printed, and what it does to a result's signals
SIGNALS = (
    "keyword",
    "recency",
    "context_imp",
    "type_decay",
    "event_time",
    "speaker",
    "carried",
    "keyword+carried",
)  # the last: both at once (carried scores came from keyword-fed seeds)


def score(s: dict[str, Any], off: str | None = None, vector_weight: float = VECTOR_WEIGHT) -> float:
    """A result's score recomputed from its `_signals` (app/memory/scoring.py), with the signal
    `off` neutralised (bench/rescore_constants.py also changes the vector weight)."""
    offs = set((off or "").split("+"))
    vector = s["vector"]
    keyword = 0.0 if "keyword" in offs else s["keyword"]
    recency = 0.0 if "recency" in offs else s["recency"]
    hybrid = vector * vector_weight + keyword * KEYWORD_WEIGHT + recency * RECENCY_WEIGHT
    relevance = (vector * vector_weight + keyword * KEYWORD_WEIGHT) / (
        vector_weight + KEYWORD_WEIGHT
    )
    context = max(s["effective_importance"] * (0.5 + 0.5 * max(relevance, 0.0)),
                  CONTEXT_IMPORTANCE_FLOOR)  # fmt: skip
    if "context_imp" in offs:
        context = 1.0
    own = hybrid * context * s["access_boost"]
    own *= 1.0 if "type_decay" in offs else s["type_decay"]
    own *= 1.0 if "event_time" in offs else s.get("event_time_boost", 1.0)
    own *= 1.0 if "speaker" in offs else s.get("speaker_boost", 1.0)
    carried = 0.0 if "carried" in offs else s.get("carried", 0.0)
    return max(own, carried)


def analyse(engram: list[dict[str, Any]], dense: list[dict[str, Any]]) -> dict[str, Any]:
    """Per group (BEAM type or category), the losses and what pushed them down."""
    dense_by = {(r["sample"], r["question"]): r for r in dense}
    groups: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    for entry in engram:
        other = dense_by.get((entry["sample"], entry["question"]))
        if other is None or "deep" not in entry:
            continue
        names = BEAM_CATEGORIES if entry.get("type") else CATEGORIES
        group = entry.get("type") or f"{entry['category']} {names[entry['category']]}"
        for name in (group, "overall"):
            groups[name]["questions"] += 1
        ours, theirs = set(entry["ranked"][:TOP]), set(other["ranked"][:TOP])
        lost = [e for e in entry["evidence"] if e in theirs and e not in ours]
        gained = [e for e in entry["evidence"] if e in ours and e not in theirs]
        deep = entry["deep"]
        position = {d["dia_id"]: i for i, d in enumerate(deep)}
        for name in (group, "overall"):
            groups[name]["lost"] += len(lost)
            groups[name]["gained"] += len(gained)
            groups[name]["questions with a loss"] += bool(lost)
        for evidence in lost:
            at = position.get(evidence)
            for name in (group, "overall"):
                if at is None:
                    groups[name]["absent"] += 1
                else:
                    groups[name]["rank sum"] += at + 1
                    groups[name]["ranked"] += 1
            if at is None:
                continue
            mine = deep[at]["signals"]
            for off in SIGNALS:  # counterfactual re-ranking, one signal off
                scores = sorted((score(d["signals"], off) for d in deep), reverse=True)
                back = scores.index(score(mine, off)) < TOP
                for name in (group, "overall"):
                    groups[name][f"back:{off}"] += back
            above = [d["signals"] for d in deep[: min(at, TOP)]]
            culprits = [s for s in above if s["vector"] < mine["vector"]]
            for name in (group, "overall"):
                groups[name]["above"] += len(above)
                groups[name]["above, lower cosine"] += len(culprits)
            for s in culprits:
                for off in SIGNALS:
                    flips = score(mine, off) >= score(s, off)
                    for name in (group, "overall"):
                        groups[name][f"flip:{off}"] += flips
                # the evidence's vector edge is worth less than what the item has on top of it
                for name in (group, "overall"):
                    groups[name]["culprit keyword higher"] += s["keyword"] > mine["keyword"]
                    groups[name]["culprit carried"] += s.get("carried", 0.0) > 0
    return groups


def print_report(groups: dict[str, Any]) -> None:
    names = [*sorted(g for g in groups if g != "overall"), "overall"]
    width = max(len(n) for n in names) + 2
    head = ["qs", "lost", "gained", "q lost", "absent", "mean rank"]
    head += [f"b:{SHORT[s]}" for s in SIGNALS]
    print("Losses (evidence in dense-only's top 10, not in Engram's) and the share that comes "
          "back into Engram's top 10 with one signal neutralised (b:):")  # fmt: skip
    print("group".ljust(width) + " ".join(h[:11].rjust(11) for h in head))
    for name in names:
        g = groups[name]
        ranked = max(g["ranked"], 1)
        cells = [g["questions"], g["lost"], g["gained"], g["questions with a loss"], g["absent"],
                 g["rank sum"] / ranked]  # fmt: skip
        cells += [g[f"back:{s}"] / ranked for s in SIGNALS]
        print(name.ljust(width) + " ".join(
            f"{c:11.0f}" if i < 5 else f"{c:11.2f}" for i, c in enumerate(cells)))  # fmt: skip
    print("\nItems above a loss in Engram's top 10: how many have a lower cosine than the loss, "
          "and of those the share each signal alone puts above it (f:):")  # fmt: skip
    head = ["above", "lower cos", "kw higher", "carried"] + [f"f:{SHORT[s]}" for s in SIGNALS]
    print("group".ljust(width) + " ".join(h[:11].rjust(11) for h in head))
    for name in names:
        g = groups[name]
        culprits = max(g["above, lower cosine"], 1)
        cells = [g["above"], g["above, lower cosine"], g["culprit keyword higher"] / culprits,
                 g["culprit carried"] / culprits]  # fmt: skip
        cells += [g[f"flip:{s}"] / culprits for s in SIGNALS]
        print(name.ljust(width) + " ".join(
            f"{c:11.0f}" if i < 2 else f"{c:11.2f}" for i, c in enumerate(cells)))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("engram", type=Path, help="bench/locomo.py --ranks output")
    parser.add_argument("dense", type=Path, help="bench/embedders.py --ranks output")
    parser.add_argument("--retriever", default=DENSE_ONLY, help="which retriever of the dense file")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    engram = json.loads(args.engram.read_text())
    dense = json.loads(args.dense.read_text())[args.retriever]
    groups = analyse(engram, dense)
    print_report(groups)
    if args.json:
        args.json.write_text(json.dumps(groups, indent=1))


if __name__ == "__main__":
    main()
