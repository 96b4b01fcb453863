"""Reading the test database directly: what a request left behind, beside what the API says."""

from __future__ import annotations

import asyncpg


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
