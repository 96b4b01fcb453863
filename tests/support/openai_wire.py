"""A local HTTP server speaking OpenAI's embeddings and chat-completions wire formats (and the
rerank wire format of TEI, vLLM and llama.cpp), for tests of the remote paths.

Vectors are a hashed bag of words (deterministic, and texts sharing words are similar), so recall
through it is meaningful. Chat completions answer Engram's structured-output requests (chosen by
json_schema name) deterministically: extract echoes each user turn as a fact, merge joins the
memories, summarize keeps the first max_words words. Tests can queue failures, stalls and canned
answers. Every request body is recorded so tests can check what Engram sent.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.support.wire import JsonHandler, LocalServer


def bag_of_words_vector(text: str, dims: int) -> list[float]:
    vector = np.zeros(dims, dtype=np.float64)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dims] += 1.0
    norm = np.linalg.norm(vector)
    return (vector / norm if norm else np.full(dims, dims**-0.5)).tolist()


def _words(text: str) -> int:
    return len(text.split())


def _fake_extract(data: dict[str, Any]) -> dict[str, Any]:
    facts = []
    for message in data.get("conversation", []):
        if message.get("role") != "user":
            continue
        words = [w for w in re.findall(r"[a-z]+", message["content"].lower()) if len(w) >= 3]
        facts.append(
            {
                "content": message["content"],
                "importance": 0.6,
                "memory_type": "general",
                "tags": words[:2] or ["chat"],
            }
        )
    return {"facts": facts}


def _fake_merge(data: dict[str, Any]) -> dict[str, Any]:
    return {"content": " ".join(dict.fromkeys(data["memories"]))}


def _fake_summarize(data: dict[str, Any]) -> dict[str, Any]:
    words = " ".join(data["memories"]).split()
    return {"summary": " ".join(words[: int(data["max_words"])])}


FAKE_ANSWERS = {
    "engram_extract_facts": _fake_extract,
    "engram_merge_memories": _fake_merge,
    "engram_summarize_memories": _fake_summarize,
}


@dataclass
class CannedReply:
    """What the next chat completion answers instead of the fake model."""

    status: int = 200
    content: str | None = None  # the message content verbatim (valid JSON or not)
    total_tokens: int | None = None
    refusal: str | None = None
    finish_reason: str = "stop"
    stall_seconds: float = 0.0  # sleep this long first (client timeouts)


class _Handler(JsonHandler):
    server: OpenAICompatibleServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append({"path": self.path, "body": body})
        if self.path == "/v1/chat/completions":
            return self._chat(body)
        if self.path == "/v1/rerank":
            return self._rerank(body)
        if self.path != "/v1/embeddings":
            return self._reply(404, {"error": {"message": "not found"}})
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dims = int(body.get("dimensions") or 1536)
        data = [
            {"object": "embedding", "index": i, "embedding": bag_of_words_vector(t, dims)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(len(t.split()) for t in texts)
        self._reply(
            200,
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _rerank(self, body: dict[str, Any]) -> None:
        """The rerank wire format (TEI, vLLM, llama.cpp, Infinity, Cohere): each document's
        relevance, best first; a test's set relevance, else the share of the query's words
        the document holds."""
        if self.server.rerank_status != 200:
            return self._reply(self.server.rerank_status, {"error": "reranker down"})
        query = set(re.findall(r"[a-z0-9]+", body["query"].lower()))
        results = []
        for i, doc in enumerate(body["documents"]):
            words = set(re.findall(r"[a-z0-9]+", doc.lower()))
            overlap = len(query & words) / max(len(query), 1)
            results.append({"index": i, "relevance_score": self.server.relevance.get(doc, overlap)})
        results.sort(key=lambda r: r["relevance_score"], reverse=True)
        self._reply(200, {"model": body.get("model", ""), "results": results[: body["top_n"]]})

    def _chat(self, body: dict[str, Any]) -> None:
        canned = self.server.next_canned()
        if canned.stall_seconds:
            time.sleep(canned.stall_seconds)
        if canned.status != 200:
            text = "rate limited" if canned.status == 429 else "upstream exploded"
            headers = {"retry-after": "0"} if canned.status == 429 else {}
            error = {"message": text, "type": "server_error", "code": None}
            return self._reply(canned.status, {"error": error}, headers)
        response_format = body.get("response_format") or {}
        if response_format.get("type") != "json_schema":
            error = {"message": "response_format json_schema required", "type": "invalid_request"}
            return self._reply(400, {"error": error})
        schema_name = response_format["json_schema"]["name"]
        if canned.content is not None or canned.refusal is not None:
            content = canned.content
        elif schema_name in FAKE_ANSWERS:
            data = json.loads(body["messages"][-1]["content"])
            content = json.dumps(FAKE_ANSWERS[schema_name](data))
        else:
            return self._reply(400, {"error": {"message": f"unknown schema {schema_name}"}})
        prompt_tokens = sum(_words(m["content"]) for m in body["messages"])
        completion_tokens = _words(content or "")
        total = canned.total_tokens
        if total is None:
            total = prompt_tokens + completion_tokens
        message = {"role": "assistant", "content": content, "refusal": canned.refusal}
        self._reply(
            200,
            {
                "id": f"chatcmpl-{len(self.server.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": canned.finish_reason,
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": total,
                },
            },
        )


class OpenAICompatibleServer(LocalServer):
    def __init__(self) -> None:
        super().__init__(_Handler)
        self.requests: list[dict[str, Any]] = []
        self._canned: deque[CannedReply] = deque()
        self._lock = threading.Lock()
        self.relevance: dict[str, float] = {}  # the reranker's score of a document, set by a test
        self.rerank_status = 200  # what /v1/rerank answers (not 200: an error, no ranking)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat-completion requests received, oldest first."""
        return [r["body"] for r in self.requests if r["path"] == "/v1/chat/completions"]

    def fail_next(self, count: int, status: int = 500) -> None:
        """The next `count` chat completions answer `status` (429 carries retry-after: 0)."""
        self.queue(*(CannedReply(status=status) for _ in range(count)))

    def queue(self, *replies: CannedReply) -> None:
        """Chat completions answer these, in order, before the fake model answers again."""
        with self._lock:
            self._canned.extend(replies)

    def next_canned(self) -> CannedReply:
        with self._lock:
            return self._canned.popleft() if self._canned else CannedReply()
