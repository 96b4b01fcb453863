"""The asyncpg pool: pgvector codec and per-session settings registered on every connection."""

from __future__ import annotations

import logging
from collections.abc import Generator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg
import msgspec
from pgvector.asyncpg import register_vector

from app.db import settings_repository
from app.infra import metrics

# Why each setting:
# - hnsw.iterative_scan: with wallet/namespace/tag filters applied after the index scan, pgvector
#   0.8 keeps scanning until enough rows pass, so filters never starve the top k.
# - hnsw.ef_search: the beam of an index walk (only big wallets walk it; smaller ones are
#   scanned exactly). bench/scale.py at 1M rows, a 100k-memory wallet: recall@10 of the walk
#   against an exact scan 0.80 at 100 (HNSW p50/p95 2.6/3.8 ms), 0.89 at 200, 0.93 at 400
#   (4.6/10.1 ms); pgvector's default 40 gives 0.81 only with iterative scans.
# - plan_cache_mode: asyncpg prepares every statement; planning one for its parameters again on
#   each execution cost more than running it (pg_stat_statements in the 64-client mix: recall's
#   candidates 1.2 ms planning for 1.0 ms executing, a list page 0.14 for 0.11; in all, planning
#   was over half of PostgreSQL's time), so each statement is planned once per connection, for
#   any wallet. Where a plan must fit the wallet's size (recall's index scans over a big
#   wallet), the transaction asks for custom plans (app/db/settings_repository.py
#   `plan_for_the_parameters`).
SESSION_SETTINGS = {
    "hnsw.iterative_scan": "relaxed_order",
    "hnsw.ef_search": "400",
    "plan_cache_mode": "force_generic_plan",
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


# asyncpg's own timestamptz codec writes the instants 0001-01-01T00:00:00Z and
# 9999-12-31T23:59:59.999999Z as PostgreSQL's -infinity and infinity, and reads those back as
# naive datetime.min and datetime.max: a time stored at either end of the calendar came back
# without its zone (recall's arithmetic failed on it, 500; the wire showed it without a Z). This
# one keeps every instant as itself, in PostgreSQL's binary form (microseconds since 2000-01-01
# UTC), and reads ±infinity, or a time past Python's years 1..9999, as the calendar's aware ends.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
FIRST_MOMENT = datetime.min.replace(tzinfo=UTC)
LAST_MOMENT = datetime.max.replace(tzinfo=UTC)


def _encode_timestamptz(moment: datetime | date) -> tuple[int]:
    if not isinstance(moment, datetime):  # a date: its midnight, as asyncpg's codec takes it
        moment = datetime(moment.year, moment.month, moment.day)
    delta = moment.astimezone(UTC) - PG_EPOCH  # a naive time is local, as asyncpg's codec has it
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds,)


_AFTER_PG_EPOCH = PG_EPOCH.__add__  # bound once: this runs for every time of every row read


def _decode_timestamptz(value: tuple[int]) -> datetime:
    try:
        moment: datetime = _AFTER_PG_EPOCH(timedelta(0, 0, value[0]))
        return moment
    except OverflowError:
        return LAST_MOMENT if value[0] > 0 else FIRST_MOMENT


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    for json_type in ("json", "jsonb"):
        await conn.set_type_codec(
            json_type, encoder=_dump_json, decoder=msgspec.json.decode, schema="pg_catalog"
        )
    await conn.set_type_codec(
        "timestamptz", encoder=_encode_timestamptz, decoder=_decode_timestamptz,
        schema="pg_catalog", format="tuple",
    )  # fmt: skip


# Connecting gives up after this long (asyncpg's default is 60 s): with the database down a
# request answers 503 promptly instead of hanging.
CONNECT_TIMEOUT_SECONDS = 5


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What the pool runs on a released connection instead of asyncpg's reset query
    (`pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`, one more round trip per
    request): nothing. asyncpg still rolls back a transaction left open before calling this, and
    Engram leaves no other session state behind: its advisory locks are transaction-scoped, its
    SETs are SET LOCAL, its cursors live inside transactions and it never LISTENs
    (tests/db/test_pool.py holds that to account)."""


# On Citus the coordinator plans each statement for its shard: a generic plan, whose wallet is
# a parameter still, is refused for most of Engram's statements ("could not create distributed
# plan"), so there PostgreSQL's own choice stands (custom plans first). docs/scale-out.md.
CITUS_SESSION_SETTINGS = {**SESSION_SETTINGS, "plan_cache_mode": "auto"}


async def session_settings(dsn: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_SECONDS)
    try:
        return (
            CITUS_SESSION_SETTINGS
            if await settings_repository.citus_installed(conn)
            else SESSION_SETTINGS
        )
    finally:
        await conn.close()


async def create_pool(dsn: str, min_size: int = 2, max_size: int = 20) -> asyncpg.Pool:
    # Startup parameters, not SETs in `init`: they hold for the session whatever a transaction
    # does (SET LOCAL ends with it).
    settings = await session_settings(dsn)
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        command_timeout=60,
        timeout=CONNECT_TIMEOUT_SECONDS,
        server_settings=settings,
        reset=_keep_session,
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
    # msgspec, not the json module: a recall decodes the metadata of each of its ~60 candidate
    # rows, and msgspec reads (and writes) such objects about 4x (8x) faster, to the same values
    return msgspec.json.encode(value).decode()


class MeteredPool:
    """The pool as the app uses it, counting connections in use and requests waiting for one
    (app/infra/metrics.py). `acquire()` is awaited or used with `async with`, like asyncpg's;
    everything else is the pool's own."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    def acquire(self, *, timeout: float | None = None) -> _MeteredAcquire:
        return _MeteredAcquire(self, timeout)

    async def take(self, timeout: float | None) -> asyncpg.Connection:  # noqa: ASYNC109 (asyncpg's)
        metrics.POOL_WAITING.inc()
        try:
            conn: asyncpg.Connection = await self.pool.acquire(timeout=timeout)
        finally:
            metrics.POOL_WAITING.dec()
        metrics.POOL_IN_USE.inc()
        return conn

    async def release(self, conn: asyncpg.Connection) -> None:
        metrics.POOL_IN_USE.dec()
        await self.pool.release(conn)


class _MeteredAcquire:
    def __init__(self, pool: MeteredPool, timeout: float | None) -> None:
        self.pool, self.timeout = pool, timeout
        self.conn: asyncpg.Connection | None = None

    def __await__(self) -> Generator[Any, None, asyncpg.Connection]:
        return self.pool.take(self.timeout).__await__()

    async def __aenter__(self) -> asyncpg.Connection:
        self.conn = await self.pool.take(self.timeout)
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            await self.pool.release(conn)
