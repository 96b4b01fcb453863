"""`engram mcp`: the MCP tools on stdio, for desktop agents, against a configured Engram.

The Engram URL comes from `--url` or ENGRAM_URL; identity only from the environment, never
from arguments (they show in `ps` and in agents' config files): ENGRAM_PRIVATE_KEY signs every
request, or ENGRAM_SESSION_TOKEN (from POST /auth/session) is sent as a bearer token. MemoClaw's
MEMOCLAW_URL / MEMOCLAW_PRIVATE_KEY are read too, so a memoclaw-mcp config ports unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version

from mcp.server.stdio import stdio_server

from app import DISTRIBUTION
from app.mcp.rest import RemoteRest
from app.mcp.server import build_server

URL_ENV = ("ENGRAM_URL", "MEMOCLAW_URL")
KEY_ENV = ("ENGRAM_PRIVATE_KEY", "MEMOCLAW_PRIVATE_KEY")
TOKEN_ENV = "ENGRAM_SESSION_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8000"


class IdentityMissing(SystemExit):
    pass


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


def remote_from_env(env: Mapping[str, str], url: str | None) -> RemoteRest:
    key = _first(env, KEY_ENV)
    token = env.get(TOKEN_ENV) or None
    if not key and not token:
        raise IdentityMissing(
            "engram mcp: set ENGRAM_PRIVATE_KEY (the wallet's key) or ENGRAM_SESSION_TOKEN in the"
            " environment; keys are never taken from arguments"
        )
    return RemoteRest(url or _first(env, URL_ENV) or DEFAULT_URL, key, token)


def _version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0.0.0"


async def serve_stdio(env: Mapping[str, str], url: str | None) -> None:
    rest = remote_from_env(env, url)
    server = build_server(lambda ctx: rest, _version())
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await rest.aclose()
