"""How MCP tools reach Engram: one REST request at a time, in process or over HTTP.

Every tool call becomes the REST request a client would send, so validation, wallet scoping,
prices, the free tier, payments and the request-owned transaction are the REST API's own, with
no second copy to drift (see app/mcp/__init__.py for why).

- `InProcessRest` (the /mcp endpoint of `engram serve`) calls the Litestar app's ASGI entry
  directly, with the caller's own auth headers: the REST middleware verifies them again, exactly
  as for any REST request, and the inner request owns its transaction.
- `RemoteRest` (`engram mcp`, stdio) sends the request over HTTP to a configured Engram, signing
  each one with the wallet key from the environment, or sending a session token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast
from urllib.parse import urlencode

import anyio
import httpx
from litestar.types import ASGIApp, Message, Scope

from app.auth.signature import sign_header

# Headers that carry identity, forwarded from the MCP HTTP request to the REST request.
IDENTITY_HEADERS = ("x-wallet-auth", "authorization")
# A REST call answering after this is reported to the agent as a failed tool call.
REMOTE_TIMEOUT_SECONDS = 120.0

QueryValue = str | int | float | bool | Sequence[str] | None


@dataclass(frozen=True)
class RestAnswer:
    status: int
    headers: Mapping[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class RestCall:
    method: str
    path: str
    query: Mapping[str, QueryValue] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # extra ones (payment)

    def encoded_query(self) -> str:
        """Query parameters as the REST API reads them: lists repeated, booleans lower-case."""
        pairs: list[tuple[str, str]] = []
        for name, value in self.query.items():
            if value is None:
                continue
            values = value if isinstance(value, list | tuple) else [value]
            for v in values:
                pairs.append((name, str(v).lower() if isinstance(v, bool) else str(v)))
        return urlencode(pairs)

    def encoded_body(self) -> bytes:
        # Deterministic for the same arguments: a paid retry must fingerprint as the same request.
        return b"" if self.body is None else json.dumps(self.body, separators=(",", ":")).encode()


class Rest(Protocol):
    async def send(self, call: RestCall) -> RestAnswer: ...


class InProcessRest:
    """The REST API of the app serving this MCP request, called through its ASGI entry."""

    def __init__(self, app: ASGIApp, outer: Scope) -> None:
        self.app = app
        self.outer = outer

    def _headers(self, call: RestCall, body: bytes) -> list[tuple[bytes, bytes]]:
        outer = {k.decode("latin-1").lower(): v for k, v in self.outer.get("headers", [])}
        headers = [(name.encode(), outer[name]) for name in IDENTITY_HEADERS if name in outer]
        if "host" in outer:
            headers.append((b"host", outer["host"]))
        if body:
            headers += [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]  # fmt: skip
        headers += [(k.lower().encode(), v.encode()) for k, v in call.headers.items()]
        headers.append((b"x-engram-surface", b"mcp"))  # provenance: written through MCP
        return headers

    async def send(self, call: RestCall) -> RestAnswer:
        body = call.encoded_body()
        query = call.encoded_query()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": call.method,
            "scheme": self.outer.get("scheme", "http"),
            "path": call.path,
            "raw_path": call.path.encode(),
            "root_path": "",
            "query_string": query.encode(),
            "headers": self._headers(call, body),
            "client": self.outer.get("client"),
            "server": self.outer.get("server"),
        }
        status = 500
        headers: dict[str, str] = {}
        chunks: list[bytes] = []
        sent_body = False
        done = anyio.Event()

        async def receive() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return cast(Message, {"type": "http.request", "body": body, "more_body": False})
            await done.wait()  # a disconnect only once the answer is complete
            return cast(Message, {"type": "http.disconnect"})

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for k, v in message.get("headers", []):
                    headers[k.decode("latin-1").lower()] = v.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    done.set()

        try:
            await self.app(scope, receive, send)  # type: ignore[arg-type]
        finally:
            done.set()
        return RestAnswer(status, headers, b"".join(chunks))


class RemoteRest:
    """A configured Engram over HTTP; identity from the environment (key or session token)."""

    def __init__(
        self,
        base_url: str,
        private_key: str | None,
        session_token: str | None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not private_key and not session_token:
            raise ValueError("a wallet private key or a session token is needed")
        self.private_key = private_key
        self.session_token = session_token
        self.client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=REMOTE_TIMEOUT_SECONDS, transport=transport
        )

    def _identity(self) -> dict[str, str]:
        if self.session_token:
            return {"authorization": f"Bearer {self.session_token}"}
        assert self.private_key is not None
        return {"x-wallet-auth": sign_header(self.private_key, int(time.time()))}

    async def send(self, call: RestCall) -> RestAnswer:
        body = call.encoded_body()
        query = call.encoded_query()
        headers = {**self._identity(), **call.headers, "x-engram-surface": "mcp"}
        if body:
            headers["content-type"] = "application/json"
        response = await self.client.request(
            call.method, call.path + (f"?{query}" if query else ""), content=body, headers=headers
        )
        return RestAnswer(
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            response.content,
        )

    async def aclose(self) -> None:
        await self.client.aclose()
