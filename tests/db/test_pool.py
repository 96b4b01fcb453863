"""The pool's session settings survive the RESET ALL asyncpg runs when a connection is released."""

from __future__ import annotations

from app.db.pool import SESSION_SETTINGS, create_pool


async def test_session_settings_survive_release(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        for _ in range(3):  # the same single connection, released and acquired again
            async with pool.acquire() as conn:
                await conn.fetchval("SELECT '[1,2,3]'::vector")  # loads pgvector's settings
                for name, value in SESSION_SETTINGS.items():
                    assert await conn.fetchval("SELECT current_setting($1)", name) == value
    finally:
        await pool.close()
