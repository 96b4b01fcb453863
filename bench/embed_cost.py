"""CPU per text of Engram's local embedders, by text length: what a recall's query and a store's
memory cost the embedding thread, with nothing else in the way (no server; the hand-off to the
model's thread counted, as a request pays it).

The int8 MiniLM (the default) and, when its directory is given or in the model cache,
potion-base-8M; each text embedded alone, as a request embeds it, timed by the process's CPU
clock over --runs runs after a warm-up. Texts are a short query (14 tokens) and two memories
(37 and ~110 tokens) of ordinary prose.

Run: .venv/bin/python bench/embed_cost.py [--runs 300] [--static-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from app.ai.embedders import Embedder, LocalMiniLMEmbedder
from app.ai.int8 import default_cache_dir
from app.ai.static import StaticEmbedder

TEXTS = {
    "query": "when does the harbour ferry leave on sundays and who drives it",
    "memory": "Caroline said she went to the LGBTQ support group yesterday and it was really"
    " powerful, she met people who share her story and felt accepted for the first time in a"
    " long while",
    "long memory": " ".join(
        [
            "The quarterly review moved to the second floor meeting room because the projector"
            " on the fourth floor broke again, and facilities said the new one arrives in two"
            " weeks; until then every team books the second floor through the shared calendar,"
            " and anyone presenting should bring their own adapter and test it the day before."
        ]
        * 2
    ),
}


async def cpu_ms_per_text(embedder: Embedder, text: str, runs: int) -> float:
    """The process's CPU per `embed([text])`, the model's thread and the hand-off to it
    included, as a request pays it."""
    for _ in range(20):
        await embedder.embed([text])
    started = time.process_time()
    for _ in range(runs):
        await embedder.embed([text])
    return (time.process_time() - started) / runs * 1000


async def table(embedders: dict[str, Embedder], runs: int, minilm: LocalMiniLMEmbedder) -> None:
    assert minilm._tokenizer is not None
    print(f"CPU ms per text, each embedded alone, {runs} runs (process CPU clock)")
    print(f"{'text':<12}{'tokens':>8}" + "".join(f"{name:>18}" for name in embedders))
    for name, text in TEXTS.items():
        tokens = len(minilm._tokenizer.encode(text).ids)
        cells = [await cpu_ms_per_text(e, text, runs) for e in embedders.values()]
        print(f"{name:<12}{tokens:>8}" + "".join(f"{c:>18.3f}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--static-dir", type=Path, default=None)
    args = parser.parse_args()
    embedders: dict[str, Embedder] = {"int8 MiniLM": LocalMiniLMEmbedder()}
    static_dir = args.static_dir or default_cache_dir() / "potion-base-8M"
    if (static_dir / "model.safetensors").is_file():
        embedders["potion-base-8M"] = StaticEmbedder(static_dir)
    minilm = embedders["int8 MiniLM"]
    assert isinstance(minilm, LocalMiniLMEmbedder)
    minilm._ensure_loaded()
    asyncio.run(table(embedders, args.runs, minilm))


if __name__ == "__main__":
    main()
