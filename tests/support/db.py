"""Reading the test database directly: what a request left behind, beside what the API says."""

from __future__ import annotations

from urllib.parse import urlsplit

import asyncpg


def with_database(dsn: str, name: str) -> str:
    """`dsn` naming database `name` instead: only the path changes, so a DSN over a unix socket
    (`postgresql://u@/db?host=/dir&port=N`, the embedded server's) keeps its host and port."""
    return urlsplit(dsn)._replace(path=f"/{name}").geturl()


async def create_database(dsn: str, name: str) -> str:
    """A new, empty database `name` on `dsn`'s server; its DSN."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(dsn, name)


async def count_memories(database_url: str, wallet: str) -> int:
    """All rows of a wallet in memories, deleted ones included: what a request left behind."""
    conn = await asyncpg.connect(database_url)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM memories WHERE user_id = $1", wallet.lower()
        )
        return int(count)
    finally:
        await conn.close()
