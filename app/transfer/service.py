"""Export and import of a wallet's memories.

Export streams: rows come from a server-side cursor in batches and are written into the document
as they arrive, so a 100k-memory wallet never sits in memory. The request's own transaction ends
when the handler returns, before the body is sent, so the stream reads on a connection of its
own, in a read-only REPEATABLE READ transaction (one snapshot for the whole document).

Import keeps every user field of each memory (timestamps and access counts included), gives it a
new id in the caller's wallet, embeds it again, and skips what the caller already holds: the same
content in the same namespace, in the same state (live, or soft-deleted), also within the import.
Every item is validated first, as a store would; one bad item refuses the whole import.

Imports run in a lane of their own (`ImportLane`), so a big one never starves interactive calls
(issue 11: a 5,000-item import took other wallets' store p50 from 17 ms to 2.9 s). Up to a batch
(100 items) an import runs like a batch store. A bigger one takes one of `IMPORT_CONCURRENCY`
slots per process (when none is free: 429 with Retry-After, rather than holding a database
connection while it waits), embeds and writes in small steps and rests between them, so it
works at most `IMPORT_DUTY` of the time on the embedder's thread and the CPU. The route has its
own per-wallet rate limit besides (app/transfer/controller.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import msgspec
import numpy as np

from app.ai.embedders import EmbedResult
from app.history import service as history
from app.kit.errors import InvalidInput, RateLimitExceeded
from app.kit.schemas import parse_time
from app.memory import repository as memory_repo
from app.memory.repository import KeptState, MemoryFields, MemoryFilter
from app.memory.schemas import MAX_BATCH
from app.memory.service import MemoryService, content_digest, now_utc, prepare_store
from app.transfer import repository as repo
from app.transfer.schemas import DOCUMENTS, MAX_IMPORT_ITEMS, ImportIn, ImportItem

# Rows fetched from the export cursor at a time, and rows embedded and inserted per statement on
# import: large enough to amortise round trips, small enough to keep memory flat (and, on
# import, to keep each write short: bench/import_lane.py measured 50 against 100 and 500).
EXPORT_BATCH_ROWS = 500
IMPORT_CHUNK_ROWS = 50
# Imports up to this many items run like a batch store (the contract's batch size), outside the
# lane: only bigger ones can starve anyone.
LANE_MIN_ITEMS = MAX_BATCH + 1
# The import lane: imports at a time per process, texts per embedding step (one step is what an
# interactive call can find ahead of it on the embedder's thread: 8 short texts, ~10-20 ms),
# and the share of time an import works (it rests the remainder after each step).
IMPORT_CONCURRENCY = 1
IMPORT_EMBED_STEP = 8
IMPORT_DUTY = 0.3
IMPORT_BUSY_RETRY_AFTER_SECONDS = 10


class ImportLane:
    """Imports' own bounded lane: a few at a time, each paced to a duty cycle."""

    def __init__(self, concurrency: int = IMPORT_CONCURRENCY, duty: float = IMPORT_DUTY) -> None:
        if not 0 < duty <= 1:
            raise ValueError("an import's duty cycle is in (0, 1]")
        self._slots = asyncio.Semaphore(concurrency)
        self.duty = duty

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._slots.locked():
            raise RateLimitExceeded(
                "Another import is running on this server; retry shortly",
                {"reason": "import_in_progress"},
                {"Retry-After": str(IMPORT_BUSY_RETRY_AFTER_SECONDS)},
            )
        async with self._slots:
            yield

    async def pace(self, worked_seconds: float) -> None:
        """Rest after `worked_seconds` of work so that work is `duty` of the time."""
        await asyncio.sleep(worked_seconds * (1 - self.duty) / self.duty)


@dataclass
class ImportReport:
    imported: int
    skipped: int


@dataclass
class PreparedImport:
    """One item as an import writes it: a store's fields plus what it keeps from the source."""

    fields: MemoryFields
    content_hash: bytes
    kept: KeptState


def prepare_import(item: ImportItem, now: datetime, index: int) -> PreparedImport | None:
    """An item checked like a store (plus its timestamps), or None when it has expired."""
    field = f"memories[{index}]."
    try:
        expires_at = parse_time(item.expires_at, f"{field}expires_at")
        created_at = parse_time(item.created_at, f"{field}created_at") or now
        updated_at = parse_time(item.updated_at, f"{field}updated_at") or created_at
        accessed_at = parse_time(item.accessed_at, f"{field}accessed_at") or created_at
        deleted_at = parse_time(item.deleted_at, f"{field}deleted_at")
        expired = expires_at is not None and expires_at <= now
        fields = prepare_store(
            msgspec.structs.replace(
                item,
                # an export lists metadata.tags again as `tags`; an empty list adds nothing
                tags=item.tags or None,
                expires_at=None if expired else item.expires_at,
            ),
            now,
            field,
        )
        if item.mentioned_at is not None:  # an export's event time, kept as resolved then
            fields.mentioned_at = parse_time(item.mentioned_at, f"{field}mentioned_at")
            fields.occurred_at = parse_time(item.occurred_at, f"{field}occurred_at")
    except InvalidInput as exc:
        exc.details["index"] = index
        raise
    if expired:
        return None
    kept = KeptState(created_at, updated_at, accessed_at, item.access_count or 0, deleted_at)
    return PreparedImport(fields, content_digest(fields.content), kept)


