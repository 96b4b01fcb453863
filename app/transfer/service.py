"""Export and import of a wallet's memories.

Export streams: rows come from a server-side cursor in batches and are written into the document
as they arrive, so a 100k-memory wallet never sits in memory. The request's own transaction ends
when the handler returns, before the body is sent, so the stream reads on a connection of its
own, in a read-only REPEATABLE READ transaction (one snapshot for the whole document).

Import keeps every user field of each memory (timestamps and access counts included), gives it a
new id in the caller's wallet, embeds it again, and skips what the caller already holds: the same
content in the same namespace, in the same state (live, or soft-deleted), also within the import.
Every item is validated first, as a store would; one bad item refuses the whole import.

Every import, whatever its size, runs in the import lane (`ImportLane`), so imports together
never take more than a bounded share of the embedder's thread, the CPU and the database, however
many wallets import (issue 11: one 5,000-item import took other wallets' store p50 from 17 ms to
2.9 s; issue 23: 8 wallets looping 60-item imports, which ran outside the lane, took it from 20
to 363 ms). An import takes one of `IMPORT_CONCURRENCY` turns per process; while none is free it
waits in a short queue (at most `IMPORT_QUEUE` imports, each at most `IMPORT_WAIT_SECONDS`), and
past that it is told 429 with Retry-After. The turn is taken before the request's transaction
opens (app/transfer/controller.py), so a waiting import holds no database connection, only its
parsed body (so at most `IMPORT_QUEUE` bodies wait); a short queue rather than an outright 429
lets a few wallets importing at once, or one client importing in parallel, through without retry
loops. During its turn an import validates, embeds and writes in small steps and rests after
each, and once more after its commit, so it works at most `IMPORT_DUTY` of the time. A client's
next import never waits for its previous one: the turn ends before the answer is sent. The route
has its own per-wallet rate limit besides (app/transfer/controller.py).
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
from app.core.errors import InvalidInput, RateLimitExceeded
from app.core.schemas import parse_time
from app.memory.dates import now_utc
from app.memory.fields import KeptState, MemoryFields
from app.memory.filters import MemoryFilter
from app.memory.service import MemoryService
from app.memory.settled import content_digest
from app.memory.store import prepare_store
from app.transfer import repository as repo
from app.transfer.schemas import DOCUMENTS, MAX_IMPORT_ITEMS, ImportIn, ImportItem

# Rows fetched from the export cursor at a time, and rows embedded and inserted per statement on
# import: large enough to amortise round trips, small enough to keep memory flat (and, on
# import, to keep each write short: bench/import_lane.py measured 50 against 100 and 500).
EXPORT_BATCH_ROWS = 500
IMPORT_CHUNK_ROWS = 50
# The import lane: imports at a time per process; imports that may wait for a turn, and for how
# long (a 10,000-item import takes minutes: a wait is cut short well before clients time out,
# MemoClaw's SDK after 30 s); the share of time an import works (it rests the remainder after
# each step); items validated per step (~55 us each: 200 leave the event loop within ~10 ms,
# where 100,000 at once held it for 5 s).
IMPORT_CONCURRENCY = 1
IMPORT_QUEUE = 8
IMPORT_WAIT_SECONDS = 10.0
IMPORT_DUTY = 0.3
IMPORT_VALIDATE_STEP = 200
# Texts per embedding step. Locally, one step is what an interactive call can find ahead of it on
# the embedder's one thread: one text, one int8 run (~5 ms under load). With 8 wallets looping
# 60-item imports (bench/import_lane.py --importers 8), steps of 8 (~30 ms) took another wallet's
# store p95 to 2.9x idle, steps of 2 to 1.5-1.9x, steps of 1 to 1.3-1.5x. The price is import
# throughput beside interactive calls: a step also waits behind their embeddings, and rests for
# that too (a 10,000-item import beside 2 storing clients: 271 s, against 199 s in steps of 8).
# A remote embedder has no thread to share: its steps stay at 8 texts a request.
IMPORT_EMBED_STEP = 1
IMPORT_REMOTE_EMBED_STEP = 8
IMPORT_BUSY_RETRY_AFTER_SECONDS = 10


def lane_busy(why: str) -> RateLimitExceeded:
    return RateLimitExceeded(
        f"{why}; retry in {IMPORT_BUSY_RETRY_AFTER_SECONDS} s",
        {"reason": "import_in_progress"},
        {"Retry-After": str(IMPORT_BUSY_RETRY_AFTER_SECONDS)},
    )


class Pacer:
    """Keeps one flow of an import's work to `duty` of its time: each rest lasts (1 - duty) / duty
    as long as the work since the last one. Waiting (for a connection, for another flow's result)
    is not work: `resume()` starts counting again from now."""

    def __init__(self, duty: float) -> None:
        self.duty = duty
        self._rest_per_work = (1 - duty) / duty
        self._since = time.monotonic()

    def resume(self) -> None:
        self._since = time.monotonic()

    async def rest(self) -> None:
        await asyncio.sleep((time.monotonic() - self._since) * self._rest_per_work)
        self.resume()

    def beside(self) -> Pacer:
        """A pacer of its own for work that runs beside this flow's (the next chunk's embedding
        while this chunk is written): each flow keeps to the duty cycle on its own resource."""
        return Pacer(self.duty)


class ImportLane:
    """Imports' own bounded lane (module docstring): `concurrency` turns, a queue of `queue`
    imports waiting at most `wait_seconds` each for one, and every turn paced to `duty`."""

    def __init__(
        self,
        concurrency: int = IMPORT_CONCURRENCY,
        duty: float = IMPORT_DUTY,
        queue: int = IMPORT_QUEUE,
        wait_seconds: float = IMPORT_WAIT_SECONDS,
    ) -> None:
        if not 0 < duty <= 1:
            raise ValueError("an import's duty cycle is in (0, 1]")
        if concurrency < 1 or queue < 0 or wait_seconds < 0:
            raise ValueError("an import lane has a turn at least, and no negative queue or wait")
        self._turns = asyncio.Semaphore(concurrency)  # FIFO: the longest waiting goes next
        self.duty = duty
        self.queue = queue
        self.wait_seconds = wait_seconds
        self.waiting = 0

    @property
    def busy(self) -> bool:
        """No turn is free now (or others already wait for one)."""
        return self._turns.locked()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[Pacer]:
        """A turn, waited for in the queue (429 when the queue is full or the wait runs out). The
        turn's pacer rests once more when the turn ends well (for the work since its last rest:
        the commit), before the next import's turn begins; a failed import ends its turn at once."""
        if self.busy:
            if self.waiting >= self.queue:
                raise lane_busy("Imports are queued on this server to their limit")
            self.waiting += 1
            try:
                async with asyncio.timeout(self.wait_seconds):
                    await self._turns.acquire()
            except TimeoutError:
                raise lane_busy(
                    f"No import turn came free on this server within {self.wait_seconds:g} s"
                ) from None
            finally:
                self.waiting -= 1
        else:
            await self._turns.acquire()  # free: returns at once
        try:
            pacer = Pacer(self.duty)
            yield pacer
            await pacer.rest()
        finally:
            self._turns.release()


