"""SQL about the database itself: extension versions and Engram's recorded settings."""

from __future__ import annotations

import asyncpg


async def pgvector_available_version(conn: asyncpg.Connection) -> str | None:
    installed = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    if installed:
        return str(installed)
    default = await conn.fetchval(
        "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
    )
    return str(default) if default else None


async def embedding_dims(conn: asyncpg.Connection) -> int | None:
    exists = await conn.fetchval("SELECT to_regclass('engram_settings') IS NOT NULL")
    if not exists:
        return None
    value = await conn.fetchval("SELECT value FROM engram_settings WHERE key = 'embedding_dims'")
    return int(value) if value else None


async def recorded_embedding_model(conn: asyncpg.Connection) -> str | None:
    """The model the database's vectors come from: the recorded one, else (a database from
    before it was recorded) a memory's, else the model at creation; None when nothing says."""
    value: str | None = await conn.fetchval(
        """SELECT COALESCE(
               (SELECT value FROM engram_settings WHERE key = 'embedding_model'),
               (SELECT embedding_model FROM memories LIMIT 1),
               (SELECT NULLIF(value, '') FROM engram_settings
                WHERE key = 'embedding_model_at_creation'))"""
    )
    return value


async def record_embedding_model(conn: asyncpg.Connection, model: str) -> None:
    await conn.execute(
        """INSERT INTO engram_settings (key, value) VALUES ('embedding_model', $1)
           ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
        model,
    )


async def embedded_otherwise(conn: asyncpg.Connection, model: str) -> bool:
    """Whether any memory's vector comes from another model than `model`."""
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM memories WHERE embedding_model <> $1)", model
        )
    )


async def citus_installed(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT true FROM pg_extension WHERE extname = 'citus'"))


async def ping(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT true"))


async def commit_without_waiting_for_flush(conn: asyncpg.Connection) -> None:
    """This transaction's commit returns before its WAL is flushed (durable ~200 ms later)."""
    await conn.execute("SET LOCAL synchronous_commit = off")


async def plan_for_the_parameters(conn: asyncpg.Connection) -> None:
    """This transaction's statements are planned for their parameters, each time they run (the
    pool's sessions reuse one generic plan per statement, app/db/pool.py)."""
    await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
