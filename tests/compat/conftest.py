"""A served Engram (real HTTP, in-process uvicorn) for the replayed MemoClaw clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.asgi import create_app
from app.config import Settings
from tests.support.server import served


@pytest.fixture(scope="module")
def engram_url(settings: Settings) -> Iterator[str]:
    with served(create_app(settings)) as url:
        yield url
