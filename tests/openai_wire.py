"""A local HTTP server speaking OpenAI's embeddings wire format, for tests of the remote path.

Vectors are a hashed bag of words (deterministic, and texts sharing words are similar), so recall
through it is meaningful. Every request body is recorded so tests can check what Engram sent.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def bag_of_words_vector(text: str, dims: int) -> list[float]:
    vector = np.zeros(dims, dtype=np.float64)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dims] += 1.0
    norm = np.linalg.norm(vector)
    return (vector / norm if norm else np.full(dims, dims**-0.5)).tolist()


class JsonHandler(BaseHTTPRequestHandler):
    """Replies JSON and keeps pytest output clean."""

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        return None


class _Handler(JsonHandler):
    server: OpenAICompatibleServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append({"path": self.path, "body": body})
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


class OpenAICompatibleServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> OpenAICompatibleServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
