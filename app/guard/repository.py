"""All SQL of namespace guards: each namespace's mode (off, flag, refuse, review), and approving
a quarantined memory. Keyed by the wallet, as every statement."""

from __future__ import annotations

from uuid import UUID

import asyncpg

from app.memory.sql import COLUMNS, LIVE


async def modes(conn: asyncpg.Connection, wallet: str, namespaces: list[str]) -> dict[str, str]:
    """The mode each of these namespaces was set to (a namespace never set is absent)."""
    rows = await conn.fetch(
        "SELECT namespace, mode FROM namespace_guards WHERE user_id = $1"
        " AND namespace = ANY($2::text[])",
        wallet, namespaces,
    )  # fmt: skip
    return {r["namespace"]: r["mode"] for r in rows}


async def set_mode(conn: asyncpg.Connection, wallet: str, namespace: str, mode: str) -> None:
    await conn.execute(
        """INSERT INTO namespace_guards (user_id, namespace, mode) VALUES ($1, $2, $3)
           ON CONFLICT (user_id, namespace)
           DO UPDATE SET mode = $3, updated_at = EXCLUDED.updated_at""",
        wallet, namespace, mode,
    )  # fmt: skip


async def approve(
    conn: asyncpg.Connection, wallet: str, memory_id: UUID
) -> tuple[asyncpg.Record | None, bool]:
    """Release a quarantined memory of the wallet: (the memory, whether it was quarantined);
    (None, False) when the wallet has no such live memory."""
    row = await conn.fetchrow(
        f"""WITH released AS (
                UPDATE memories m SET quarantined = false, updated_at = now()
                WHERE m.id = $1 AND m.user_id = $2 AND m.quarantined AND {LIVE}
                RETURNING {COLUMNS}
            )
            SELECT *, true AS released FROM released
            UNION ALL
            SELECT {COLUMNS}, false FROM memories m
            WHERE m.id = $1 AND m.user_id = $2 AND {LIVE} AND NOT EXISTS (SELECT FROM released)""",
        memory_id, wallet,
    )  # fmt: skip
    return (row, bool(row["released"])) if row is not None else (None, False)
