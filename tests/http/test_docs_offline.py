"""/docs works without the internet: Swagger UI's assets come from the installed package, and a
real headless Chromium with the network cut off renders the operation list."""

from __future__ import annotations

import re

import httpx

from app.asgi import create_app
from app.config import Settings
from tests.support.chromium import dump_dom_offline
from tests.support.server import served


def test_docs_page_loads_nothing_from_elsewhere(settings: Settings) -> None:
    with served(create_app(settings)) as url:
        page = httpx.get(f"{url}/docs", timeout=30)
        assert page.status_code == 200
        loaded = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
        assert loaded and all(u.startswith("/docs/assets/") for u in loaded), loaded
        for asset in loaded:
            r = httpx.get(f"{url}{asset}", timeout=30)
            assert r.status_code == 200 and len(r.content) > 500, asset
        # public like the page: no wallet, no rate limit
        assert (
            "javascript"
            in httpx.get(f"{url}/docs/assets/swagger-ui-bundle.js").headers["content-type"]
        )


def test_docs_render_the_operations_in_chromium_offline(settings: Settings) -> None:
    with served(create_app(settings)) as url:
        dom = dump_dom_offline(f"{url}/docs")
    # Swagger UI ran (its markup is there) and rendered the operations of the OpenAPI document
    assert 'class="swagger-ui' in dom, dom[:2000]
    assert "opblock" in dom
    for path in ("/v1/recall", "/v1/store", "/v1/memories"):
        assert path in dom, path