class TransferService:
    def __init__(
        self,
        memories: MemoryService,
        export_batch_rows: int = EXPORT_BATCH_ROWS,
        import_chunk_rows: int = IMPORT_CHUNK_ROWS,
        lane: ImportLane | None = None,
    ) -> None:
        self.memories = memories
        self.export_batch_rows = export_batch_rows
        self.import_chunk_rows = import_chunk_rows
        self.lane = lane or ImportLane()

    # ---- export ----------------------------------------------------------------------------

    async def export(
        self, pool: asyncpg.Pool, f: MemoryFilter, export_format: str
    ) -> AsyncIterator[bytes]:
        """The export document in pieces: the envelope's head, one piece per cursor batch, and
        the tail with the count. A connection is held only while the body is being read."""
        document = DOCUMENTS[export_format]()
        yield document.start()
        count = 0
        async with (
            pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            async for rows in repo.export_batches(conn, f, self.export_batch_rows):
                count += len(rows)
                yield document.rows(rows)
        yield document.end(count)

    # ---- import ----------------------------------------------------------------------------

    def check_envelope(self, envelope: ImportIn) -> list[ImportItem]:
        if envelope.format not in (None, "json", "jsonl"):
            raise InvalidInput(
                f"Only json exports can be imported (this one is {envelope.format!r}); export"
                " with format=json",
                {"field": "format"},
            )
        return envelope.memories

    async def import_memories(
        self, conn: asyncpg.Connection, wallet: str, items: list[ImportItem]
    ) -> ImportReport:
        # Both body forms (a bare list, an export envelope) have the cap; Litestar drops the
        # schema's max_length when the body type is a union, so it is checked here again.
        if len(items) > MAX_IMPORT_ITEMS:
            raise InvalidInput(
                f"An import holds at most {MAX_IMPORT_ITEMS} memories ({len(items)} sent)",
                {"field": "memories", "max_items": MAX_IMPORT_ITEMS},
            )
        if len(items) < LANE_MIN_ITEMS:
            return await self._import(conn, wallet, items, paced=False)
        async with self.lane.slot():
            return await self._import(conn, wallet, items, paced=True)

    async def _import(
        self, conn: asyncpg.Connection, wallet: str, items: list[ImportItem], paced: bool
    ) -> ImportReport:
        now = now_utc()
        prepared = [prepare_import(item, now, i) for i, item in enumerate(items)]
        await repo.lock_imports(conn, wallet)
        held = await repo.held_contents(
            conn, wallet, {(p.fields.namespace, p.content_hash) for p in prepared if p is not None}
        )
        new: list[PreparedImport] = []
        for p in prepared:
            if p is None:
                continue
            key = (p.fields.namespace, p.content_hash, p.kept.deleted_at is None)
            if key not in held:
                held.add(key)  # a later copy within this import is skipped too
                new.append(p)
        await self._embed_and_insert(conn, wallet, new, paced)
        return ImportReport(imported=len(new), skipped=len(items) - len(new))

    async def _embed_and_insert(
        self, conn: asyncpg.Connection, wallet: str, memories: list[PreparedImport], paced: bool
    ) -> None:
        """Chunk by chunk, embedding the next chunk (on the embedder's thread, or remotely)
        while the database writes this one."""
        embedder = self.memories.embedder

        async def rest(began: float) -> None:
            if paced:
                await self.lane.pace(time.monotonic() - began)

        chunks = [
            memories[start : start + self.import_chunk_rows]
            for start in range(0, len(memories), self.import_chunk_rows)
        ]
        if not chunks:
            return

        async def embed_in_steps(texts: list[str]) -> EmbedResult:
            vectors: list[np.ndarray] = []
            tokens = 0
            for start in range(0, len(texts), IMPORT_EMBED_STEP):
                began = time.monotonic()
                step = await embedder.embed(texts[start : start + IMPORT_EMBED_STEP])
                vectors.extend(step.vectors)
                tokens += step.tokens
                await rest(began)
            return EmbedResult(vectors=vectors, tokens=tokens)

        def embed(chunk: list[PreparedImport]) -> asyncio.Task[EmbedResult]:
            return asyncio.create_task(embed_in_steps([p.fields.content for p in chunk]))

        pending = embed(chunks[0])
        try:
            for i, chunk in enumerate(chunks):
                embedded = await pending
                if i + 1 < len(chunks):
                    pending = embed(chunks[i + 1])
                began = time.monotonic()
                rows = await memory_repo.insert_many(
                    conn,
                    [
                        self.memories.new_memory(wallet, p.fields, vector, p.kept)
                        for p, vector in zip(chunk, embedded.vectors, strict=True)
                    ],
                )
                await history.record(conn, wallet, [history.created(r, "import") for r in rows])
                await rest(began)  # the writes take CPU too
        finally:
            if not pending.done():
                pending.cancel()  # a write failed: the next chunk's embedding is not needed
            elif not pending.cancelled():
                pending.exception()  # seen, so asyncio does not log it as never retrieved
