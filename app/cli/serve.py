"""`engram serve`: the API under uvicorn, on the configured or an embedded PostgreSQL (migrated and
with its model prepared first), optionally on the dev chain, in one process or several workers."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.cli.database import database, migrate
from app.cli.model import prepare_local_model
from app.config import Settings

log = logging.getLogger("engram")


def cmd_serve(args: argparse.Namespace) -> None:
    import signal

    import uvicorn

    from app.asgi import create_app
    from app.infra import logs

    settings = Settings.from_env()
    server = settings.server
    server = replace(server, host=args.host or server.host, port=args.port or server.port)
    settings = replace(settings, server=server)
    logs.configure(server.log_format)
    # uvicorn shuts down gracefully on SIGTERM and then re-raises it; SIGTERM's default action
    # would kill us right there, before `database()` stops the embedded PostgreSQL. Exit instead.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.ExitStack() as stack:
        if args.dev_chain:
            # Dev tools (app/dev): the `dev` extra and anvil from npm. When they are missing or
            # the chain fails to start, one line that says why, not a traceback.
            from app.dev.errors import DevChainError
            from app.dev.mode import dev_chain

            try:
                settings = stack.enter_context(dev_chain(settings))
            except DevChainError as exc:
                raise SystemExit(f"engram serve --dev-chain: {exc}") from exc
        ready = stack.enter_context(database(settings))
        migrate(ready)
        prepare_local_model(ready)
        if args.workers > 1:
            _serve_workers(ready, args.workers)
            return
        app = create_app(ready)
        host, port = ready.server.host, ready.server.port
        uvicorn.run(
            app, host=host, port=port, log_config=None, access_log=False,
            timeout_graceful_shutdown=ready.server.shutdown_grace_seconds,
            **proxy_options(ready.server.trusted_proxies),
        )  # fmt: skip


def proxy_options(trusted_proxies: tuple[str, ...]) -> dict[str, Any]:
    """uvicorn's handling of X-Forwarded-For/-Proto: believed from ENGRAM_TRUSTED_PROXIES' peers
    only. uvicorn's own default believes any loopback peer (and FORWARDED_ALLOW_IPS), so a local
    process could change the scheme and client address a request is seen with."""
    if not trusted_proxies:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": list(trusted_proxies)}


# Worker processes get the parent's resolved settings (embedded database URL, dev chain) here.
WORKER_SETTINGS_ENV = "ENGRAM_WORKER_SETTINGS"


def _serve_workers(settings: Settings, workers: int) -> None:
    """Several uvicorn worker processes on one port, sharing the database started here.

    Free tier, payments ledger and idempotency live in PostgreSQL, so they hold across workers;
    rate limits and payment-in-flight claims are per process unless ENGRAM_REDIS_URL is set.
    """
    import msgspec
    import uvicorn

    if not settings.database.redis_url:
        log.warning(
            "%d workers without ENGRAM_REDIS_URL: rate limits are counted per worker", workers
        )
    os.environ[WORKER_SETTINGS_ENV] = msgspec.json.encode(settings, enc_hook=str).decode()
    # prometheus-client's multi-process mode: each worker writes its samples here (a fresh
    # directory: stale files of an earlier run would be added up too), /metrics sums them
    metrics_dir = tempfile.mkdtemp(prefix="engram-metrics-")
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", metrics_dir)
    uvicorn.run(
        "app.cli.serve:worker_app",
        factory=True,
        workers=workers,
        host=settings.server.host,
        port=settings.server.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=settings.server.shutdown_grace_seconds,
        **proxy_options(settings.server.trusted_proxies),
    )


def worker_app() -> Any:
    """uvicorn's factory in each worker process: the app built from the parent's settings."""
    import msgspec

    from app.asgi import create_app
    from app.infra import logs

    raw = os.environ.get(WORKER_SETTINGS_ENV)
    if not raw:
        raise SystemExit(f"engram: {WORKER_SETTINGS_ENV} is not set (start with engram serve)")
    settings = msgspec.json.decode(raw, type=Settings, dec_hook=_settings_hook)
    logs.configure(settings.server.log_format)  # a spawned process starts without the parent's
    return create_app(settings)


def _settings_hook(kind: type, value: Any) -> Any:
    if kind is Path:
        return Path(value)
    raise NotImplementedError(kind)
