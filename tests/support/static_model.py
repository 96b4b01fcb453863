"""A small model2vec static model made for tests, in potion-base-8M's format: MiniLM's
WordPiece tokenizer (shipped with Engram) and a random row per token in a safetensors file. Its
vectors mean nothing, but a text's is the mean of its tokens' rows, so texts sharing words are
close, and the real loader reads it as it reads potion-base-8M."""

from __future__ import annotations

import importlib.resources
import json
import shutil
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from app.ai.embedders import _tokenizer_resource

NATIVE = 16  # the made model's own dimension


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """safetensors' layout: an 8-byte header length, a JSON header, the raw data."""
    header: dict[str, object] = {}
    offset = 0
    for name, array in tensors.items():
        size = array.nbytes
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + size]}  # fmt: skip
        offset += size
    encoded = json.dumps(header).encode()
    with path.open("wb") as out:
        out.write(len(encoded).to_bytes(8, "little"))
        out.write(encoded)
        for array in tensors.values():
            out.write(np.ascontiguousarray(array, dtype=np.float32).tobytes())


def make_static_model(directory: Path, weights: bool = False) -> Path:
    """A small static model: MiniLM's WordPiece tokenizer, a random 16-dim row per token."""
    directory.mkdir(parents=True)
    with importlib.resources.as_file(_tokenizer_resource()) as tokenizer:
        shutil.copy(tokenizer, directory / "tokenizer.json")
    vocab = Tokenizer.from_file(str(directory / "tokenizer.json")).get_vocab_size()
    rng = np.random.default_rng(7)
    tensors = {"embeddings": rng.standard_normal((vocab, NATIVE)).astype(np.float32)}
    if weights:
        tensors["weights"] = rng.uniform(0.5, 2.0, vocab).astype(np.float32)
    write_safetensors(directory / "model.safetensors", tensors)
    return directory
