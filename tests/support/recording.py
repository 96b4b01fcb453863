"""A tiny HTTP server that records what clients send (method, path, headers, JSON body) and
answers 200 with a fixed JSON body: for checking what a plugin puts on the wire."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.wire import LocalServer


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Recorder:
    url: str
    requests: list[Recorded] = field(default_factory=list)


@contextlib.contextmanager
def recording_server(answer: Any = None) -> Iterator[Recorder]:
    recorder = Recorder(url="")

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            recorder.requests.append(Recorded(
                self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                json.loads(raw) if raw else None,
            ))  # fmt: skip
            payload = json.dumps(answer if answer is not None else {}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_DELETE = _record

        def log_message(self, format: str, *args: Any) -> None:
            return None

    with LocalServer(Handler) as server:
        recorder.url = server.url
        yield recorder
