"""A combination tried for issue 40: MiniLM's vectors kept for the memories, but the query
embedded by potion-base-8M (0.05 ms instead of ~5 ms) and mapped into MiniLM's space by a linear
map (least squares, fitted on the turns of LoCoMo's fitted conversations, no question used).
Dense-only R@10 on the LoCoMo dev split, each turn ranked by cosine alone, for MiniLM queries,
potion queries against potion's own vectors, and mapped potion queries against MiniLM's.

    .venv/bin/python bench/static_mapped_query.py ../shared/bench/locomo/locomo-dev.json \
        ~/.cache/engram/models/potion-base-8M
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from locomo import CATEGORIES, evidence_of, load_samples, turns_of  # bench/ is on the path

from app.ai.embedders import LocalMiniLMEmbedder
from app.ai.static import StaticEmbedder

FITTED = {"conv-26", "conv-30", "conv-41"}


async def vectors(embedder: LocalMiniLMEmbedder | StaticEmbedder, texts: list[str]) -> np.ndarray:
    return np.array((await embedder.embed(texts)).vectors)


def recall_at_10(queries: np.ndarray, turns: np.ndarray, evidence: list[list[int]]) -> list[float]:
    found = []
    for query, wanted in zip(queries, evidence, strict=True):
        top = set(np.argsort(-(turns @ query))[:10].tolist())
        found.append(len(top & set(wanted)) / len(wanted))
    return found


async def main(dataset: Path, potion_dir: Path) -> None:
    minilm, potion = LocalMiniLMEmbedder(), StaticEmbedder(potion_dir)
    rows = []
    for sample in load_samples(dataset):
        turns = turns_of(sample)
        index = {t["dia_id"]: i for i, t in enumerate(turns)}
        asked = [q for q in sample["qa"] if int(q.get("category", 0)) in CATEGORIES]
        asked = [q for q in asked if evidence_of(q, set(index))]
        texts, questions = [t["content"] for t in turns], [q["question"] for q in asked]
        rows.append({
            "id": sample["sample_id"],
            "turns_m": await vectors(minilm, texts), "turns_p": await vectors(potion, texts),
            "q_m": await vectors(minilm, questions), "q_p": await vectors(potion, questions),
            "evidence": [[index[d] for d in evidence_of(q, set(index))] for q in asked],
        })  # fmt: skip
    fit = [r for r in rows if r["id"] in FITTED]
    source = np.vstack([r["turns_p"] for r in fit])
    source = np.hstack([source, np.ones((len(source), 1))])
    mapping: np.ndarray = np.linalg.lstsq(source, np.vstack([r["turns_m"] for r in fit]))[0]

    def mapped(q: np.ndarray) -> np.ndarray:
        projected: np.ndarray = np.hstack([q, np.ones((len(q), 1))]) @ mapping
        return projected

    ways: dict[str, Callable[[dict[str, Any]], list[float]]] = {
        "MiniLM query, MiniLM turns": lambda r: recall_at_10(r["q_m"], r["turns_m"], r["evidence"]),
        "potion query, potion turns": lambda r: recall_at_10(r["q_p"], r["turns_p"], r["evidence"]),
        "potion query mapped, MiniLM turns": lambda r: recall_at_10(
            mapped(r["q_p"]), r["turns_m"], r["evidence"]
        ),
    }
    for name, way in ways.items():
        fitted = [x for r in rows if r["id"] in FITTED for x in way(r)]
        held = [x for r in rows if r["id"] not in FITTED for x in way(r)]
        print(f"{name}: R@10 {np.mean(fitted + held):.3f} (fitted {np.mean(fitted):.3f},"
              f" held out {np.mean(held):.3f})")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]).expanduser()))
