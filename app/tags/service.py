"""Tags of a wallet's live memories (metadata.tags), optionally within a namespace, session or
agent, most used first (ties by name). The answer lists them as `{tag, count}`, the shape
MemoClaw's MCP server shows (it counts a bare name as 0), with `counts` by name beside it."""

from __future__ import annotations

import asyncpg

from app.tags import repository as repo


class TagService:
    async def tag_counts(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        namespace: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[tuple[str, int]]:
        rows = await repo.tag_counts(conn, wallet, namespace, session_id, agent_id)
        return [(r["tag"], int(r["count"])) for r in rows]
