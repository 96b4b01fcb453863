"""The memory feature's face: `MemoryService`, which the controllers, MCP tools, the console and
the flows call. It holds the configuration and hands each call to the module of its
responsibility:
- store.py: a store, one item, keyed or a batch (dedup.py decides what is a duplicate);
- settled.py: the row every write makes, written once the namespace guard settled it;
- recall.py: the recall pipeline (ranking.py scores its candidates);
- crud.py: reads, update, delete and restore;
- filters.py: which memories a read is about; fields.py: what a write says about a memory.

No SQL here (repository/, its fragments in sql.py) and no HTTP types (controller.py); the
caller's transaction is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np

from app.access.rules import OWNER, Actor
from app.ai.embedders import Embedder
from app.ai.facts import FactModel
from app.ai.heuristics import HeuristicFactModel
from app.core.errors import InvalidInput
from app.history import service as history
from app.memory import crud, recall, settled, store
from app.memory.crud import UpdateOutcome
from app.memory.dedup import StoreOutcome
from app.memory.fields import KeptState, MemoryFields, NewMemory
from app.memory.filters import NEWEST_FIRST, ListOrder, MemoryFilter, list_filter, recall_filter
from app.memory.ranking import Recalled
from app.memory.recall import RecallResult, Rerank
from app.memory.repository import reads
from app.memory.schemas import RecallIn, StoreIn, UpdateIn, parse_memory_id
from app.memory.scoring import ACCESS_COUNTED_ONCE_PER, DEFAULT_MIN_SIMILARITY
from app.memory.sizes import RecentSizes

# What callers take from the face beside the service: the values its methods take and give,
# and the parsing of what a request names.
__all__ = [
    "MemoryService",
    "RecallResult",
    "Recalled",
    "Rerank",
    "StoreOutcome",
    "UpdateOutcome",
    "list_filter",
    "parse_memory_id",
    "recall_filter",
    "version_in",
]


def version_in(if_match: str) -> int | None:
    """The version an If-Match names: `3`, `"3"` or `W/"3"`; `*` names none (any version)."""
    raw = if_match.strip().removeprefix("W/").strip('"')
    if raw == "*":
        return None
    if not raw.isdigit() or not 1 <= int(raw) < 2**31:
        raise InvalidInput("If-Match must name a version: 1 or more", {"field": "If-Match"})
    return int(raw)


class MemoryService:
    def __init__(
        self,
        embedder: Embedder,
        access_boost: bool = True,
        recall_counts_access: bool = False,
        access_counted_once_per: timedelta = ACCESS_COUNTED_ONCE_PER,
        second_round: bool = True,
        event_time_boost: bool = True,
        rerank: Rerank | None = None,
        speaker_boost: bool = True,
        fact_model: FactModel | None = None,
        merge_namespaces: Sequence[str] = (),
        keyword: str = "passage",
        passages: bool = False,
        keyword_agreement: bool = True,
    ) -> None:
        self.embedder = embedder
        # merges two versions of a keyed memory (on_conflict "merge"): the LLM when configured
        self.fact_model: FactModel = fact_model or HeuristicFactModel()
        # where a stale keyed store merges unless it says otherwise (ENGRAM_MERGE_NAMESPACES)
        self.merge_namespaces = frozenset(merge_namespaces)
        self.access_boost = access_boost  # the contract's; see scoring.py for the option
        # MemoClaw's accounting (every recalled memory counts as accessed); off: only uses count
        self.recall_counts_access = recall_counts_access
        self.access_counted_once_per = access_counted_once_per
        self.second_round = second_round  # continuation and relations of the top hits
        self.event_time_boost = event_time_boost  # the time a query names
        self.speaker_boost = speaker_boost  # what the people a query names said
        self.keyword = keyword  # keyword_match's form (repository KEYWORD_FORMS)
        self.keyword_agreement = keyword_agreement  # keyword side weighted by keyword_share
        self.passages = passages  # a long memory's vector_sim is its best window's
        # what stores embed a long memory's passages with (none: they store none)
        self.passage_embedder: Embedder | None = embedder if passages else None
        self.rerank = rerank or Rerank()  # the optional cross-encoder stage
        self.default_min_similarity = DEFAULT_MIN_SIMILARITY.get(embedder.model_name, 0.0)
        self.sizes = RecentSizes()  # picks exact scans or index walks (app/memory/sizes.py)

    # ---- store (store.py) ------------------------------------------------------------------

    # a batch store: `history_action` is what new memories are recorded as ("import" for the
    # import API); without `exact_dedup` (and `near_dedup`) every item becomes new (bound before
    # the method `store` below hides the module's name)
    store_batch = store.store_batch

    async def store(
        self, conn: asyncpg.Connection, wallet: str, item: StoreIn, actor: Actor = OWNER
    ) -> tuple[StoreOutcome, int]:
        """`actor`: a grantee or an agent key sets no owner-only field (app/memory/actor.py)."""
        return await store.store(self, conn, wallet, item, actor)

    async def upsert_by_key(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        fields: MemoryFields,
        item: StoreIn,
        action: history.Action = "create",
        actor: Actor = OWNER,
    ) -> tuple[StoreOutcome, int]:
        """A keyed store: a new version of the memory holding the key, or a new memory."""
        return await store.upsert_by_key(self, conn, wallet, fields, item, action, actor)

    async def create_without_dedup(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        fields: MemoryFields,
        history_action: history.Action = "create",
    ) -> tuple[asyncpg.Record, int]:
        """A new memory exactly as given, without dedup (consolidation's synthesised memory)."""
        return await store.create_without_dedup(self, conn, wallet, fields, history_action)

    async def insert(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        new: list[NewMemory],
        history_action: history.Action = "create",
    ) -> list[asyncpg.Record]:
        """New memories exactly as given (made with `new_memory`), without dedup, each recorded
        in history as `history_action` (an import's chunks)."""
        return await store.insert(self, conn, wallet, new, history_action)

    def new_memory(
        self,
        wallet: str,
        fields: MemoryFields,
        vector: np.ndarray,
        kept: KeptState | None = None,
    ) -> NewMemory:
        """A memory ready for repository.insert_many; `kept` for what an import carries over."""
        return settled.new_memory(wallet, fields, vector, self.embedder.model_name, kept)

    # ---- read (crud.py) --------------------------------------------------------------------

    async def get(self, conn: asyncpg.Connection, wallet: str, memory_id: str) -> asyncpg.Record:
        return await crud.get(conn, wallet, memory_id)

    async def by_key(
        self, conn: asyncpg.Connection, wallet: str, namespace: str, key: str
    ) -> asyncpg.Record:
        """The live memory named `key` in the namespace (reading it by key counts no access)."""
        return await crud.by_key(conn, wallet, namespace, key)

    async def use(
        self, conn: asyncpg.Connection, wallet: str, memory_id: str
    ) -> tuple[asyncpg.Record, bool]:
        """A caller used the memory (read it by id, or said it helped): count the access, at
        most once per `access_counted_once_per` (scoring.py). Returns the memory and whether this
        use was counted."""
        return await crud.use(conn, wallet, memory_id, self.access_counted_once_per)

    async def list_page(
        self,
        conn: asyncpg.Connection,
        f: MemoryFilter,
        limit: int,
        offset: int,
        order: ListOrder = NEWEST_FIRST,
    ) -> tuple[list[asyncpg.Record], int]:
        return await reads.list_page(conn, f, limit, offset, order)

    async def count(self, conn: asyncpg.Connection, f: MemoryFilter) -> int:
        return await reads.count(conn, f)

    search = staticmethod(crud.search)  # a keyword search of the memories `f` selects

    async def namespaces(self, conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
        return await reads.namespaces(conn, wallet)

    async def namespace_names(self, conn: asyncpg.Connection, wallet: str) -> list[str]:
        return await reads.namespace_names(conn, wallet)

    async def stats(self, conn: asyncpg.Connection, wallet: str) -> dict[str, Any]:
        return await reads.stats(conn, wallet)

    # ---- update / delete (crud.py) ---------------------------------------------------------

    async def update(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        memory_id: str,
        patch: UpdateIn,
        actor: Actor = OWNER,
    ) -> tuple[asyncpg.Record, int]:
        """`actor`: a grantee or an agent key sets no owner-only field (app/memory/actor.py)."""
        return await crud.update(self, conn, wallet, memory_id, patch, actor)

    async def update_batch(
        self, conn: asyncpg.Connection, wallet: str, patches: list[tuple[str, UpdateIn]]
    ) -> tuple[list[UpdateOutcome], int]:
        """Apply each update in its own savepoint: one bad item is reported, not fatal."""
        return await crud.update_batch(self, conn, wallet, patches)

    def changes_for(
        self, current: asyncpg.Record, patch: UpdateIn, now: datetime
    ) -> tuple[dict[str, Any], str | None]:
        """The column changes a PATCH asks for, and the new content if it differs."""
        return crud.changes_for(current, patch, now)

    def content_columns(self, content: str, vector: np.ndarray) -> dict[str, Any]:
        return settled.content_columns(content, vector, self.embedder.model_name)

    async def delete(self, conn: asyncpg.Connection, wallet: str, memory_id: str) -> UUID:
        return await crud.delete(conn, wallet, memory_id)

    async def restore(
        self, conn: asyncpg.Connection, wallet: str, memory_id: str
    ) -> asyncpg.Record:
        """Undelete a soft-deleted memory of the wallet (Engram's addition to the contract)."""
        return await crud.restore(conn, wallet, memory_id)

    async def approve(
        self, conn: asyncpg.Connection, wallet: str, memory_id: UUID
    ) -> asyncpg.Record:
        """Release a memory the namespace guard holds for review (app/guard/service.py)."""
        return await crud.approve(conn, wallet, memory_id)

    async def delete_many(
        self, conn: asyncpg.Connection, wallet: str, raw_ids: list[str]
    ) -> list[dict[str, Any]]:
        return await crud.delete_many(conn, wallet, raw_ids)

    async def fold(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        retagged: dict[UUID, dict[str, Any]],
        merged_into: dict[UUID, UUID],
        kept: list[history.Change],
    ) -> None:
        """A consolidation's changes: the keepers' new metadata, the folded-away memories
        deleted, and the history of both (`kept`: the keepers' changes)."""
        await crud.fold(conn, wallet, retagged, merged_into, kept)

    # ---- recall (recall.py) ----------------------------------------------------------------

    async def recall(
        self, conn: asyncpg.Connection, wallet: str, req: RecallIn, actor: Actor = OWNER
    ) -> RecallResult:
        """`actor` kept to a namespace: the memories and their relation counts are from there
        alone (the second round follows relations and continuations within `req`'s filter)."""
        return await recall.recall(self, conn, wallet, req, actor)
