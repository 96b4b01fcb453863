"""Memory rules: validation beyond the wire types, dedup on store, immutability, recall ranking.

No SQL here (repository.py) and no HTTP types (controller.py); the caller's transaction is used.
"""

from __future__ import annotations

import hashlib
import logging
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

import asyncpg
import msgspec
import numpy as np

from app.ai.embedders import Embedder, tails_of
from app.ai.facts import FactModel, FactModelError
from app.ai.heuristics import HeuristicFactModel
from app.ai.rerank import Reranker, RerankUnavailable
from app.core.errors import (
    InvalidInput,
    KeyTaken,
    MemoryImmutable,
    MemoryNotDeleted,
    MemoryNotFound,
    VersionConflict,
)
from app.core.schemas import nfc_names, parse_time
from app.db import settings_repository as db
from app.guard import service as guard
from app.history import service as history
from app.infra.metrics import phase
from app.memory import repository as repo
from app.memory.actor import OWNER, Actor, check_owner_only
from app.memory.dates import EventTime, asks_when, event_time, query_window
from app.memory.repository import MemoryFields, MemoryFilter, NewMemory
from app.memory.schemas import (
    DEFAULT_IMPORTANCE,
    DEFAULT_MEMORY_TYPE,
    DEFAULT_NAMESPACE,
    MAX_TAGS,
    RecallIn,
    StoreIn,
    UpdateIn,
    check_metadata,
    check_tags,
    parse_future_time,
    parse_metadata_filter,
    parse_moment,
    split_tags,
)
from app.memory.scoring import (
    ACCESS_COUNTED_ONCE_PER,
    CONTINUATION_FOLLOW,
    CONTINUATION_MAX_GAP,
    DEFAULT_MIN_SIMILARITY,
    KEYWORD_AGREEMENT_TOP,
    SECOND_ROUND_SEEDS,
    Signals,
    carried_score,
    score_memory,
    with_carried,
    with_event_time,
    with_rerank,
    with_speaker,
)
from app.memory.sizes import RecentSizes
from app.memory.speakers import named_in, speaker_of

log = logging.getLogger("engram")

# Store merges a new memory into an existing one of the same wallet and namespace at or above
# this cosine similarity (MemoClaw's seed architecture figure; docs/api-contract.md,
# "Dedup on store").
DEDUP_SIMILARITY = 0.95
# Candidates gathered from each of the vector and keyword sides before scoring.
MIN_CANDIDATES_PER_SIDE = 50
CANDIDATES_PER_RESULT = 4
# Up to this many matching memories, recall scans them exactly instead of walking the HNSW graph:
# an exact scan of 2,000 vectors costs a few ms and is always right, while a graph walk for a
# small wallet in a big partition has to skip most nodes (calibration in docs/api-contract.md,
# "Measurements the code cites": forced HNSW 63 ms vs exact 1.3 ms for a 900-memory wallet among
# 1M rows).
EXACT_SCAN_MAX_ROWS = 2000
# A store's near-duplicate lookup: up to this many stored memories, a scan of them beats a
# graph walk for one item (100 single walks against 500 rows: ~30 ms either way, measured).
DEDUP_SCAN_MAX_ROWS = 500
# Several items measure the wallet's rows read once (repository `nearest_each`), which beats a
# walk per item further: 100 items against 2,000 rows 68-87 ms read once, 658-693 ms walked;
# against 5,000 rows the walks win, 64 ms to 295 (measured in one wallet, its own partition).
DEDUP_BATCH_SCAN_MAX_ROWS = 2000
# The keyword side of a recall reads at most this many distinct words of the query, within this
# many characters (the search query's limit, docs/api-contract.md, "Limits"): PostgreSQL's
# text-search parser recurses per term, so 16,384 words overflowed its stack and 10,000 took
# 3.4 s. The vector side still embeds the whole query.
MAX_KEYWORD_TERMS = 64
MAX_KEYWORD_CHARS = 1000


async def insert_settled(
    conn: asyncpg.Connection, wallet: str, new: list[NewMemory], embedder: Embedder | None = None
) -> list[asyncpg.Record]:
    """Insert new memories once the namespace guards settled their provenance and flags (or
    refused them: app/guard/service.py); with `embedder`, a long one's passages too."""
    await guard.settle(conn, wallet, new)
    rows = await repo.insert_many(conn, new)
    if embedder is not None:
        await store_passages(conn, embedder, wallet, rows, replace=False)
    return rows


async def update_settled(
    conn: asyncpg.Connection,
    wallet: str,
    current: asyncpg.Record,
    changes: dict[str, Any],
    embedder: Embedder | None = None,
) -> asyncpg.Record:
    """Apply changes to a stored memory once the namespace guard settled a new content's flags
    (or refused it, or quarantined it again: app/guard/service.py); a new content's passages
    replace the old ones."""
    await guard.settle_change(conn, wallet, current["namespace"], changes)
    row = await repo.update(conn, wallet, current["id"], changes)
    if "content" in changes and embedder is not None:
        await store_passages(conn, embedder, wallet, [row], replace=True)
    elif "content" in changes:  # passages stored while they were on no longer match
        await repo.insert_passages(conn, wallet, [row["id"]], [[]])
    return row


async def store_passages(
    conn: asyncpg.Connection,
    embedder: Embedder,
    wallet: str,
    rows: list[asyncpg.Record],
    replace: bool,
) -> int:
    """Embed each memory's text past the model's window, in overlapping windows, and store them
    as its passages (recall scores a memory by its best window); `replace` drops the passages
    a memory had even when it now has none. A memory within the window costs a tokenisation
    only. Returns the tokens embedded."""
    tails = await tails_of(embedder, [r["content"] for r in rows])
    chosen = [i for i, found in enumerate(tails) if found or replace]
    if not any(tails[i] for i in chosen) and not replace:
        return 0
    embedded = await embedder.embed([text for i in chosen for text in tails[i]])
    vectors = iter(embedded.vectors)
    passages = [[next(vectors) for _ in tails[i]] for i in chosen]
    await repo.insert_passages(conn, wallet, [rows[i]["id"] for i in chosen], passages)
    return embedded.tokens


