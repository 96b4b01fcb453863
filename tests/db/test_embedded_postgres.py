"""The embedded PostgreSQL starts on 127.0.0.1 with pgvector, and keeps its data across restarts."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import psutil
import pytest

from app.db.embedded import (
    MAX_SHARED_BUFFERS_MB,
    MIN_SHARED_BUFFERS_MB,
    EmbeddedPostgres,
    EmbeddedPostgresError,
    shared_buffers,
)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: pytest prunes old basetemps, which can pull the data dir from under
    # a server while another pytest run starts concurrently.
    root = Path(tempfile.mkdtemp(prefix="engram-test-embedded-"))
    yield root / "pgdata"
    shutil.rmtree(root, ignore_errors=True)


def fetchval(dsn: str, sql: str) -> Any:
    async def run() -> Any:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(run())


def execute(dsn: str, script: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(script)
        finally:
            await conn.close()

    asyncio.run(run())


def test_serves_pgvector_and_persists_across_restarts(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir)
    try:
        dsn = pg.start()
        # the unix socket (cheaper than TCP loopback on both sides), TCP still served
        assert dsn == f"postgresql://postgres@/engram?host={pg.socket_dir}&port={pg.port}"
        assert pg.dsn == f"postgresql://postgres@127.0.0.1:{pg.port}/engram"
        assert fetchval(pg.dsn, "SELECT inet_server_addr() IS NOT NULL") is True
        assert fetchval(dsn, "SELECT inet_server_addr() IS NULL") is True  # a socket has none

        version = fetchval(dsn, "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert tuple(int(part) for part in version.split(".")[:2]) >= (0, 8)

        execute(dsn, "CREATE TABLE kept (v vector(3)); INSERT INTO kept VALUES ('[1,2,3]')")
        pg.stop()
        pg.stop()  # idempotent

        dsn = pg.start()  # same data dir: no initdb, same database
        assert fetchval(dsn, "SELECT v::text FROM kept") == "[1,2,3]"
    finally:
        pg.stop()


def test_busy_port_is_a_clear_error(data_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        pg = EmbeddedPostgres(data_dir, port=port)
        with pytest.raises(EmbeddedPostgresError, match=f"port {port} .* in use"):
            pg.start()
    pg.stop()


def test_shared_buffers_are_sized_to_the_machine_and_can_be_set(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_mb = psutil.virtual_memory().total // 2**20
    expected = min(MAX_SHARED_BUFFERS_MB, max(MIN_SHARED_BUFFERS_MB, memory_mb // 8))
    assert shared_buffers() == f"{expected}MB"
    monkeypatch.setenv("ENGRAM_PG_SHARED_BUFFERS", "160MB")
    pg = EmbeddedPostgres(data_dir)
    try:
        dsn = pg.start()
        assert fetchval(dsn, "SHOW shared_buffers") == "160MB"
    finally:
        pg.stop()
    monkeypatch.delenv("ENGRAM_PG_SHARED_BUFFERS")
    try:
        dsn = pg.start()
        assert (
            fetchval(
                dsn,
                "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'",
            )
            == expected
        )
    finally:
        pg.stop()
