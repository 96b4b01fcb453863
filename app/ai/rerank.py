"""The optional rerank stage's model: a cross-encoder served over HTTP in the rerank wire format
that TEI, vLLM, llama.cpp's server and Infinity share with Cohere and Jina:

    POST {base_url}/rerank {"model", "query", "documents": [...], "top_n", "return_documents"}
    -> {"results": [{"index": i, "relevance_score": s}, ...]}

No cross-encoder ships with Engram (no package registry reachable here distributes one), so the
stage runs only where an operator serves one. Any failure (unreachable, slow, an error status, a
reply that does not score every document) is a RerankUnavailable: recall then keeps its own
order and says so, it never fails for the reranker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from app.config import RecallSettings

__all__ = ["HttpReranker", "RerankUnavailable", "Reranker", "build_reranker"]


class RerankUnavailable(RuntimeError):
    """The reranker gave no usable scores; the message says why."""


class Reranker(Protocol):
    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """Each document's relevance to the query, in the documents' order."""
        ...


class HttpReranker:
    def __init__(
        self, base_url: str, model: str | None, api_key: str | None, timeout: float
    ) -> None:
        self.url = base_url.rstrip("/") + "/rerank"
        self.model = model
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=timeout, headers=headers)

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        body: dict[str, Any] = {"query": query, "documents": list(documents),
                                "top_n": len(documents), "return_documents": False}  # fmt: skip
        if self.model:
            body["model"] = self.model
        try:
            response = await self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise RerankUnavailable(f"{self.url}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise RerankUnavailable(f"{self.url}: status {response.status_code}")
        return _scores(response, len(documents))

    async def aclose(self) -> None:
        await self._client.aclose()


def _scores(response: httpx.Response, count: int) -> list[float]:
    """One score per document, by index; a reply that leaves one out is no ranking."""
    try:
        results = response.json()["results"]
        scores = {int(r["index"]): float(r["relevance_score"]) for r in results}
    except (ValueError, KeyError, TypeError) as exc:
        raise RerankUnavailable("the reranker's reply is not in the rerank wire format") from exc
    if set(scores) != set(range(count)):
        raise RerankUnavailable(f"the reranker scored {len(scores)} of {count} documents")
    return [scores[i] for i in range(count)]


def build_reranker(settings: RecallSettings) -> HttpReranker | None:
    """The configured reranker, or None."""
    if not settings.rerank_base_url:
        return None
    return HttpReranker(
        settings.rerank_base_url,
        settings.rerank_model,
        settings.rerank_api_key,
        float(settings.rerank_timeout_seconds),
    )
