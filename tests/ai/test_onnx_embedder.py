"""Another local model from a directory (ENGRAM_EMBED_ONNX_DIR): a sentence-transformers model
exported to ONNX, here the shipped MiniLM copied out of its package, gives MiniLM's float
vectors, its dimension read off the model, and serves store and recall in a database made for
it."""

from __future__ import annotations

import asyncio
import importlib.resources
import shutil
import uuid
from pathlib import Path

import numpy as np
from litestar.testing import AsyncTestClient

from app.ai.embedders import (
    LocalMiniLMEmbedder,
    LocalOnnxEmbedder,
    _model_resource,
    _tokenizer_resource,
    build_embedder,
)
from app.config import EmbedderSettings
from app.db.schema import upgrade_to_head
from tests.support.api import auth, store_memory
from tests.support.db import create_database

TEXTS = ["I adopted a dog last spring", "my puppy chews everything", "the stock market fell"]


def model_directory(tmp_path: Path) -> Path:
    """The shipped MiniLM's ONNX export and tokenizer, as an operator's model directory."""
    directory = tmp_path / "minilm-export"
    directory.mkdir()
    with importlib.resources.as_file(_model_resource()) as model:
        shutil.copy(model, directory / "model.onnx")
    with importlib.resources.as_file(_tokenizer_resource()) as tokenizer:
        shutil.copy(tokenizer, directory / "tokenizer.json")
    return directory


async def test_a_model_directory_embeds_like_the_model_it_holds(tmp_path: Path) -> None:
    embedder = LocalOnnxEmbedder(model_directory(tmp_path))
    assert (embedder.model_name, embedder.dims) == ("minilm-export", 384)
    got = (await embedder.embed(TEXTS)).vectors
    expected = (await LocalMiniLMEmbedder(int8=False).embed(TEXTS)).vectors
    for a, b in zip(got, expected, strict=True):
        assert a.shape == (384,) and abs(float(np.linalg.norm(a)) - 1.0) < 1e-5
        assert float(np.dot(a, b)) > 0.9999
    named = build_embedder(EmbedderSettings(onnx_dir=tmp_path / "minilm-export", model="mine"))
    assert named.model_name == "mine"


async def test_it_serves_store_and_recall(tmp_path: Path, make_app, database_url, wallet) -> None:
    directory = model_directory(tmp_path)
    url = await create_database(database_url, f"engram_onnx_{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(upgrade_to_head, url, 384, "minilm-export")
    app = make_app(database={"url": url}, embedder={"onnx_dir": directory})
    async with AsyncTestClient(app=app) as client:
        for text in TEXTS:
            stored = await store_memory(client, wallet, text)
            assert stored["memory"]["embedding_model"] == "minilm-export"
        r = await client.post("/v1/recall", json={"query": "my new puppy"}, headers=auth(wallet))
        assert r.json()["memories"][0]["content"] != "the stock market fell"
        health = (await client.get("/health")).json()["embedder"]
    assert health == {"model": "minilm-export", "dims": 384}
