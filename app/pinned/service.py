"""Core memories are pinned memories: `pinned` exempts a memory from decay (scoring.py) and
marks it as always loaded. Pinning goes through MemoryService.update, so a pin is an ordinary
change of the memory, with its rules:

- an immutable memory refuses changes, so pinning or unpinning it is 409 CONFLICT (set
  `pinned` when storing it instead); asking for the state it already has is a no-op, 200;
- another wallet's, a deleted or an unknown id is 404; a malformed id is 422.
"""

from __future__ import annotations

from uuid import UUID

import asyncpg

from app.core.errors import InvalidInput
from app.memory.filters import MemoryFilter
from app.memory.schemas import UpdateIn
from app.memory.service import MemoryService
from app.pinned.schemas import PinIn


def pinned_id(body: PinIn) -> str:
    """The id a pin request names (`memory_id` or `id`; both only if they agree)."""
    if body.memory_id and body.id and body.memory_id != body.id:
        raise InvalidInput("memory_id and id name different memories", {"field": "memory_id"})
    chosen = body.memory_id or body.id
    if not chosen:
        raise InvalidInput("memory_id is required", {"field": "memory_id"})
    return chosen


class PinnedService:
    def __init__(self, memories: MemoryService) -> None:
        self.memories = memories

    async def list_core(
        self, conn: asyncpg.Connection, f: MemoryFilter, limit: int, offset: int
    ) -> tuple[list[asyncpg.Record], int]:
        f.pinned = True
        return await self.memories.list_page(conn, f, limit, offset)

    async def set_pinned(
        self, conn: asyncpg.Connection, wallet: str, memory_id: str, pinned: bool
    ) -> UUID:
        current = await self.memories.get(conn, wallet, memory_id)
        if current["pinned"] != pinned:
            await self.memories.update(conn, wallet, memory_id, UpdateIn(pinned=pinned))
        found: UUID = current["id"]
        return found