def held_back_from(
    ranked: list[Recalled], limit: int, exclude_flagged: bool | None
) -> tuple[list[Recalled], int]:
    """Without the flagged memories when asked, and how many of them ranked within the answer
    (the first `limit` unflagged ones and the flagged ones among them)."""
    if not exclude_flagged:
        return ranked, 0
    kept: list[Recalled] = []
    held = 0
    for item in ranked:
        if len(kept) == limit:
            break
        if item.row["flags"]:
            held += 1
        else:
            kept.append(item)
    return kept, held


def content_digest(content: str) -> bytes:
    return hashlib.sha256(content.encode()).digest()


@dataclass(frozen=True)
class UpdateOutcome:
    """One item of a batch update: applied, or refused with the error that says why."""

    memory_id: str
    error: InvalidInput | MemoryNotFound | MemoryImmutable | VersionConflict | KeyTaken | None = (
        None
    )

    @property
    def updated(self) -> bool:
        return self.error is None


def parse_memory_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidInput(f"'{raw}' is not a memory id (a UUID)", {"field": "id"}) from exc


def keyword_text(query: str) -> str:
    """The part of a recall query its keyword side searches: the query itself when short, else
    its first distinct words up to MAX_KEYWORD_TERMS and MAX_KEYWORD_CHARS."""
    words = query.split()
    if len(words) <= MAX_KEYWORD_TERMS and len(query) <= MAX_KEYWORD_CHARS:
        return query
    kept: list[str] = []
    size = 0
    for word in dict.fromkeys(words):
        size += len(word) + 1
        if len(kept) == MAX_KEYWORD_TERMS or size > MAX_KEYWORD_CHARS + 1:
            break
        kept.append(word)
    return " ".join(kept)


def now_utc() -> datetime:
    return datetime.now(UTC)


@dataclass
class StoreOutcome:
    row: asyncpg.Record
    deduplicated: bool
    before: asyncpg.Record | None = None  # a dedup: the memory merged into, as it was (history)


def store_history(outcome: StoreOutcome, action: history.Action) -> history.Change | None:
    """A stored item's history: `action` for a new memory, an update for what a merge changed."""
    if not outcome.deduplicated:
        return history.created(outcome.row, action)
    return history.updated(outcome.before, outcome.row) if outcome.before is not None else None


@dataclass
class Recalled:
    row: asyncpg.Record
    signals: Signals
    accesses_counted: int = 0  # what this recall added to access_count (MemoClaw's accounting)


class RecallResult(NamedTuple):
    recalled: list[Recalled]
    tokens: int  # the query's embedding tokens
    reranked: bool | None  # None: no rerank asked; False: asked, but no reranker answered
    held_back: int = 0  # flagged memories that ranked within the answer (exclude_flagged)


@dataclass(frozen=True)
class Rerank:
    """The rerank stage's configuration: the model (None: none configured), whether every
    recall uses it, and how many of the best candidates it orders."""

    model: Reranker | None = None
    by_default: bool = False
    candidates: int = 30


def _merge_tags(*tag_lists: list[str] | None) -> list[str]:
    merged: list[str] = []
    for tags in tag_lists:
        for tag in tags or []:
            if tag not in merged:
                merged.append(tag)
    return merged


def prepare_store(item: StoreIn, now: datetime, field: str = "") -> MemoryFields:
    if not item.content.strip():
        raise InvalidInput(f"{field or ''}content must not be blank", {"field": f"{field}content"})
    metadata = dict(item.metadata or {})
    if item.tags is not None or "tags" in metadata:
        tags = _merge_tags(check_tags(metadata.get("tags", []), f"{field}metadata.tags"), item.tags)
        if len(tags) > MAX_TAGS:
            raise InvalidInput(f"{field}tags: at most {MAX_TAGS} tags", {"field": f"{field}tags"})
        metadata["tags"] = tags
    check_metadata(metadata, f"{field}metadata")
    return MemoryFields(
        content=item.content,
        metadata=metadata,
        importance=item.importance,
        namespace=item.namespace or DEFAULT_NAMESPACE,
        memory_type=item.memory_type or DEFAULT_MEMORY_TYPE,
        session_id=item.session_id,
        agent_id=item.agent_id,
        expires_at=parse_future_time(item.expires_at, f"{field}expires_at", now),
        pinned=bool(item.pinned),
        immutable=bool(item.immutable),
        **_event_fields(item, now, field),
        key=_checked_key(item.key, field),
        source=item.source,
        written_by=None,  # the request's (app/guard/service.py); an import sets its own
        writer=None,
        surface=None,
    )


def _stored_over(fields: MemoryFields, item: StoreIn) -> dict[str, Any]:
    """The columns a keyed store sets on the memory it updates, beside the content: what it
    says (its metadata and tags, importance, type, ids, pinning), and its expiry, kept or
    cleared as it says (a store describes the memory as it now is)."""
    changes: dict[str, Any] = {"expires_at": fields.expires_at}
    if item.metadata is not None or item.tags is not None:
        changes["metadata"] = fields.metadata
    for column in ("importance", "memory_type", "session_id", "agent_id", "pinned", "immutable"):
        if getattr(item, column) is not None:
            changes[column] = getattr(fields, column)
    return changes


def version_in(if_match: str) -> int | None:
    """The version an If-Match names: `3`, `"3"` or `W/"3"`; `*` names none (any version)."""
    raw = if_match.strip().removeprefix("W/").strip('"')
    if raw == "*":
        return None
    if not raw.isdigit() or not 1 <= int(raw) < 2**31:
        raise InvalidInput("If-Match must name a version: 1 or more", {"field": "If-Match"})
    return int(raw)


