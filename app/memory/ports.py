"""What memory asks of the features built above it, as protocols: asgi.py hands in the features
that fill them (by dependency name), so memory names none of them.

- `LinkedRelations` (`relations_service`, app/relations/service.py's RelationService): the
  relations of the memories a recall returns, for its `include_relations`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable
from uuid import UUID

import asyncpg


# runtime_checkable: Litestar checks a dependency's value against its declared type
@runtime_checkable
class LinkedRelations(Protocol):
    async def of_memories(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        memory_ids: Sequence[UUID],
        kept_to: str | None = None,
    ) -> dict[UUID, list[asyncpg.Record]]:
        """The visible relations of several memories, by memory, in one query; with `kept_to`,
        only those whose other end is in that namespace."""
        ...
