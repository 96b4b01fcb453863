"""/mcp on the API's own port: MCP's streamable HTTP transport mounted in the Litestar app.

The mount is an ordinary route handler, so the wallet middleware authenticates every MCP HTTP
request exactly as a REST one (x-wallet-auth or a bearer session token; 401 otherwise) before
the MCP transport sees it. Each tool call then runs as an in-process REST request carrying the
same identity headers (app/mcp/rest.py), which is where it is rate limited, priced and
committed; the MCP transport requests themselves (initialize, tools/list) are not counted.

Stateless with JSON answers: any worker can serve any MCP request, and there is no session to
hijack or expire; identity is checked on every request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, asgi
from litestar.handlers import ASGIRouteHandler
from litestar.types import Receive, Scope, Send
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.context import RequestContext

from app.api.ratelimit import unlimited
from app.mcp.rest import InProcessRest, Rest
from app.mcp.server import build_server

MCP_PATH = "/mcp"


def _in_process(ctx: RequestContext[Any, Any, Any]) -> Rest:
    request = ctx.request  # the Starlette request mcp built from the mounted ASGI scope
    if request is None:
        raise RuntimeError("an MCP request over HTTP always carries its HTTP request")
    scope = request.scope
    return InProcessRest(scope["app"], scope)


class McpEndpoint:
    """One MCP server per app, and a session manager per run of the app's lifespan (a manager
    runs only once, and one app may be served more than once, as tests do)."""

    def __init__(self, version: str) -> None:
        self.server = build_server(_in_process, version)
        self.manager = self._new_manager()

        # copy_scope: the transport must not change the scope the wallet middleware filled in
        @asgi(MCP_PATH, is_mount=True, copy_scope=True, opt=unlimited())
        async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            await self.manager.handle_request(scope, receive, send)  # type: ignore[arg-type]

        self.route: ASGIRouteHandler = mcp_endpoint

    def _new_manager(self) -> StreamableHTTPSessionManager:
        return StreamableHTTPSessionManager(app=self.server, stateless=True, json_response=True)

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncGenerator[None, None]:
        self.manager = self._new_manager()
        async with self.manager.run():
            yield
