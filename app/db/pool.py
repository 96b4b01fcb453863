"""The asyncpg pool: pgvector codec and per-session settings registered on every connection."""

from __future__ import annotations

import json
import logging
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

# Why each setting:
# - hnsw.iterative_scan: with wallet/namespace/tag filters applied after the index scan, pgvector
#   0.8 keeps scanning until enough rows pass, so filters never starve the top k.
# - hnsw.ef_search: a wider beam than the default 40 for better index recall.
# - plan_cache_mode: asyncpg prepares statements; a generic plan would treat a 100k-memory wallet
#   and a 10-memory wallet alike, so always plan with the actual parameters.
SESSION_SETTINGS = {
    "hnsw.iterative_scan": "relaxed_order",
    "hnsw.ef_search": "100",
    "plan_cache_mode": "force_custom_plan",
    "timezone": "UTC",
}


def _one_line_reconnect_warnings(record: logging.LogRecord) -> bool:
    """While the database is down, asyncpg's pool retries its minimum connections and logs each
    failed attempt with a full traceback; one line says the same (the 503s say the rest)."""
    if record.exc_info and record.getMessage().startswith("Failed to restore the pool"):
        exc = record.exc_info[1]
        record.msg = f"{record.getMessage()}: {exc!r}"
        record.args = ()
        record.exc_info = None
    return True


logging.getLogger("asyncpg.pool").addFilter(_one_line_reconnect_warnings)


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    for json_type in ("json", "jsonb"):
        await conn.set_type_codec(
            json_type, encoder=_dump_json, decoder=json.loads, schema="pg_catalog"
        )


# Connecting gives up after this long (asyncpg's default is 60 s): with the database down a
# request answers 503 promptly instead of hanging.
CONNECT_TIMEOUT_SECONDS = 5


async def create_pool(dsn: str, min_size: int = 2, max_size: int = 20) -> asyncpg.Pool:
    # Startup parameters, not SETs in `init`: the pool runs RESET ALL whenever a connection is
    # released, which returns settings to these defaults (a SET would be lost after one use).
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        command_timeout=60,
        timeout=CONNECT_TIMEOUT_SECONDS,
        server_settings=SESSION_SETTINGS,
    )
    assert pool is not None
    return pool


def asyncpg_dsn(url: str) -> str:
    """Accept SQLAlchemy-style URLs too (postgresql+asyncpg://) and hand asyncpg a plain one."""
    for prefix in ("postgresql+asyncpg://", "postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def _dump_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
