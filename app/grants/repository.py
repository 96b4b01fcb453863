"""All SQL for grants. A grant is live until it expires or is revoked."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import asyncpg

LIVE_GRANT = "g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > now())"
COLUMNS = "g.id, g.owner, g.grantee, g.namespace, g.access, g.expires_at, g.created_at"


async def insert(
    conn: asyncpg.Connection,
    owner: str,
    grantee: str,
    namespace: str,
    access: str,
    expires_at: datetime | None,
) -> asyncpg.Record:
    row: asyncpg.Record = await conn.fetchrow(
        f"""INSERT INTO grants AS g (owner, grantee, namespace, access, expires_at)
            VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}""",
        owner, grantee, namespace, access, expires_at,
    )  # fmt: skip
    return row


async def live_of(conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
    """The live grants a wallet gave or received, oldest first."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""SELECT {COLUMNS} FROM grants g WHERE (g.owner = $1 OR g.grantee = $1) AND {LIVE_GRANT}
            ORDER BY g.created_at, g.id""",
        wallet,
    )
    return rows


async def revoke(conn: asyncpg.Connection, owner: str, grant_id: UUID) -> bool:
    """Revoke one of the owner's live grants; False when it has none by that id."""
    revoked = await conn.fetchval(
        f"""UPDATE grants g SET revoked_at = now()
            WHERE g.id = $1 AND g.owner = $2 AND {LIVE_GRANT} RETURNING true""",
        grant_id, owner,
    )  # fmt: skip
    return bool(revoked)


async def live_access(
    conn: asyncpg.Connection, owner: str, grantee: str, namespace: str
) -> set[str]:
    """What live grants of `owner` give `grantee` on `namespace`: {'read'}, {'write'}, both."""
    rows = await conn.fetch(
        f"""SELECT DISTINCT g.access FROM grants g
            WHERE g.grantee = $1 AND g.owner = $2 AND g.namespace = $3 AND {LIVE_GRANT}""",
        grantee, owner, namespace,
    )  # fmt: skip
    return {r["access"] for r in rows}
