"""All SQL for delegations (agent keys). A delegation is live until it expires or is revoked; an
owner's nonce is taken once and for all (registered, or cancelled by the owner), so a signed
delegation registers at most once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

import asyncpg

LIVE = "d.revoked_at IS NULL AND (d.expires_at IS NULL OR d.expires_at > now())"
COLUMNS = "d.id, d.owner, d.agent, d.scopes, d.namespaces, d.issued_at, d.expires_at, d.created_at"


async def lock_owner(conn: asyncpg.Connection, owner: str) -> None:
    """Until the transaction ends, the owner's delegations are registered and cancelled one at
    a time: the nonce and issued-at checks then hold until the insert."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('engram.delegations:' || $1, 0))", owner
    )


async def nonce_taken(conn: asyncpg.Connection, owner: str, nonce: str) -> str | None:
    """'cancelled' or 'registered' when the owner's nonce was taken so, else None."""
    taken: str | None = await conn.fetchval(
        """SELECT CASE
                WHEN EXISTS (SELECT 1 FROM delegation_cancels c
                             WHERE c.owner = $1 AND c.nonce = $2) THEN 'cancelled'
                WHEN EXISTS (SELECT 1 FROM delegations d
                             WHERE d.owner = $1 AND d.nonce = $2) THEN 'registered'
            END""",
        owner, nonce,
    )  # fmt: skip
    return taken


async def newest_issued(conn: asyncpg.Connection, owner: str, agent: str) -> datetime | None:
    """When the owner's newest delegation to the agent was issued, whatever became of it."""
    newest: datetime | None = await conn.fetchval(
        "SELECT max(d.issued_at) FROM delegations d WHERE d.owner = $1 AND d.agent = $2",
        owner, agent,
    )  # fmt: skip
    return newest


async def supersede(conn: asyncpg.Connection, owner: str, agent: str) -> None:
    """Revoke the owner's unrevoked delegations to this agent: the newest one counts."""
    await conn.execute(
        "UPDATE delegations d SET revoked_at = now()"
        " WHERE d.owner = $1 AND d.agent = $2 AND d.revoked_at IS NULL",
        owner, agent,
    )  # fmt: skip


async def insert(
    conn: asyncpg.Connection,
    owner: str,
    agent: str,
    scopes: Sequence[str],
    namespaces: Sequence[str] | None,
    issued_at: datetime,
    expires_at: datetime | None,
    nonce: str,
    signature: str,
) -> asyncpg.Record | None:
    """The new delegation, or None when the owner's nonce was taken before."""
    row: asyncpg.Record | None = await conn.fetchrow(
        f"""INSERT INTO delegations AS d
                (owner, agent, scopes, namespaces, issued_at, expires_at, nonce, signature)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT (owner, nonce) DO NOTHING RETURNING {COLUMNS}""",
        owner, agent, scopes, namespaces, issued_at, expires_at, nonce, signature,
    )  # fmt: skip
    return row


async def cancel(conn: asyncpg.Connection, owner: str, nonce: str) -> None:
    """Take the owner's nonce for good (a second cancel changes nothing)."""
    await conn.execute(
        "INSERT INTO delegation_cancels (owner, nonce) VALUES ($1, $2)"
        " ON CONFLICT (owner, nonce) DO NOTHING",
        owner, nonce,
    )  # fmt: skip


async def revoke_nonce(conn: asyncpg.Connection, owner: str, nonce: str) -> UUID | None:
    """Revoke the owner's live delegation registered with this nonce: its id, else None."""
    revoked: UUID | None = await conn.fetchval(
        f"""UPDATE delegations d SET revoked_at = now()
            WHERE d.owner = $1 AND d.nonce = $2 AND {LIVE} RETURNING d.id""",
        owner, nonce,
    )  # fmt: skip
    return revoked


async def live_of(conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
    """The live delegations a wallet gave (as owner) or holds (as agent), oldest first."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""SELECT {COLUMNS} FROM delegations d WHERE (d.owner = $1 OR d.agent = $1) AND {LIVE}
            ORDER BY d.created_at, d.id""",
        wallet,
    )
    return rows


async def live_one(conn: asyncpg.Connection, owner: str, agent: str) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM delegations d WHERE d.owner = $1 AND d.agent = $2 AND {LIVE}",
        owner, agent,
    )  # fmt: skip
    return row


async def revoke(conn: asyncpg.Connection, wallet: str, delegation_id: UUID) -> bool:
    """Revoke a live delegation the wallet gave or holds; False when it has none by that id."""
    revoked = await conn.fetchval(
        f"""UPDATE delegations d SET revoked_at = now()
            WHERE d.id = $1 AND (d.owner = $2 OR d.agent = $2) AND {LIVE} RETURNING true""",
        delegation_id, wallet,
    )  # fmt: skip
    return bool(revoked)
