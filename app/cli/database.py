"""`engram migrate` and `engram reembed`, and the database every command that needs one gets: the
configured PostgreSQL, or an embedded one started for the command's lifetime."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import replace

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
