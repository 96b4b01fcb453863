"""/mcp on the API's own port: MCP's streamable HTTP transport mounted in the Litestar app.

The mount is an ordinary route handler, so the wallet middleware authenticates every MCP HTTP
request exactly as a REST one (x-wallet-auth or a bearer session token; 401 otherwise) before
the MCP transport sees it. Each tool call then runs as an in-process REST request carrying the
same identity headers (app/mcp/rest.py), which is where it is rate limited, priced and
committed; the MCP transport requests themselves (initialize, tools/list) are not counted.

Stateless with JSON answers: any worker can serve any MCP request, and there is no session to
hijack or expire; identity is checked on every request.

What the transport is not handed (`guarded`):
- a GET: it would open a server-to-client stream that a stateless server never writes to, held
  for as long as the client likes (600 of them from one wallet were all held). MCP's streamable
  HTTP transport lets a server that offers no stream answer 405, which the mcp SDK's client
  expects (it opens one only once a server gave it a session id);
- a body over the REST API's size limit (413), nested deeper than its depth bound or not UTF-8
  (400, JSON-RPC -32700, as the transport answers a body that is not JSON): the REST body's own
  `check_json_body`, so the decoders behind /mcp never recurse past what REST allows. What a
  tool's arguments then hold is checked by the REST route the tool calls, as for any client.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any, cast

import mcp.types as types
from litestar import Litestar, asgi
from litestar.handlers import ASGIRouteHandler
from litestar.types import (
    HTTPRequestEvent,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    HTTPScope,
    Receive,
    ReceiveMessage,
    Scope,
    Send,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.context import RequestContext

from app.core.errors import InvalidInput
from app.http.body import check_json_body
from app.http.markers import unlimited
from app.mcp.rest import InProcessRest, Rest
from app.mcp.server import build_server

MCP_PATH = "/mcp"


def _in_process(ctx: RequestContext[Any, Any, Any]) -> Rest:
    request = ctx.request  # the Starlette request mcp built from the mounted ASGI scope
    if request is None:
        raise RuntimeError("an MCP request over HTTP always carries its HTTP request")
    scope = request.scope
    return InProcessRest(scope["app"], scope)


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Receive, max_bytes: int) -> bytes:
    """The whole request body, refused past `max_bytes` without reading further."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands out `body` once, then whatever the connection says next."""
    sent = False

    async def receive_again() -> ReceiveMessage:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return HTTPRequestEvent(type="http.request", body=body, more_body=False)

    return receive_again


async def send_jsonrpc_error(
    send: Send, status: HTTPStatus, code: int, message: str, headers: dict[str, str] | None = None
) -> None:
    """An HTTP error in the transport's own shape (what it answers a body that is not JSON)."""
    error = types.JSONRPCError(
        jsonrpc="2.0", id="server-error", error=types.ErrorData(code=code, message=message)
    )
    body = error.model_dump_json(by_alias=True, exclude_none=True).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send(
        HTTPResponseStartEvent(type="http.response.start", status=status, headers=raw_headers)
    )
    await send(HTTPResponseBodyEvent(type="http.response.body", body=body, more_body=False))


async def guarded(
    scope: Scope, receive: Receive, send: Send, max_body_bytes: int
) -> Receive | None:
    """The receive to hand the transport, or None when this request was answered here."""
    method = cast(HTTPScope, scope)["method"]
    if method == "GET":
        await send_jsonrpc_error(
            send, HTTPStatus.METHOD_NOT_ALLOWED, types.INVALID_REQUEST,
            "Method Not Allowed: this server offers no server-to-client stream; POST requests",
            {"Allow": "POST"},
        )  # fmt: skip
        return None
    if method != "POST":
        return receive  # the transport's own answer (405 for what stateless MCP does not do)
    try:
        body = await read_body(receive, max_body_bytes)
    except BodyTooLarge:
        await send_jsonrpc_error(
            send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, types.INVALID_REQUEST,
            f"Request body over {max_body_bytes} bytes",
        )  # fmt: skip
        return None
    try:
        check_json_body(body)
    except InvalidInput as exc:
        await send_jsonrpc_error(
            send, HTTPStatus.BAD_REQUEST, types.PARSE_ERROR, f"Parse error: {exc.message}"
        )
        return None
    return replay(body, receive)


class McpEndpoint:
    """One MCP server per app, and a session manager per run of the app's lifespan (a manager
    runs only once, and one app may be served more than once, as tests do)."""

    def __init__(self, version: str, max_body_bytes: int) -> None:
        self.server = build_server(_in_process, version)
        self.manager = self._new_manager()

        # copy_scope: the transport must not change the scope the wallet middleware filled in
        @asgi(MCP_PATH, is_mount=True, copy_scope=True, opt=unlimited())
        async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            checked = await guarded(scope, receive, send, max_body_bytes)
            if checked is not None:
                await self.manager.handle_request(scope, checked, send)  # type: ignore[arg-type]

        self.route: ASGIRouteHandler = mcp_endpoint

    def _new_manager(self) -> StreamableHTTPSessionManager:
        return StreamableHTTPSessionManager(app=self.server, stateless=True, json_response=True)

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncGenerator[None, None]:
        self.manager = self._new_manager()
        async with self.manager.run():
            yield
