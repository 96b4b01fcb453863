"""Nothing on a request's path hops to a worker thread by Litestar's doing (issue 40, point 4).

Litestar runs a plain function guard, hook or handler, and a dependency marked sync_to_thread,
in a thread pool: a hand-off and a wake-up per request, on the loop and off it. The guard that
keeps grantees to their routes was one (a hop on every request, 11 % of a list's loop time
under py-spy). Work that belongs off the loop (the embedding model) has its own executor."""

from __future__ import annotations

from litestar import Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.utils.sync import AsyncCallable

from app.access.requests import only_where_grants_reach


def _handlers(app: Litestar) -> list[HTTPRouteHandler]:
    return [
        h
        for route in app.routes
        for h in getattr(route, "route_handlers", [])
        if isinstance(h, HTTPRouteHandler)
    ]


def _hops_of(handler: HTTPRouteHandler) -> list[str]:
    hops = [f"guard {g.func!r}" for g in handler.resolve_guards() if isinstance(g, AsyncCallable)]
    hops += [
        f"dependency {name}"
        for name, provide in handler.resolve_dependencies().items()
        if provide.has_sync_callable and provide.sync_to_thread
    ]
    if handler.has_sync_callable and handler.sync_to_thread:
        hops.append("handler")
    hooks = (handler.resolve_before_request(), handler.resolve_after_response())
    hops += [f"hook {hook.func!r}" for hook in hooks if isinstance(hook, AsyncCallable)]
    return hops


def test_no_guard_dependency_hook_or_handler_runs_in_a_worker_thread(app: Litestar) -> None:
    handlers = _handlers(app)
    assert len(handlers) > 50
    hops = {h.handler_name: found for h in handlers if (found := _hops_of(h))}
    assert not hops, hops
    assert not [h for h in app.before_send if isinstance(h, AsyncCallable)]


def test_the_check_sees_a_plain_function_guard() -> None:
    """The check above would catch the guard as it was: a plain function is wrapped to run in a
    thread."""
    from litestar import get

    def plain(connection, handler) -> None: ...

    @get("/x", guards=[plain, only_where_grants_reach], sync_to_thread=False)
    def route() -> None: ...

    app = Litestar([route])
    hops = _hops_of(_handlers(app)[0])
    assert len(hops) == 1 and "plain" in hops[0], hops
