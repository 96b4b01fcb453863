"""Shared fixtures: one real PostgreSQL+pgvector per test session (embedded, or
ENGRAM_TEST_DATABASE_URL), migrated once with Alembic; the app served in-process per session.

Isolation between tests comes from the domain itself: every test signs with fresh wallets, and
every query is scoped to a wallet.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
import uvicorn
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.auth.signature import sign_header
from app.config import LOCAL_EMBED_DIMS, DatabaseSettings, LimitsSettings, Settings
from app.db.schema import upgrade_to_head
from tests.support.settings import changed


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    configured = os.environ.get("ENGRAM_TEST_DATABASE_URL")
    if configured:
        upgrade_to_head(configured, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
        yield configured
        return
    from app.db.embedded import EmbeddedPostgres

    # Not under pytest's basetemp: pytest prunes old basetemps, which would pull the data
    # directory from under a server still used by a concurrent run.
    root = Path(tempfile.mkdtemp(prefix="engram-test-pg-"))
    server = EmbeddedPostgres(root / "pgdata")
    dsn = server.start()
    try:
        upgrade_to_head(dsn, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")
        yield dsn
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    # No overall rate limit on the shared app: it serves the whole session from one client IP,
    # some tests from one wallet at > 100 calls/min. tests/test_ratelimit.py tests the limits.
    return Settings(
        database=DatabaseSettings(url=database_url, pool_max=30),
        limits=LimitsSettings(free_tier_calls=100, rate_limit_per_minute=0),
    )


@pytest.fixture(scope="session")
def app(settings: Settings) -> Litestar:
    return create_app(settings)


@pytest.fixture(scope="session")
async def client(app: Litestar) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=app, timeout=60) as c:
        yield c


@pytest.fixture
def make_app(settings: Settings):
    """An app with other settings on the same database (e.g. a tiny free tier:
    `make_app(limits={"free_tier_calls": 2})`, see tests/support/settings.py)."""

    def factory(**groups: dict[str, object]) -> Litestar:
        return create_app(changed(settings, **groups))

    return factory


@pytest.fixture
def wallet() -> LocalAccount:
    return Account.create()


@pytest.fixture
def other_wallet() -> LocalAccount:
    return Account.create()


@contextlib.contextmanager
def served(app: Litestar, startup_timeout: float = 60) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread (its lifespan and pool live in that thread's loop),
    for clients that need a real HTTP server; yields the base URL."""
    # Bind the socket first and hand it to uvicorn: no one can take the port in between.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + startup_timeout
    while True:
        assert thread.is_alive(), "uvicorn exited while starting (see the log above)"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"no /health in {startup_timeout} s"
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


async def count_memories(database_url: str, wallet: str) -> int:
    """All rows of a wallet in memories, deleted ones included: what a request left behind."""
    conn = await asyncpg.connect(database_url)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM memories WHERE user_id = $1", wallet.lower()
        )
        return int(count)
    finally:
        await conn.close()


def auth(account: LocalAccount, ts: int | None = None) -> dict[str, str]:
    return {
        "x-wallet-auth": sign_header(account.key.hex(), ts if ts is not None else int(time.time()))
    }
