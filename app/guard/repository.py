"""All SQL of namespace guards: each namespace's mode (off, flag, refuse, review). Keyed by the
wallet, as every statement."""

from __future__ import annotations

import asyncpg


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
