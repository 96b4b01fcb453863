"""The request transaction when the database drops the connection mid-request: the outage is
answered (503), never asyncpg's own 'connection is closed' error over it (a 500)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from app.core.errors import PartUnavailable
from app.http.errors import EXCEPTION_HANDLERS
from app.http.transaction import connection_lost, database_lost_is_503, rollback_unless_lost


async def lost_in_a_transaction(database_url: str) -> tuple[asyncpg.Connection, object]:
    """A connection with an open transaction, then killed by the server."""
    conn = await asyncpg.connect(database_url)
    tx = conn.transaction()
    await tx.start()
    pid = conn.get_server_pid()
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    for _ in range(200):  # the client learns the socket is gone
        if conn.is_closed():
            break
        await asyncio.sleep(0.025)
    return conn, tx


async def test_a_rollback_on_a_lost_connection_leaves_the_first_error(database_url: str) -> None:
    conn, tx = await lost_in_a_transaction(database_url)
    assert conn.is_closed()
    await rollback_unless_lost(conn, tx)  # type: ignore[arg-type]  # no InterfaceError


async def test_a_commit_on_a_lost_connection_is_a_503(database_url: str) -> None:
    conn, tx = await lost_in_a_transaction(database_url)
    with pytest.raises(PartUnavailable):
        with database_lost_is_503(conn):
            await tx.commit()  # type: ignore[attr-defined]


async def test_a_live_connection_rolls_back_as_usual(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("CREATE TEMP TABLE t (x int)")
        await rollback_unless_lost(conn, tx)
        assert await conn.fetchval("SELECT to_regclass('pg_temp.t')") is None
    finally:
        await conn.close()


async def test_a_rollback_on_a_connection_already_released_is_skipped(database_url: str) -> None:
    """Seen in the chaos test: the pool had taken the connection back while the database shut
    down, and asking it anything raised InterfaceError ('released back to the pool')."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        conn = await pool.acquire()
        tx = conn.transaction()
        await tx.start()
        await pool.release(conn)
        with pytest.raises(asyncpg.InterfaceError):
            conn.is_closed()
        await rollback_unless_lost(conn, tx)  # no InterfaceError over the request's own error
    finally:
        await pool.close()


def test_a_client_confused_by_a_dropped_connection_is_a_503() -> None:
    response = EXCEPTION_HANDLERS[asyncpg.InternalClientError](
        None,  # type: ignore[arg-type]
        asyncpg.InternalClientError("cannot switch to state 15; another operation is in progress"),
    )
    assert response.status_code == 503
    assert response.headers["Retry-After"]


async def test_a_statement_on_a_connection_the_pool_took_back_as_it_closed_is_a_503(
    database_url: str,
) -> None:
    """Seen in the chaos test: the database dropped a request's connection, asyncpg took it back
    into the pool as it closed, and the request's next statement raised InterfaceError
    ('released back to the pool'), a 500 with a traceback."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        conn = await pool.acquire()
        admin = await asyncpg.connect(database_url)
        try:
            await admin.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
        finally:
            await admin.close()
        for _ in range(200):  # the client learns the socket is gone
            if connection_lost(conn):
                break
            await asyncio.sleep(0.025)
        assert connection_lost(conn)
        with pytest.raises(PartUnavailable):
            with database_lost_is_503(conn):
                await conn.fetchval("SELECT 1")
        await pool.release(conn)  # what the request's end does: no error either
    finally:
        pool.terminate()


async def test_a_misused_live_connection_is_not_an_outage(database_url: str) -> None:
    """An InterfaceError on a connection that is still there is a bug to show, not a 503."""
    conn = await asyncpg.connect(database_url)
    try:
        assert not connection_lost(conn)
        with pytest.raises(asyncpg.InterfaceError):
            with database_lost_is_503(conn):
                raise asyncpg.InterfaceError("a misuse")
    finally:
        await conn.close()
