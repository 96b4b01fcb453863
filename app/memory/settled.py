"""A memory's row as every write makes it, new (`new_memory`) or with a new content
(`content_columns`), written once its provenance is settled (the request's, app/core/provenance.py)
and the namespace guard screened it (app/guard/service.py): `insert_settled`, `update_settled`,
with a long memory's passages (`store_passages`)."""

from __future__ import annotations

import hashlib
from typing import Any

import asyncpg
import numpy as np

from app.ai.embedders import Embedder, tails_of
from app.core.provenance import WRITING
from app.guard import service as guard
from app.memory.fields import KeptState, MemoryFields, NewMemory
from app.memory.repository import writes as repo
from app.memory.schemas import DEFAULT_IMPORTANCE


def content_digest(content: str) -> bytes:
    return hashlib.sha256(content.encode()).digest()


def new_memory(
    wallet: str,
    fields: MemoryFields,
    vector: np.ndarray,
    embedding_model: str,
    kept: KeptState | None = None,
) -> NewMemory:
    """A memory ready for repository.insert_many; `kept` for what an import carries over."""
    return NewMemory(
        wallet=wallet,
        fields=fields,
        importance=DEFAULT_IMPORTANCE if fields.importance is None else fields.importance,
        content_hash=content_digest(fields.content),
        embedding=vector,
        embedding_model=embedding_model,
        kept=kept,
    )


def content_columns(content: str, vector: np.ndarray, embedding_model: str) -> dict[str, Any]:
    return {
        "content": content,
        "content_hash": content_digest(content),
        "embedding": vector,
        "embedding_model": embedding_model,
        "flags": guard.flags_of(content) or None,  # a new content is classified again
    }


def _provenance(wallet: str, new: NewMemory) -> None:
    """A new memory's source, writer and surface: what it carries (an import), else the
    request's. A grantee's content is `api` whatever it says (app/core/provenance.py)."""
    writing, fields = WRITING.get(), new.fields
    new.written_by = fields.written_by or writing.written_by or wallet
    new.writer = fields.writer or writing.writer
    new.surface = fields.surface or writing.surface
    new.source = "api" if writing.writer == "grantee" else fields.source or "api"


async def settle(conn: asyncpg.Connection, wallet: str, new: list[NewMemory]) -> None:
    """Provenance and flags of memories about to be inserted: their provenance, then the
    namespace guards' verdicts (flags kept or dropped, quarantined, or the request refused)."""
    for n in new:
        _provenance(wallet, n)
    verdicts = await guard.screen(
        conn, wallet, [(n.fields.namespace, n.fields.content) for n in new]
    )
    for n, verdict in zip(new, verdicts, strict=True):
        n.flags = verdict.flags
        if verdict.quarantined:
            n.quarantined = True


async def insert_settled(
    conn: asyncpg.Connection, wallet: str, new: list[NewMemory], embedder: Embedder | None = None
) -> list[asyncpg.Record]:
    """Insert new memories once the namespace guards settled their provenance and flags (or
    refused them: app/guard/service.py); with `embedder`, a long one's passages too."""
    await settle(conn, wallet, new)
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
    await guard.screen_change(conn, wallet, current["namespace"], changes)
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