def _checked_key(key: str | None, field: str = "") -> str | None:
    """A store's key in NFC (as names are compared), refused when blank."""
    if key is None:
        return None
    if not key.strip():
        raise InvalidInput(f"{field}key must not be blank", {"field": f"{field}key"})
    return unicodedata.normalize("NFC", key)


def _event_fields(item: StoreIn, now: datetime, field: str) -> dict[str, datetime | None]:
    """occurred_at and mentioned_at of a new memory (app/memory/dates.py)."""
    found = event_time(item.content, parse_time(item.occurred_at, f"{field}occurred_at"), now)
    if found is None:
        return {"occurred_at": None, "mentioned_at": None}
    return {"occurred_at": found.occurred_at, "mentioned_at": found.mentioned_at}


def merged_metadata(existing: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """Incoming keys win, tags are unioned; if the union breaks a limit, only tags are merged."""
    tags = _merge_tags(existing.get("tags"), incoming.get("tags"))[:MAX_TAGS]
    merged = {**existing, **incoming}
    if tags:
        merged["tags"] = tags
    try:
        check_metadata(merged)
    except InvalidInput:
        merged = {**existing, **({"tags": tags} if tags else {})}
    return merged


@dataclass
class _BatchPlan:
    """What each item of a store becomes: new (`targets[i] is None`), or merged into a stored
    memory (its record) or into an earlier new item of the batch (its index)."""

    items: list[MemoryFields]
    vectors: list[np.ndarray]
    keys: list[repo.ContentKey]
    fresh: list[int] = field(default_factory=list)
    targets: list[asyncpg.Record | int | None] = field(default_factory=list)
    _first_new: dict[repo.ContentKey, int] = field(default_factory=dict)

    def decide(
        self,
        i: int,
        stored_same: asyncpg.Record | None,
        stored_near: tuple[asyncpg.Record, float] | None,
    ) -> None:
        target = self._duplicate_of(i, stored_same, stored_near)
        if target is None:
            self._first_new.setdefault(self.keys[i], i)
            self.fresh.append(i)
        self.targets.append(target)

    def _duplicate_of(
        self,
        i: int,
        stored_same: asyncpg.Record | None,
        stored_near: tuple[asyncpg.Record, float] | None,
    ) -> asyncpg.Record | int | None:
        if stored_same is not None:
            return stored_same
        if self.keys[i] in self._first_new:
            return self._first_new[self.keys[i]]
        # the nearest among stored memories and the batch's earlier new items (what a one-by-one
        # store would compare against), if it is close enough
        near: list[tuple[float, asyncpg.Record | int]] = []
        if stored_near is not None:
            near.append((stored_near[1], stored_near[0]))
        namespace = self.items[i].namespace
        near.extend(
            (float(np.dot(self.vectors[i], self.vectors[j])), j)
            for j in self.fresh
            if self.items[j].namespace == namespace
        )
        similarity, target = max(near, key=lambda c: c[0], default=(0.0, None))
        return target if similarity >= DEDUP_SIMILARITY else None


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
        self.fact_model = fact_model or HeuristicFactModel()
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

    # ---- store -----------------------------------------------------------------------------

    async def store(
        self, conn: asyncpg.Connection, wallet: str, item: StoreIn, actor: Actor = OWNER
    ) -> tuple[StoreOutcome, int]:
        """`actor`: a grantee or an agent key sets no owner-only field (app/memory/actor.py)."""
        check_owner_only(actor, item)
        prepared = prepare_store(item, now_utc())
        if prepared.key is not None:
            return await self.upsert_by_key(conn, wallet, prepared, item, actor=actor)
        with phase("store", "embed"):
            embedded = await self.embedder.embed([prepared.content])
        with phase("store", "sql"):
            [outcome] = await self._store_deduplicated(conn, wallet, [prepared], embedded.vectors)
            await history.record(conn, wallet, [store_history(outcome, "create")])
        return outcome, embedded.tokens

    async def upsert_by_key(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        fields: MemoryFields,
        item: StoreIn,
        action: history.Action = "create",
        actor: Actor = OWNER,
    ) -> tuple[StoreOutcome, int]:
        """A keyed store: the memory holding the key in its namespace, as a new version, or a
        new memory at version 1 (no dedup: the key says which memory it is). Stores of one key
        take turns until commit, so none is lost; a writer that names the version it read meets
        a newer one as its `on_conflict` says. A grantee's or an agent key's store leaves the
        memory's expiry as the owner set it (it may not set one: app/memory/actor.py)."""
        assert fields.key is not None
        await repo.lock_key(conn, wallet, fields.namespace, fields.key)
        current = await repo.holding_key(conn, wallet, fields.namespace, fields.key, True)
        if current is None:
            embedded = await self.embedder.embed([fields.content])
            new = self.new_memory(wallet, fields, embedded.vectors[0])
            [row] = await insert_settled(conn, wallet, [new], self.passage_embedder)
            await history.record(conn, wallet, [history.created(row, action)])
            return StoreOutcome(row, False), embedded.tokens
        if current["immutable"]:
            raise MemoryImmutable(current["id"], "changed")
        content, tokens, merged = await self._content_for(current, fields.content, item)
        embedded = await self.embedder.embed([content])
        changes = self.content_columns(content, embedded.vectors[0]) | _stored_over(fields, item)
        if actor.for_owner:
            del changes["expires_at"]
        after = await update_settled(conn, wallet, current, changes, self.passage_embedder)
        change = history.versioned(current, after)
        if merged:
            change.changes["merged"] = {"stored": current["content"], "sent": fields.content}
        await history.record(conn, wallet, [change])
        return StoreOutcome(after, False), tokens + embedded.tokens

    async def _content_for(
        self, current: asyncpg.Record, sent: str, item: StoreIn
    ) -> tuple[str, int, bool]:
        """What a keyed store writes over `current`: what it sent, unless it read an older
        version: then a 412 (reject, the default), what it sent (overwrite), or both merged
        (merge; the default in ENGRAM_MERGE_NAMESPACES) -> (content, tokens, merged)."""
        expected = item.expected_version
        if expected is None or expected == current["version"]:
            return sent, 0, False
        default = "merge" if current["namespace"] in self.merge_namespaces else "reject"
        mode = item.on_conflict or default
        if mode == "reject":
            raise VersionConflict(current["id"], expected, current["version"])
        if mode == "overwrite":
            return sent, 0, False
        return (*await self._merged([current["content"], sent]), True)

    async def _merged(self, contents: list[str]) -> tuple[str, int]:
        """Two versions as one: the LLM's merge, or the offline one when it fails or is not
        configured."""
        try:
            return await self.fact_model.merge(contents)
        except FactModelError as exc:
            log.warning("merging offline: %s", exc)
            return await HeuristicFactModel().merge(contents)

    async def store_batch(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        items: list[StoreIn],
        near_dedup: bool = True,
        history_action: history.Action = "create",
        exact_dedup: bool = True,
    ) -> tuple[list[StoreOutcome], int]:
        """`history_action` is what new memories are recorded as ("import" for the import API);
        without `exact_dedup` (and `near_dedup`) every item becomes a new memory."""
        now = now_utc()
        prepared = [prepare_store(item, now, f"memories[{i}].") for i, item in enumerate(items)]
        if any(p.key is not None for p in prepared):
            return await self._store_batch_with_keys(
                conn, wallet, items, prepared, near_dedup, history_action, exact_dedup
            )
        embedded = await self.embedder.embed([p.content for p in prepared])
        if exact_dedup:
            outcomes = await self._store_deduplicated(
                conn, wallet, prepared, embedded.vectors, near_dedup
            )
        else:
            new = [
                self.new_memory(wallet, p, v)
                for p, v in zip(prepared, embedded.vectors, strict=True)
            ]
            outcomes = [
                StoreOutcome(r, False)
                for r in await insert_settled(conn, wallet, new, self.passage_embedder)
            ]
        # one statement for the whole batch's history
        await history.record(conn, wallet, [store_history(o, history_action) for o in outcomes])
        return outcomes, embedded.tokens

    async def _store_batch_with_keys(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        items: list[StoreIn],
        prepared: list[MemoryFields],
        near_dedup: bool,
        history_action: history.Action,
        exact_dedup: bool,
    ) -> tuple[list[StoreOutcome], int]:
        """A batch holding keyed items: each keyed one upserted in turn (as a keyed store), the
        others stored together as a batch is; outcomes in the items' order."""
        outcomes: list[StoreOutcome | None] = [None] * len(items)
        tokens = 0
        for i, (item, fields) in enumerate(zip(items, prepared, strict=True)):
            if fields.key is not None:
                outcomes[i], used = await self.upsert_by_key(
                    conn, wallet, fields, item, history_action
                )
                tokens += used
        plain = [i for i, fields in enumerate(prepared) if fields.key is None]
        if plain:
            stored, used = await self.store_batch(
                conn, wallet, [items[i] for i in plain], near_dedup, history_action, exact_dedup
            )
            tokens += used
            for i, outcome in zip(plain, stored, strict=True):
                outcomes[i] = outcome
        return [o for o in outcomes if o is not None], tokens

    async def create_without_dedup(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        fields: MemoryFields,
        history_action: history.Action = "create",
    ) -> tuple[asyncpg.Record, int]:
        """A new memory exactly as given, without dedup (consolidation's synthesised memory)."""
        embedded = await self.embedder.embed([fields.content])
        new = self.new_memory(wallet, fields, embedded.vectors[0])
        [row] = await insert_settled(conn, wallet, [new], self.passage_embedder)
        await history.record(conn, wallet, [history.created(row, history_action)])
        return row, embedded.tokens

    def new_memory(
        self,
        wallet: str,
        fields: MemoryFields,
        vector: np.ndarray,
        kept: repo.KeptState | None = None,
    ) -> NewMemory:
        """A memory ready for repository.insert_many; `kept` for what an import carries over."""
        return NewMemory(
            wallet=wallet,
            fields=fields,
            importance=DEFAULT_IMPORTANCE if fields.importance is None else fields.importance,
            content_hash=content_digest(fields.content),
            embedding=vector,
            embedding_model=self.embedder.model_name,
            kept=kept,
        )

    async def _store_deduplicated(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        items: list[MemoryFields],
        vectors: list[np.ndarray],
        near_dedup: bool = True,
    ) -> list[StoreOutcome]:
        """Store `items` as if one by one, in order, in a fixed number of statements.

        Each item merges into a duplicate (the same content in its namespace, else with
        `near_dedup` the closest memory there at cosine >= DEDUP_SIMILARITY) among the wallet's
        memories and the batch's earlier new items, or is inserted. Lookups run once for the
        whole batch against the stored memories; the batch's own items are compared here.
        Statements: lock, exact lookup, count and nearest lookup, one insert, one per merge.
        """
        keys = [(p.namespace, content_digest(p.content)) for p in items]
        await repo.lock_contents(conn, wallet, keys)
        stored_same = await repo.find_same_contents(conn, wallet, keys)
        stored_near: list[tuple[asyncpg.Record, float] | None] = [None] * len(items)
        if near_dedup:
            scan_max = DEDUP_SCAN_MAX_ROWS if len(items) == 1 else DEDUP_BATCH_SCAN_MAX_ROWS
            stored = await self.sizes.count_up_to(conn, MemoryFilter(wallet), scan_max)
            stored_near = await repo.nearest_each(
                conn, wallet, [p.namespace for p in items], vectors, exact=stored <= scan_max
            )
        plan = _BatchPlan(items, vectors, keys)
        for i in range(len(items)):
            plan.decide(i, stored_same.get(keys[i]), stored_near[i])
        fresh = [self.new_memory(wallet, items[i], vectors[i]) for i in plan.fresh]
        inserted = dict(
            zip(
                plan.fresh,
                await insert_settled(conn, wallet, fresh, self.passage_embedder),
                strict=True,
            )
        )
        latest: dict[UUID, asyncpg.Record] = {}  # each memory as this batch last left it
        outcomes = []
        for i, target in enumerate(plan.targets):
            if target is None:
                outcomes.append(StoreOutcome(inserted[i], deduplicated=False))
                continue
            existing = inserted[target] if isinstance(target, int) else target
            before = latest.get(existing["id"], existing)
            merged = await self._merge(conn, before, items[i])
            latest[merged["id"]] = merged
            outcomes.append(StoreOutcome(merged, deduplicated=True, before=before))
        return outcomes

    async def _merge(
        self, conn: asyncpg.Connection, existing: asyncpg.Record, p: MemoryFields
    ) -> asyncpg.Record:
        if existing["immutable"]:
            return existing  # an immutable memory is never changed, not even by a merge
        return await repo.merge_duplicate(
            conn,
            existing["user_id"],
            existing["id"],
            existing["importance"] if p.importance is None else p.importance,
            merged_metadata(existing["metadata"] or {}, p.metadata),
            p.pinned,
        )

    # ---- read ------------------------------------------------------------------------------

    async def get(self, conn: asyncpg.Connection, wallet: str, memory_id: str) -> asyncpg.Record:
        rows = await repo.get_many(conn, wallet, [parse_memory_id(memory_id)])
        if not rows:
            raise MemoryNotFound(memory_id)
        return rows[0]

    async def by_key(
        self, conn: asyncpg.Connection, wallet: str, namespace: str, key: str
    ) -> asyncpg.Record:
        """The live memory named `key` in the namespace (reading it by key counts no access)."""
        row = await repo.holding_key(conn, wallet, namespace, unicodedata.normalize("NFC", key))
        if row is None or (row["expires_at"] is not None and row["expires_at"] <= now_utc()):
            raise MemoryNotFound(f"with key {key!r} in namespace {namespace!r}")
        return row

    async def use(
        self, conn: asyncpg.Connection, wallet: str, memory_id: str
    ) -> tuple[asyncpg.Record, bool]:
        """A caller used the memory (read it by id, or said it helped): count the access, at
        most once per `access_counted_once_per` (scoring.py). Returns the memory and whether this
        use was counted."""
        row, counted = await repo.use_one(
            conn, wallet, parse_memory_id(memory_id), self.access_counted_once_per
        )
        if row is None:
            raise MemoryNotFound(memory_id)
        return row, counted

    async def list_page(
        self,
        conn: asyncpg.Connection,
        f: MemoryFilter,
        limit: int,
        offset: int,
        order: repo.ListOrder = repo.NEWEST_FIRST,
    ) -> tuple[list[asyncpg.Record], int]:
        return await repo.list_page(conn, f, limit, offset, order)

    async def count(self, conn: asyncpg.Connection, f: MemoryFilter) -> int:
        return await repo.count(conn, f)

    async def search(
        self,
        conn: asyncpg.Connection,
        f: MemoryFilter,
        query: str,
        limit: int,
        order: repo.ListOrder | None = None,
    ) -> tuple[list[asyncpg.Record], int]:
        if not query.strip():
            raise InvalidInput("query must not be blank", {"field": "query"})
        return await repo.keyword_search(conn, f, query, limit, order)

    async def namespaces(self, conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
        return await repo.namespaces(conn, wallet)

    async def namespace_names(self, conn: asyncpg.Connection, wallet: str) -> list[str]:
        return await repo.namespace_names(conn, wallet)

    async def stats(self, conn: asyncpg.Connection, wallet: str) -> dict[str, Any]:
        return await repo.stats(conn, wallet)

    # ---- update / delete -------------------------------------------------------------------

    async def update(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        memory_id: str,
        patch: UpdateIn,
        actor: Actor = OWNER,
    ) -> tuple[asyncpg.Record, int]:
        """`actor`: a grantee or an agent key sets no owner-only field (app/memory/actor.py)."""
        check_owner_only(actor, patch)
        before, after, tokens = await self._apply_update(conn, wallet, memory_id, patch)
        await history.record(conn, wallet, [history.updated(before, after)])
        return after, tokens

    async def _apply_update(
        self, conn: asyncpg.Connection, wallet: str, memory_id: str, patch: UpdateIn
    ) -> tuple[asyncpg.Record, asyncpg.Record, int]:
        """The memory before and after the update, and the tokens embedding its content took."""
        rows = await repo.get_many(conn, wallet, [parse_memory_id(memory_id)], for_update=True)
        if not rows:
            raise MemoryNotFound(memory_id)
        expected = patch.expected_version
        if expected is not None and expected != rows[0]["version"]:
            raise VersionConflict(rows[0]["id"], expected, rows[0]["version"])
        changes, new_content = self.changes_for(rows[0], patch, now_utc())
        if "namespace" in changes:
            await self._key_free(conn, wallet, rows[0], changes["namespace"])
        tokens = 0
        if new_content is not None:
            embedded = await self.embedder.embed([new_content])
            changes.update(self.content_columns(new_content, embedded.vectors[0]))
            tokens = embedded.tokens
        if not changes:
            return rows[0], rows[0], 0
        return (
            rows[0],
            await update_settled(conn, wallet, rows[0], changes, self.passage_embedder),
            tokens,
        )

    async def update_batch(
        self, conn: asyncpg.Connection, wallet: str, patches: list[tuple[str, UpdateIn]]
    ) -> tuple[list[UpdateOutcome], int]:
        """Apply each update in its own savepoint: one bad item is reported, not fatal."""
        results: list[UpdateOutcome] = []
        changes: list[history.Change | None] = []
        tokens = 0
        for memory_id, patch in patches:
            try:
                async with conn.transaction():
                    before, after, used = await self._apply_update(conn, wallet, memory_id, patch)
                tokens += used
                changes.append(history.updated(before, after))
                results.append(UpdateOutcome(memory_id))
            except (
                MemoryNotFound,
                MemoryImmutable,
                InvalidInput,
                VersionConflict,
                KeyTaken,
            ) as exc:
                results.append(UpdateOutcome(memory_id, exc))
        # the items that applied, in one statement (a failed item's savepoint left nothing)
        await history.record(conn, wallet, changes)
        return results, tokens

    def changes_for(
        self, current: asyncpg.Record, patch: UpdateIn, now: datetime
    ) -> tuple[dict[str, Any], str | None]:
        """The column changes a PATCH asks for, and the new content if it differs."""
        if current["immutable"]:
            raise MemoryImmutable(current["id"], "changed")
        changes: dict[str, Any] = {}
        new_content = None
        if patch.content is not None and patch.content != current["content"]:
            if not patch.content.strip():
                raise InvalidInput("content must not be blank", {"field": "content"})
            new_content = patch.content
        metadata = None
        if patch.metadata is not None:
            metadata = dict(patch.metadata)
        if patch.tags is not None:
            metadata = dict(metadata if metadata is not None else current["metadata"] or {})
            metadata["tags"] = check_tags(patch.tags)
        if metadata is not None:
            check_metadata(metadata)
            changes["metadata"] = metadata
        for column in (
            "importance",
            "memory_type",
            "namespace",
            "pinned",
            "session_id",
            "agent_id",
        ):
            value = getattr(patch, column)
            if value is not None:
                changes[column] = value
        if patch.immutable:
            changes["immutable"] = True
        if patch.expires_at is not msgspec.UNSET:
            changes["expires_at"] = parse_future_time(patch.expires_at, "expires_at", now)
        return changes, new_content

    def content_columns(self, content: str, vector: np.ndarray) -> dict[str, Any]:
        return {
            "content": content,
            "content_hash": content_digest(content),
            "embedding": vector,
            "embedding_model": self.embedder.model_name,
            "flags": guard.flags_of(content) or None,  # a new content is classified again
        }

    async def delete(self, conn: asyncpg.Connection, wallet: str, memory_id: str) -> UUID:
        row = await self.get(conn, wallet, memory_id)
        if row["immutable"]:
            raise MemoryImmutable(memory_id, "deleted")
        deleted_id: UUID = row["id"]
        await repo.soft_delete(conn, wallet, [deleted_id])
        await history.record(conn, wallet, history.deleted([deleted_id]))
        return deleted_id

    async def restore(
        self, conn: asyncpg.Connection, wallet: str, memory_id: str
    ) -> asyncpg.Record:
        """Undelete a soft-deleted memory of the wallet (Engram's addition to the contract)."""
        row = await repo.get_including_deleted(conn, wallet, parse_memory_id(memory_id))
        if row is None:
            raise MemoryNotFound(memory_id)
        if row["deleted_at"] is None:
            raise MemoryNotDeleted(memory_id)
        await self._key_free(conn, wallet, row, row["namespace"])
        restored = await repo.restore(conn, wallet, row["id"])
        await history.record(conn, wallet, [history.restored(row["id"])])
        return restored

    async def _key_free(
        self, conn: asyncpg.Connection, wallet: str, memory: asyncpg.Record, namespace: str
    ) -> None:
        """A keyed memory may go live in `namespace` (moved there, or restored) only if no other
        memory holds its key there; the key's lock keeps it so until commit."""
        key = memory["key"]
        if key is None:
            return
        await repo.lock_key(conn, wallet, namespace, key)
        holder = await repo.holding_key(conn, wallet, namespace, key)
        if holder is not None and holder["id"] != memory["id"]:
            raise KeyTaken(key, namespace)

    async def delete_many(
        self, conn: asyncpg.Connection, wallet: str, raw_ids: list[str]
    ) -> list[dict[str, Any]]:
        parsed: dict[str, UUID | None] = {}
        for raw in raw_ids:
            try:
                parsed[raw] = parse_memory_id(raw)
            except InvalidInput:
                parsed[raw] = None
        valid = [u for u in parsed.values() if u is not None]
        found = {r["id"]: r for r in await repo.get_many(conn, wallet, valid, for_update=True)}
        deleted_ids = await repo.soft_delete(conn, wallet, valid)
        await history.record(conn, wallet, history.deleted(deleted_ids))
        deleted = set(deleted_ids)
        results = []
        for raw, uid in parsed.items():
            if uid in deleted:
                results.append({"id": raw, "deleted": True})
            elif uid in found:
                results.append({"id": raw, "deleted": False, "error": "Memory is immutable"})
            else:
                results.append({"id": raw, "deleted": False, "error": "Memory not found"})
        return results

    # ---- recall ----------------------------------------------------------------------------

    async def recall(
        self, conn: asyncpg.Connection, wallet: str, req: RecallIn, actor: Actor = OWNER
    ) -> RecallResult:
        """`actor` kept to a namespace: the memories and their relation counts are from there
        alone (the second round follows relations and continuations within `req`'s filter)."""
        if not req.query.strip():
            raise InvalidInput("query must not be blank", {"field": "query"})
        f = recall_filter(wallet, req, actor.kept_to)
        with phase("recall", "embed"):
            embedded = await self.embedder.embed([req.query])
        vector = embedded.vectors[0]
        per_side = max(MIN_CANDIDATES_PER_SIDE, CANDIDATES_PER_RESULT * req.limit)
        keywords = keyword_text(req.query)
        with phase("recall", "sql"):
            rows = await self._exact_candidates(conn, f, vector, keywords, per_side)
            if rows is None:  # a big wallet, or a big share of one: the HNSW index's walk
                rows = await self._index_candidates(conn, f, vector, keywords, per_side)
        ranking = _Ranking(
            req, now_utc(), self.access_boost, self.event_time_boost,
            self.default_min_similarity, self.speaker_boost, self.keyword_agreement,
        )  # fmt: skip
        with phase("recall", "scoring"):
            ranked = ranking.first_round(rows)
        if self.second_round and ranked:
            seeds = ranked[:SECOND_ROUND_SEEDS]
            with phase("recall", "sql"):
                followers = await repo.second_round_candidates(
                    conn, f, [r.row["id"] for r in seeds], vector, keywords,
                    repo.lexicon_of(rows), CONTINUATION_FOLLOW, CONTINUATION_MAX_GAP,
                    self.keyword,
                )  # fmt: skip
            with phase("recall", "scoring"):
                ranked = ranking.second_round(ranked, seeds, followers)
        ranked, reranked = await self._reranked(req, ranked)
        ranked, held_back = held_back_from(ranked, req.limit, req.exclude_flagged)
        ranked = ranked[: req.limit]
        if self.recall_counts_access:
            with phase("recall", "sql"):
                await repo.record_access_each_time(conn, wallet, [r.row["id"] for r in ranked])
            ranked = [Recalled(r.row, r.signals, accesses_counted=1) for r in ranked]
        return RecallResult(ranked, embedded.tokens, reranked, held_back)

    async def _reranked(
        self, req: RecallIn, ranked: list[Recalled]
    ) -> tuple[list[Recalled], bool | None]:
        """The best candidates in the reranker's order (the rest after them, as they were), and
        whether that happened: None when not asked, False when asked but no reranker answered
        (recall keeps its own order)."""
        if not (req.rerank if req.rerank is not None else self.rerank.by_default):
            return ranked, None
        if self.rerank.model is None or not ranked:
            return ranked, self.rerank.model is not None
        head = ranked[: max(self.rerank.candidates, req.limit)]
        try:
            scores = await self.rerank.model.rerank(req.query, [r.row["content"] for r in head])
        except RerankUnavailable as exc:
            log.warning("recall without its rerank stage: %s", exc)
            return ranked, False
        order = sorted(range(len(head)), key=lambda i: scores[i], reverse=True)
        rescored = [
            Recalled(head[i].row, with_rerank(head[i].signals, scores[i]), head[i].accesses_counted)
            for i in order
        ]
        return rescored + ranked[len(head) :], True

    async def _exact_candidates(
        self,
        conn: asyncpg.Connection,
        f: MemoryFilter,
        vector: np.ndarray,
        keywords: str,
        per_side: int,
    ) -> list[asyncpg.Record] | None:
        """The exact scan's candidates when at most EXACT_SCAN_MAX_ROWS memories match `f`,
        else None. Unless the size memo knows `f` to be bigger, the scan itself finds out (it
        stops at the cap + 1st row), with no count before it."""
        known = self.sizes.recent_up_to(f, EXACT_SCAN_MAX_ROWS)
        if known is not None and known > EXACT_SCAN_MAX_ROWS:
            return None
        found = await repo.exact_candidates_within(
            conn, f, vector, keywords, per_side, EXACT_SCAN_MAX_ROWS, self.keyword, self.passages
        )
        self.sizes.learnt_up_to(
            f, EXACT_SCAN_MAX_ROWS, found.matching if found else EXACT_SCAN_MAX_ROWS + 1
        )
        return found.rows if found else None

    async def _index_candidates(
        self,
        conn: asyncpg.Connection,
        f: MemoryFilter,
        vector: np.ndarray,
        keywords: str,
        per_side: int,
    ) -> list[asyncpg.Record]:
        """The HNSW walk's candidates, with the IDF of a sample of the matching rows; an exact
        scan when filters starved the walk."""
        corpus = EXACT_SCAN_MAX_ROWS + 1
        await db.plan_for_the_parameters(conn)  # index scans want plans made for the size
        rows, vector_hits = await repo.recall_candidates(
            conn, f, vector, keywords, per_side, False, corpus, self.keyword, self.passages
        )
        if vector_hits < per_side:
            # Many rows match, yet the index scan came back short (filters starved it even with
            # iterative scanning): an exact scan returns the true top k.
            rows, _ = await repo.recall_candidates(
                conn, f, vector, keywords, per_side, True, corpus, self.keyword, self.passages
            )
        return rows


class _Ranking:
    """One recall's scoring: the 4-signal score of each candidate, the event-time boost, and
    the second round's carried scores (app/memory/scoring.py)."""

    def __init__(
        self,
        req: RecallIn,
        now: datetime,
        access_boost: bool,
        event_time_boost: bool,
        default_min_similarity: float,
        speaker_boost: bool = True,
        keyword_agreement: bool = True,
    ) -> None:
        self.keyword_agreement = keyword_agreement
        self.min_similarity = (
            req.min_similarity if req.min_similarity is not None else default_min_similarity
        )
        self.now = now
        self.access_boost = access_boost
        self.window = query_window(req.query, now) if event_time_boost else []
        # a "when" question is answered by a memory that says when its event happened
        self.wants_dated = event_time_boost and asks_when(req.query)
        # who the query names: a memory said by one of them is about them
        self.names = named_in(req.query) if speaker_boost else set()
        self.best_keyword = 0.0
        self.keyword_share = 1.0

    def _passes(self, row: asyncpg.Record) -> bool:
        return self.min_similarity <= 0 or float(row["vector_sim"]) >= self.min_similarity

    def _in_window(self, row: asyncpg.Record) -> bool:
        """The memory's event time meets the time the query names, or the query asks when and
        the memory says when."""
        if self.wants_dated and _says_when(row):
            return True
        if not self.window or row["occurred_at"] is None:
            return False
        said = row["mentioned_at"] or row["occurred_at"]
        return EventTime(row["occurred_at"], said).meets(self.window)

    def _score(self, row: asyncpg.Record) -> Signals:
        signals = _signals_of(
            row, self.now, self.best_keyword / self.keyword_share, self.access_boost
        )
        signals = with_event_time(signals, self._in_window(row))
        return with_speaker(signals, self._said_by_named(row))

    def _said_by_named(self, row: asyncpg.Record) -> bool:
        """The memory is a line said by someone the query names ("What books has John read?"
        and "[8 May, 2023] John: I'm reading Dune")."""
        if not self.names:
            return False
        said_by = speaker_of(row["content"])
        return said_by is not None and said_by in self.names

    def first_round(self, rows: list[asyncpg.Record]) -> list[Recalled]:
        # keyword_match is relative to the best among the first round's candidates
        self.best_keyword = max((float(r["keyword_match"]) for r in rows), default=0.0)
        self.keyword_share = keyword_share(rows) if self.keyword_agreement else 1.0
        scored = [Recalled(row, self._score(row)) for row in rows if self._passes(row)]
        return sorted(scored, key=lambda r: r.signals.score, reverse=True)

    def second_round(
        self, ranked: list[Recalled], seeds: list[Recalled], followers: list[asyncpg.Record]
    ) -> list[Recalled]:
        """Fuse what the seeds led to into one ranking: each memory scores the higher of its
        own score and the best score a seed carried to it."""
        by_id = {r.row["id"]: r for r in ranked}
        seed_score = {s.row["id"]: s.signals.score for s in seeds}
        for row in followers:
            if not self._passes(row):
                continue
            found = by_id.get(row["id"]) or Recalled(row, self._score(row))
            carried = carried_score(seed_score[row["seed_id"]], int(row["hops"]))
            by_id[row["id"]] = Recalled(found.row, with_carried(found.signals, carried))
        return sorted(by_id.values(), key=lambda r: r.signals.score, reverse=True)


def keyword_share(rows: Sequence[asyncpg.Record]) -> float:
    """The share of the KEYWORD_AGREEMENT_TOP candidates nearest the query (by vector) that
    hold any of its words: the keyword side's weight in this recall. A query whose words the
    memories nearest it lack (a question whose evidence shares no word with it) is one where
    the keyword side ranks other memories, so it counts less (issue 37)."""
    nearest = sorted(rows, key=lambda r: float(r["vector_sim"]), reverse=True)
    nearest = nearest[:KEYWORD_AGREEMENT_TOP]
    if not nearest:
        return 1.0
    held = sum(float(r["keyword_match"]) > 0 for r in nearest) / len(nearest)
    return max(held, 1e-9)  # it divides the best keyword match: none held, keyword_match ~0


def _says_when(row: asyncpg.Record) -> bool:
    """The memory dates its event itself: a relative date moved it from when it was said."""
    said = row["mentioned_at"]
    return said is not None and row["occurred_at"] is not None and said != row["occurred_at"]


def _signals_of(
    row: asyncpg.Record, now: datetime, best_keyword: float, access_boost: bool
) -> Signals:
    keyword = float(row["keyword_match"])
    return score_memory(
        vector_sim=float(row["vector_sim"]),
        # relative to the best keyword match among the candidates: 1.0 for the best
        keyword_match=keyword / best_keyword if best_keyword > 0 else 0.0,
        importance=float(row["importance"]),
        memory_type=row["memory_type"],
        pinned=row["pinned"],
        created_at=row["created_at"],
        accessed_at=row["accessed_at"],
        access_count=int(row["access_count"]),
        relation_count=int(row["relation_count"]),
        now=now,
        use_access_boost=access_boost,
    )


def _as_list(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def recall_filter(wallet: str, req: RecallIn, kept_to: str | None = None) -> MemoryFilter:
    filters = req.filters
    now = now_utc()
    after = (filters.after if filters else None) or req.after or req.since
    before = (filters.before if filters else None) or req.before or req.until
    return MemoryFilter(
        wallet=wallet,
        namespace=req.namespace if kept_to is None else kept_to,
        session_id=req.session_id,
        agent_id=req.agent_id,
        memory_types=_as_list((filters.memory_type if filters else None) or req.memory_type),
        tags=split_tags((filters.tags if filters else None) or req.tags),
        after=parse_moment(after, "filters.after", now),
        before=parse_moment(before, "filters.before", now),
        pinned=filters.pinned if filters else None,
        metadata=parse_metadata_filter(filters.metadata if filters else None, "filters.metadata"),
        occurred_after=parse_time(filters.occurred_after if filters else None,
                                  "filters.occurred_after"),
        occurred_before=parse_time(filters.occurred_before if filters else None,
                                   "filters.occurred_before"),
        kept_to=kept_to,
        sources=list(req.sources) if req.sources else None,
        quarantined=False,  # a memory under review is recalled by no one (app/guard/service.py)
    )  # fmt: skip


def list_filter(
    wallet: str,
    *,
    namespace: str | None = None,
    session_id: str | None = None,
    agent_id: str | None = None,
    memory_type: str | None = None,
    tags: list[str] | None = None,
    after: str | None = None,
    before: str | None = None,
    pinned: bool | None = None,
    immutable: bool | None = None,
    include_deleted: bool = False,
    metadata: str | dict[str, Any] | None = None,
) -> MemoryFilter:
    """The filter of list, count, search and export from their query strings (validated).
    `after`/`before` may be relative (`7d`); `metadata` is a JSON object, or its text."""
    now = now_utc()
    return MemoryFilter(
        wallet=wallet,
        namespace=nfc_names(namespace),
        session_id=session_id,
        agent_id=agent_id,
        memory_types=[memory_type] if memory_type else None,
        tags=nfc_names(split_tags(",".join(tags))) if tags else None,
        after=parse_moment(after, "after", now),
        before=parse_moment(before, "before", now),
        pinned=pinned,
        immutable=immutable,
        include_deleted=include_deleted,
        metadata=parse_metadata_filter(metadata, "metadata"),
    )
