"""What embedding a memory's passages costs at store, by length (issue 37, point 2).

A memory past MiniLM's window (256 tokens) is embedded in overlapping windows (64 tokens of
overlap): its first window is the memory's own vector, as before; the rest are its passages
(app/ai/embedders.py `tails`, app/memory/service.py `store_passages`). Store cost is the model's
time, so it grows with the windows. For each length: the windows, the model time of the first
window alone (what a store cost before) and of all windows, CPU time (the machine is shared),
median of --repeat runs, one text per call as a single store sends it; then a batch of 100
short memories (LoCoMo-sized turns, and 400-character ones): the model time of the batch,
and what looking for passages adds to it (a tokenisation of each text over 254 characters, no
embedding). Texts are the project's own prose: the README and the docs pages (docs/pages/).

Run: .venv/bin/python bench/store_cost.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import save  # bench/ is on the path: the scripts run from it

from app.ai.embedders import LocalMiniLMEmbedder

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = (250, 1000, 1500, 2000, 4000, 8000)  # characters (a memory holds at most 8,192)


def prose() -> list[str]:
    """The README's and the docs pages' sentences, markup stripped: real English of varied
    length (the README alone, before the docs site took most of its text)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "pages").rglob("*.md"))]
    text = re.sub(r"[`|#*\[\]()_>-]+", " ", "\n".join(p.read_text() for p in pages))
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 5]


def text_of(sentences: list[str], start: int, chars: int) -> str:
    out: list[str] = []
    i = start
    while sum(len(s) + 1 for s in out) < chars:
        out.append(sentences[i % len(sentences)])
        i += 1
    return " ".join(out)[:chars]


async def timed(repeat: int, run: Any) -> float:
    """The median CPU time of `run` (this process, every thread): the machine is shared, so
    wall time measures the neighbours as much as the model."""
    runs = []
    for _ in range(repeat):
        t = time.process_time()
        await run()
        runs.append(time.process_time() - t)
    return statistics.median(runs) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/store-cost.json")
    args = parser.parse_args()
    embedder = LocalMiniLMEmbedder()
    await embedder.warm()
    sentences = prose()
    by_length = []
    print("chars  windows  first window CPU ms  all windows CPU ms  ratio")
    for n, chars in enumerate(LENGTHS):
        text = text_of(sentences, 37 * n, chars)
        [tails] = await embedder.tails([text])
        head = await timed(args.repeat, lambda text=text: embedder.embed([text]))

        async def whole(text: str = text) -> None:
            [found] = await embedder.tails([text])
            await embedder.embed([text, *found])

        full = await timed(args.repeat, whole)
        by_length.append(
            {"chars": chars, "windows": 1 + len(tails), "first_ms": head, "all_ms": full}
        )
        print(f"{chars:5d}  {1 + len(tails):7d}  {head:19.1f}  {full:18.1f}  {full / head:5.2f}")
    batches = []
    for chars in (150, 400):
        texts = [text_of(sentences, 11 * i, chars) for i in range(100)]
        embed_ms = await timed(args.repeat, lambda texts=texts: embedder.embed(texts))
        tails_ms = await timed(args.repeat, lambda texts=texts: embedder.tails(texts))
        found = sum(len(t) for t in await embedder.tails(texts))
        batches.append(
            {"chars": chars, "embed_ms": embed_ms, "tails_ms": tails_ms, "passages": found}
        )
        print(
            f"batch of 100 x {chars} chars: embedding {embed_ms:.0f} CPU ms, looking for passages"
            f" {tails_ms:.1f} ms (+{100 * tails_ms / embed_ms:.1f} %), passages {found}"
        )
    save(args.out, {"by_length": by_length, "batch_of_100": batches})


if __name__ == "__main__":
    asyncio.run(main())
