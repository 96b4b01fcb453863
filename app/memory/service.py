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
from datetime import timedelta
from typing import Any

import asyncpg
import numpy as np

from app.ai.embedders import Embedder
from app.ai.facts import FactModel
from app.ai.heuristics import HeuristicFactModel
from app.core.errors import InvalidInput
from app.memory import crud, recall, settled, store
from app.memory.crud import UpdateOutcome
from app.memory.dedup import StoreOutcome
from app.memory.fields import KeptState, MemoryFields, NewMemory
from app.memory.filters import NEWEST_FIRST, ListOrder, MemoryFilter, list_filter, recall_filter
from app.memory.ranking import Recalled
from app.memory.recall import RecallResult, Rerank
from app.memory.repository import reads
from app.memory.schemas import parse_memory_id
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

    # Each method is the module function that does it: those that take the service as their
    # setup (its embedder, thresholds, recall settings) are bound as methods, the others as
    # static methods. Their docstrings are in the modules.

    # ---- recall (recall.py) ----------------------------------------------------------------

    recall = recall.recall  # `actor` kept to a namespace: memories and counts from there alone

    # ---- store (store.py; bound before the method `store` hides the module's name) ----------

    store_batch = store.store_batch
    upsert_by_key = store.upsert_by_key
    create_without_dedup = store.create_without_dedup
    insert = store.insert
    store = store.store

    def new_memory(
        self,
        wallet: str,
        fields: MemoryFields,
        vector: np.ndarray,
        kept: KeptState | None = None,
    ) -> NewMemory:
        """A memory ready for repository.insert_many; `kept` for what an import carries over."""
        return settled.new_memory(wallet, fields, vector, self.embedder.model_name, kept)

    # ---- read (crud.py, repository/reads.py) -------------------------------------------------

    get = staticmethod(crud.get)
    by_key = staticmethod(crud.by_key)
    search = staticmethod(crud.search)

    # The repository's own functions are called through their module, where tests and the SQL
    # audit (tests/support/sql_audit.py) may wrap them.

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

    async def namespaces(self, conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
        return await reads.namespaces(conn, wallet)

    async def namespace_names(self, conn: asyncpg.Connection, wallet: str) -> list[str]:
        return await reads.namespace_names(conn, wallet)

    async def stats(self, conn: asyncpg.Connection, wallet: str) -> dict[str, Any]:
        return await reads.stats(conn, wallet)

    async def use(
        self, conn: asyncpg.Connection, wallet: str, memory_id: str
    ) -> tuple[asyncpg.Record, bool]:
        """A caller used the memory (read it by id, or said it helped): count the access, at
        most once per `access_counted_once_per` (scoring.py). Returns the memory and whether this
        use was counted."""
        return await crud.use(conn, wallet, memory_id, self.access_counted_once_per)

    # ---- update / delete (crud.py) ---------------------------------------------------------

    update = crud.update
    update_batch = crud.update_batch
    changes_for = staticmethod(crud.changes_for)
    delete = staticmethod(crud.delete)
    restore = staticmethod(crud.restore)
    approve = staticmethod(crud.approve)
    delete_many = staticmethod(crud.delete_many)
    fold = staticmethod(crud.fold)

    def content_columns(self, content: str, vector: np.ndarray) -> dict[str, Any]:
        return settled.content_columns(content, vector, self.embedder.model_name)
