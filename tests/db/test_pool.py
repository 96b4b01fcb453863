"""The pool's session settings hold for every use of a connection, and a released connection
carries nothing of the request that used it into the next one, without the reset query
asyncpg would otherwise send on every release (app/db/pool.py `_keep_session`)."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from app.db.pool import SESSION_SETTINGS, create_pool

APP = Path(__file__).resolve().parents[2] / "app"


async def test_session_settings_hold_across_releases(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        for _ in range(3):  # the same single connection, released and acquired again
            async with pool.acquire() as conn:
                await conn.fetchval("SELECT '[1,2,3]'::vector")  # loads pgvector's settings
                for name, value in SESSION_SETTINGS.items():
                    assert await conn.fetchval("SELECT current_setting($1)", name) == value
    finally:
        await pool.close()


async def test_a_released_connection_carries_no_request_state(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            backend = await conn.fetchval("SELECT pg_backend_pid()")
            tx = conn.transaction()
            await tx.start()  # a request's transaction, left open (its handler was cancelled)
            await conn.execute("SET LOCAL synchronous_commit = off")
            await conn.fetchval("SELECT pg_advisory_xact_lock(4242)")
            await conn.execute("CREATE TEMP TABLE IF NOT EXISTS left_behind (x int)")
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == backend  # no new session
            assert not conn.is_in_transaction()  # the open transaction was rolled back
            assert await conn.fetchval("SHOW synchronous_commit") == "on"
            held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1"
            assert await conn.fetchval(held, backend) == 0
            with pytest.raises(asyncpg.UndefinedTableError):  # rolled back with its transaction
                await conn.fetchval("SELECT count(*) FROM left_behind")
    finally:
        await pool.close()


# What would outlive a transaction in a session, and so would need asyncpg's reset query.
SESSION_STATE = re.compile(
    r"pg_advisory_lock|pg_try_advisory_lock\(|(?-i:\bLISTEN\b)|SET\s+SESSION|DECLARE\s+\w+\s+.*WITH HOLD"
    r"|set_config\([^)]*,\s*false\)|\bPREPARE\s+\w+\s+AS|CREATE\s+TEMP",
    re.IGNORECASE,
)
# A SET that is not SET LOCAL (UPDATE's `SET col =` has an `=` after the name; `SET LOCAL` is fine).
SESSION_SET = re.compile(r"""["']\s*SET\s+(?!LOCAL\b)[\w.]+\s+(?:TO\b|=)""", re.IGNORECASE)


def test_the_app_leaves_no_session_state_behind() -> None:
    """Engram's own SQL only ever changes its transaction: advisory locks are *_xact_*, settings
    SET LOCAL, no LISTEN, no held cursors; else skipping the reset query would leak it."""
    found = []
    for path in APP.rglob("*.py"):
        text = path.read_text()
        for pattern in (SESSION_STATE, SESSION_SET):
            found += [f"{path.relative_to(APP)}: {m.group(0)}" for m in pattern.finditer(text)]
    assert found == []


async def test_statements_plan_once_unless_the_transaction_asks_for_custom_plans(
    database_url: str,
) -> None:
    """The pool reuses a generic plan per prepared statement; `plan_for_the_parameters` makes the
    rest of one transaction plan for its parameters, and the next transaction is generic again."""
    from app.db.settings_repository import plan_for_the_parameters

    plan = "EXPLAIN (GENERIC_PLAN) SELECT 1"  # only to prove the server knows the option
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.fetch(plan)

            async def mode() -> str:
                return str(await conn.fetchval("SELECT current_setting('plan_cache_mode')"))

            assert await mode() == "force_generic_plan"
            async with conn.transaction():
                await plan_for_the_parameters(conn)
                assert await mode() == "force_custom_plan"
            assert await mode() == "force_generic_plan"
            # a prepared statement's plan shows its parameter, not the value, when generic
            stmt = await conn.prepare("SELECT count(*) FROM pg_class WHERE relname = $1")
            await stmt.fetchval("pg_class")
            shown = await conn.fetchval(
                "SELECT generic_plans FROM pg_prepared_statements WHERE statement LIKE"
                " 'SELECT count(*) FROM pg_class WHERE relname%'"
            )
            assert shown >= 1
    finally:
        await pool.close()


async def test_json_round_trips_through_the_pool_as_it_was_written(database_url: str) -> None:
    value = {
        "name": "Zoë \u2028 ☕",
        "nested": {"list": [1, 2.5, None, True, "x"], "empty": {}},
        "big": 123456789012345678901234567890,
    }
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT $1::jsonb", value) == value
            assert await conn.fetchval("SELECT $1::json", value) == value
            # what PostgreSQL stored is the JSON text itself, not a quoted string
            assert await conn.fetchval("SELECT jsonb_typeof($1::jsonb -> 'nested')", value) == (
                "object"
            )
    finally:
        await pool.close()
