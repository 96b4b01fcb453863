"""The OpenAPI docs page (/docs), whole without the internet.

Litestar's Swagger UI page loads its JavaScript, CSS and favicon from a CDN by default, so a
self-hosted or offline Engram showed a blank page. The assets come instead from the installed
`swagger_ui_bundle` module (PyPI `swagger-ui-bundle-v2`, the maintained fork of
`swagger-ui-bundle`: its 1.1.0 bundles Swagger UI 4.15, which cannot render the OpenAPI 3.1
document Litestar writes), served under /docs/assets. Everything under /docs is public and
unlimited (app/auth/middleware.py, app/http/ratelimit.py).
"""

from __future__ import annotations

from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.router import Router
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

DOCS_PATH = "/docs"
ASSETS_PATH = f"{DOCS_PATH}/assets"


def swagger_page() -> SwaggerRenderPlugin:
    """Swagger UI with every asset it loads served by Engram itself."""
    return SwaggerRenderPlugin(
        js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        css_url=f"{ASSETS_PATH}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS_PATH}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS_PATH}/favicon-32x32.png'>",
    )


def swagger_assets() -> Router:
    """The bundle's files, read from the installed package."""
    return create_static_files_router(
        path=ASSETS_PATH,
        directories=[swagger_ui_path],
        include_in_schema=False,
        name="swagger-assets",
    )
