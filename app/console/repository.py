"""SQL for the console's sign-ins: sessions and one-time sign-in links, both kept by the
SHA-256 of their token (migration 0014)."""

from __future__ import annotations

from datetime import datetime

import asyncpg


async def create_session(
    conn: asyncpg.Connection, token_hash: str, wallet: str, csrf_token: str, ttl_seconds: int
) -> datetime:
    """A new session; when it expires."""
    expires: datetime = await conn.fetchval(
        """INSERT INTO console_sessions (token_hash, wallet, csrf_token, expires_at)
           VALUES ($1, $2, $3, now() + make_interval(secs => $4))
           RETURNING expires_at""",
        token_hash, wallet, csrf_token, float(ttl_seconds),
    )  # fmt: skip
    return expires


async def live_session(conn: asyncpg.Connection, token_hash: str) -> asyncpg.Record | None:
    """The session's wallet, CSRF token and expiry, unless it expired or never was."""
    row: asyncpg.Record | None = await conn.fetchrow(
        """SELECT wallet, csrf_token, expires_at FROM console_sessions
           WHERE token_hash = $1 AND expires_at > now()""",
        token_hash,
    )
    return row


async def delete_session(conn: asyncpg.Connection, token_hash: str) -> bool:
    gone = await conn.fetchval(
        "DELETE FROM console_sessions WHERE token_hash = $1 RETURNING 1", token_hash
    )
    return gone is not None


async def create_link(
    conn: asyncpg.Connection, token_hash: str, wallet: str, ttl_seconds: int
) -> None:
    await conn.execute(
        """INSERT INTO console_links (token_hash, wallet, expires_at)
           VALUES ($1, $2, now() + make_interval(secs => $3))""",
        token_hash, wallet, float(ttl_seconds),
    )  # fmt: skip


async def link_wallet(conn: asyncpg.Connection, token_hash: str) -> str | None:
    """A live link's wallet, the link left unspent; None for a used, expired or unknown one."""
    wallet: str | None = await conn.fetchval(
        "SELECT wallet FROM console_links WHERE token_hash = $1 AND expires_at > now()",
        token_hash,
    )
    return wallet


async def consume_link(conn: asyncpg.Connection, token_hash: str) -> str | None:
    """Use a link once: its wallet for the one caller that removed it while live, else None."""
    wallet: str | None = await conn.fetchval(
        "DELETE FROM console_links WHERE token_hash = $1 AND expires_at > now() RETURNING wallet",
        token_hash,
    )
    return wallet


async def sweep_expired_sessions(conn: asyncpg.Connection, limit: int) -> int:
    """Delete up to `limit` expired sessions; how many went. Off the request path (it reads
    every shard on Citus), as the nonce sweep is."""
    return await _sweep(conn, "console_sessions", limit)


async def sweep_expired_links(conn: asyncpg.Connection, limit: int) -> int:
    """Delete up to `limit` expired sign-in links; how many went (as sweep_expired_sessions)."""
    return await _sweep(conn, "console_links", limit)


async def _sweep(conn: asyncpg.Connection, table: str, limit: int) -> int:
    swept = await conn.fetchval(
        f"""
        WITH swept AS (
            DELETE FROM {table} WHERE token_hash IN (
                SELECT token_hash FROM {table} WHERE expires_at < now() LIMIT $1
            ) RETURNING 1
        )
        SELECT count(*) FROM swept
        """,
        limit,
    )
    return int(swept)
