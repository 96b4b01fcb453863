"""The store-time classifier's figures (issue 39, docs/pages/guides/memory-poisoning.md): the
share of the poisoning corpus it flags (tests/support/poisoning.py, every attack in every
carrier), the share of LoCoMo's dev dialogue turns it flags (every turn: false positives, with the
examples), and what it costs per memory (p50 / p95 over both sets, in process, one core).

Run: .venv/bin/python bench/poisoning.py [../shared/bench/locomo/locomo-dev.json]
Writes bench/results/poisoning.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.guard.classifier import classify
from bench.provenance import save
from tests.support.poisoning import ATTACKS, HELD_OUT, embedded

RESULTS = Path(__file__).resolve().parent / "results"
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo" / "locomo-dev.json"
TIMING_ROUNDS = 5  # each text classified this many times; the per-text median is kept


def locomo_turns(path: Path) -> list[str]:
    """Every dialogue turn of every session of every conversation."""
    turns: list[str] = []
    for sample in json.loads(path.read_text()):
        for name, session in sample["conversation"].items():
            if name.startswith("session_") and isinstance(session, list):
                turns.extend(str(turn["text"]) for turn in session)
    return turns


def timed(texts: list[str]) -> list[float]:
    """Microseconds per text: the median of TIMING_ROUNDS runs each."""
    classify("warm up")
    per_text = []
    for text in texts:
        runs = []
        for _ in range(TIMING_ROUNDS):
            start = time.perf_counter()
            classify(text)
            runs.append((time.perf_counter() - start) * 1e6)
        per_text.append(statistics.median(runs))
    return per_text


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locomo", type=Path, nargs="?", default=LOCOMO)
    parser.add_argument("--out", type=Path, default=RESULTS / "poisoning.json")
    args = parser.parse_args()

    corpus = embedded()
    missed = [(kind, text) for kind, text in corpus if not classify(text)]
    wrong_rule = [(kind, text) for kind, text in corpus
                  if classify(text) and kind not in {f.rule for f in classify(text)}]  # fmt: skip
    per_class = Counter(kind for kind, _ in corpus)
    missed_per_class = Counter(kind for kind, _ in missed)
    turns = locomo_turns(args.locomo)
    false_positives = [(t, [f.rule for f in classify(t)]) for t in turns if classify(t)]
    times = timed([t for _, t in corpus] + turns)
    figures: dict[str, Any] = {
        "corpus": {
            "attacks": len(ATTACKS),
            "texts": len(corpus),
            "flagged": len(corpus) - len(missed),
            "flagged_share": round((len(corpus) - len(missed)) / len(corpus), 4),
            "flagged_under_another_rule": len(wrong_rule),
            "per_class": {
                k: {"texts": n, "missed": missed_per_class[k]} for k, n in sorted(per_class.items())
            },
            "missed": [text for _, text in missed],
        },
        "held_out": {
            "attacks": len(HELD_OUT),
            "flagged": sum(bool(classify(t)) for _, t in HELD_OUT),
            "flagged_share": round(sum(bool(classify(t)) for _, t in HELD_OUT) / len(HELD_OUT), 4),
            "missed": [t for _, t in HELD_OUT if not classify(t)],
        },
        "locomo_dev": {
            "turns": len(turns),
            "flagged": len(false_positives),
            "flagged_share": round(len(false_positives) / max(len(turns), 1), 4),
            "examples": [{"text": t, "rules": r} for t, r in false_positives[:20]],
        },
        "classifier_us_per_memory": {
            "texts": len(times),
            "p50": percentile(times, 0.5),
            "p95": percentile(times, 0.95),
            "p99": percentile(times, 0.99),
            "max": round(max(times), 1),
        },
    }
    print(json.dumps({k: v for k, v in figures.items() if k != "corpus"}, indent=2))
    print(f"corpus: {figures['corpus']['flagged']}/{figures['corpus']['texts']} flagged")
    save(args.out, figures)


if __name__ == "__main__":
    main()
