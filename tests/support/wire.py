"""Small local HTTP servers that stand in for remote services in tests: a JSON-replying handler
and a server on a free 127.0.0.1 port that runs in a thread for the length of a `with`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class JsonHandler(BaseHTTPRequestHandler):
    """Replies JSON and keeps pytest output clean."""

    def _reply(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        return None


class LocalServer(ThreadingHTTPServer):
    """`handler` on a free port of 127.0.0.1, serving from a thread inside `with`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join()
