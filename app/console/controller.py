"""HTTP for the console (/console): server-rendered pages over the same services and access
rules as the REST API, a session cookie for identity (app/console/service.py). One controller per
page group: sign-in and the session (signin_controller.py), memories, usage and team; what they
share is in pages.py. This module puts them on one router, with the static files.

Console calls are free and unmetered: the owner looking at their own memories. They count
against the wallet's rate limit like any request.
"""

from __future__ import annotations

import logging

from litestar import Router
from litestar.static_files import create_static_files_router

from app.console.memories_controller import ConsoleMemoriesController
from app.console.middleware import STATIC_PATH
from app.console.pages import PUBLIC, STATIC, page_error, scripts_built
from app.console.signin_controller import ConsoleAuthController, ConsoleSessionController
from app.console.team_controller import ConsoleTeamController
from app.console.usage_controller import ConsoleUsageController
from app.core.errors import ApiError
from app.http.markers import unlimited

log = logging.getLogger("engram.console")


def console_router() -> Router:
    if not scripts_built():
        log.warning(
            "the console's scripts are not built (app/console/static/dist): its sign-in, charts"
            " and graph will not work; run `make console` (npm) or install Engram's wheel"
        )
    static = create_static_files_router(
        path=STATIC_PATH, directories=[STATIC], opt={**PUBLIC, **unlimited()},
        include_in_schema=False, cache_control=None,
    )  # fmt: skip
    pages = Router(
        path="/",
        route_handlers=[
            ConsoleSessionController,
            ConsoleMemoriesController,
            ConsoleUsageController,
            ConsoleTeamController,
        ],
        exception_handlers={ApiError: page_error},
        include_in_schema=False,
    )
    return Router(
        path="/",
        route_handlers=[pages, ConsoleAuthController, static],
        include_in_schema=False,
    )
