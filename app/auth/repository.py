"""SQL for wallets, their free-tier usage, and the settings auth keeps in the database."""

from __future__ import annotations

import asyncpg


async def setting_or_create(conn: asyncpg.Connection, key: str, candidate: str) -> str:
    """The value of an engram_settings key, set to `candidate` first if it has none.

    Two statements, not one: when several workers start at once, the losers' INSERT waits for
    the winner's commit and does nothing, and only a new statement's snapshot sees its row.
    """
    await conn.execute(
        "INSERT INTO engram_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        key,
        candidate,
    )
    return str(await conn.fetchval("SELECT value FROM engram_settings WHERE key = $1", key))


async def issue_nonce(conn: asyncpg.Connection, nonce: str, ttl_seconds: int) -> None:
    await conn.execute(
        """INSERT INTO auth_nonces (nonce, expires_at)
           VALUES ($1, now() + make_interval(secs => $2))""",
        nonce,
        float(ttl_seconds),
    )


async def sweep_expired_nonces(conn: asyncpg.Connection, limit: int) -> int:
    """Delete up to `limit` expired sign-in nonces; how many went. Off the request path: it is
    the one statement that reads every nonce (on Citus, every shard of auth_nonces)."""
    swept = await conn.fetchval(
        """
        WITH swept AS (
            DELETE FROM auth_nonces WHERE nonce IN (
                SELECT nonce FROM auth_nonces WHERE expires_at < now() LIMIT $1
            ) RETURNING 1
        )
        SELECT count(*) FROM swept
        """,
        limit,
    )
    return int(swept)


async def consume_nonce(conn: asyncpg.Connection, nonce: str) -> bool:
    """Use a nonce once: True for the one caller that removed a live nonce this server issued."""
    used = await conn.fetchval(
        "DELETE FROM auth_nonces WHERE nonce = $1 AND expires_at > now() RETURNING 1", nonce
    )
    return used is not None


async def token_version(conn: asyncpg.Connection, wallet: str) -> int:
    version = await conn.fetchval("SELECT token_version FROM wallets WHERE address = $1", wallet)
    return int(version or 0)


async def revoke_tokens(conn: asyncpg.Connection, wallet: str) -> int:
    """Bump the wallet's token version (revoking every token issued before); the new version."""
    version = await conn.fetchval(
        """
        INSERT INTO wallets (address, token_version) VALUES ($1, 1)
        ON CONFLICT (address) DO UPDATE SET token_version = wallets.token_version + 1
        RETURNING token_version
        """,
        wallet,
    )
    return int(version)
