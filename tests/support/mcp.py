"""Real `mcp` clients for tests: streamable HTTP against /mcp (each HTTP request signed afresh
with the wallet key, as x-wallet-auth allows), and stdio against `engram mcp`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Generator
from datetime import timedelta
from pathlib import Path

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from app.auth.signature import sign_header
from tests.support.server import ENGRAM, engram_env

READ_TIMEOUT = timedelta(seconds=120)


class WalletAuth(httpx.Auth):
    """x-wallet-auth signed for each request (the header is valid for a few minutes only)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["x-wallet-auth"] = sign_header(self.key, int(time.time()))
        yield request


class BearerAuth(httpx.Auth):
    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["authorization"] = f"Bearer {self.token}"
        yield request


@contextlib.asynccontextmanager
async def http_session(url: str, auth: httpx.Auth) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(auth=auth, timeout=httpx.Timeout(60, read=120)) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write, read_timeout_seconds=READ_TIMEOUT) as session,
    ):
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def stdio_session(url: str, data_dir: Path, **env: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=str(ENGRAM), args=["mcp", "--url", url], env=engram_env(data_dir, **env)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=READ_TIMEOUT) as session:
            await session.initialize()
            yield session
