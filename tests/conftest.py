"""Shared fixtures: one real PostgreSQL+pgvector per test session (embedded, or
ENGRAM_TEST_DATABASE_URL), migrated once with Alembic; the app served in-process per session.

Isolation between tests comes from the domain itself: every test signs with fresh wallets, and
every query is scoped to a wallet.

Only fixtures here: helpers live in tests/support/ (the layout: tests/README.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.config import LOCAL_EMBED_DIMS, DatabaseSettings, LimitsSettings, Settings
from app.db.schema import upgrade_to_head
from app.dev.chain import DevChain
from tests.support.server import served, serving
from tests.support.settings import changed

# Every statement the suite makes Engram run is checked for one-shard routing (the plugin's doc).
pytest_plugins = ["tests.support.sql_audit"]


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
    # some tests from one wallet at > 100 calls/min. tests/http/test_ratelimit.py tests the limits.
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


@pytest.fixture(scope="module")
def engram_url(settings: Settings) -> Iterator[str]:
    """Engram over real HTTP (uvicorn in a thread) for clients that need a server: its base URL.
    An app of its own: serving the session's `app` would run that app's lifespan a second time
    and close the pool the in-process `client` keeps using ("pool is closed" in later tests)."""
    with served(create_app(settings)) as url:
        yield url


@pytest.fixture(scope="module")
def chain() -> Iterator[DevChain]:
    """A local anvil chain with Base's chain id and USDC at Base's address (app/dev/chain.py),
    one per test module that pays."""
    with DevChain(chain_id=8453) as dev:
        dev.install_usdc()
        yield dev


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


@pytest.fixture(scope="module")
def engram(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """(base URL, log file) of one real `engram serve` for the module, with the free tier and the
    overall rate limit out of the way (hostile-input tests); stopping it checks the log holds no
    traceback (a 500 logs one)."""
    with serving(
        tmp_path_factory.mktemp("engram"), ENGRAM_DATABASE_URL=database_url,
        ENGRAM_RATE_LIMIT_PER_MINUTE="0", ENGRAM_FREE_TIER_CALLS="1000000",
    ) as served:  # fmt: skip
        yield served


@pytest.fixture(scope="module")
def server(engram: tuple[str, Path]) -> str:
    """The base URL of the module's `engram`."""
    return engram[0]
