"""Fixtures of the console's HTTP tests: one app per module, and a client per test with its own
cookie jar (one browser), that does not follow redirects (the tests check where they go)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.config import Settings


@pytest.fixture(scope="module")
def console_app(settings: Settings) -> Litestar:
    return create_app(settings)


@pytest.fixture
async def browser(console_app: Litestar) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=console_app, timeout=60) as c:
        c.follow_redirects = False
        yield c