@dataclass
class ImportTurn:
    """What an import runs with: its turn's pacer and, opened after the turn began, the request's
    transaction."""

    conn: asyncpg.Connection
    pacer: Pacer


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
        fields.source = item.source or "import"
        fields.written_by, fields.writer, fields.surface = (
            item.written_by,
            item.writer,
            item.surface,
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
        remote_embedder: bool = False,
    ) -> None:
        self.memories = memories
        self.export_batch_rows = export_batch_rows
        self.import_chunk_rows = import_chunk_rows
        self.embed_step = IMPORT_REMOTE_EMBED_STEP if remote_embedder else IMPORT_EMBED_STEP
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
        self, turn: ImportTurn, wallet: str, items: list[ImportItem]
    ) -> ImportReport:
        """The import, in its turn in the lane: every step of work is followed by a rest."""
        # Both body forms (a bare list, an export envelope) have the cap; Litestar drops the
        # schema's max_length when the body type is a union, so it is checked here again.
        if len(items) > MAX_IMPORT_ITEMS:
            raise InvalidInput(
                f"An import holds at most {MAX_IMPORT_ITEMS} memories ({len(items)} sent)",
                {"field": "memories", "max_items": MAX_IMPORT_ITEMS},
            )
        conn, pacer = turn.conn, turn.pacer
        now = now_utc()
        prepared: list[PreparedImport | None] = []
        for start in range(0, len(items), IMPORT_VALIDATE_STEP):
            step = items[start : start + IMPORT_VALIDATE_STEP]
            prepared.extend(prepare_import(item, now, start + i) for i, item in enumerate(step))
            await pacer.rest()
        await repo.lock_imports(conn, wallet)
        pacer.resume()  # waiting for the wallet's lock (its import on another server) is not work
        held = await repo.held_contents(
            conn, wallet, {(p.fields.namespace, p.content_hash) for p in prepared if p is not None}
        )
        new: list[PreparedImport] = []
        keyed: list[tuple[PreparedImport, ImportItem]] = []  # live and keyed: upserts
        for item, p in zip(items, prepared, strict=True):
            if p is None:
                continue
            key = (p.fields.namespace, p.content_hash, p.kept.deleted_at is None)
            if key not in held:
                held.add(key)  # a later copy within this import is skipped too
                if p.fields.key is not None and p.kept.deleted_at is None:
                    keyed.append((p, item))
                else:
                    new.append(p)
        await pacer.rest()
        await self._embed_and_insert(conn, wallet, new, pacer)
        for p, item in keyed:  # a key the wallet holds: a new version of that memory
            await self.memories.upsert_by_key(conn, wallet, p.fields, item, "import")
            await pacer.rest()
        imported = len(new) + len(keyed)
        return ImportReport(imported=imported, skipped=len(items) - imported)

    async def _embed_and_insert(
        self, conn: asyncpg.Connection, wallet: str, memories: list[PreparedImport], pacer: Pacer
    ) -> None:
        """Chunk by chunk, embedding the next chunk (on the embedder's thread, or remotely)
        while the database writes this one; each flow rests after each of its steps."""
        embedder = self.memories.embedder
        chunks = [
            memories[start : start + self.import_chunk_rows]
            for start in range(0, len(memories), self.import_chunk_rows)
        ]
        if not chunks:
            return

        async def embed_in_steps(texts: list[str]) -> EmbedResult:
            steps = pacer.beside()
            vectors: list[np.ndarray] = []
            tokens = 0
            for start in range(0, len(texts), self.embed_step):
                step = await embedder.embed(texts[start : start + self.embed_step])
                vectors.extend(step.vectors)
                tokens += step.tokens
                await steps.rest()
            return EmbedResult(vectors=vectors, tokens=tokens)

        def embed(chunk: list[PreparedImport]) -> asyncio.Task[EmbedResult]:
            return asyncio.create_task(embed_in_steps([p.fields.content for p in chunk]))

        pending = embed(chunks[0])
        try:
            for i, chunk in enumerate(chunks):
                embedded = await pending
                pacer.resume()  # waiting for the embedding was not this flow's work
                if i + 1 < len(chunks):
                    pending = embed(chunks[i + 1])
                new = [
                    self.memories.new_memory(wallet, p.fields, vector, p.kept)
                    for p, vector in zip(chunk, embedded.vectors, strict=True)
                ]
                await self.memories.insert(conn, wallet, new, "import")  # recorded in history
                await pacer.rest()  # the writes take CPU too
        finally:
            if not pending.done():
                pending.cancel()  # a write failed: the next chunk's embedding is not needed
            elif not pending.cancelled():
                pending.exception()  # seen, so asyncio does not log it as never retrieved
