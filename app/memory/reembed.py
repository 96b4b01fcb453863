"""Re-embedding: every memory whose vector comes from another model than the configured
embedder's, embedded again, so that a database can switch models without mixing vectors that
cannot be compared (app/db/schema.py `check_embedding_model` refuses to serve until then); and
every memory longer than the model's window that has no passages yet (stored before migration
0021) gets them."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from app.ai.embedders import Embedder
from app.db import settings_repository as db
from app.memory.repository import reembed as repo
from app.memory.repository import writes
from app.memory.settled import store_passages

# Wallets looked up per round (each is then re-embedded in full).
WALLETS_PER_ROUND = 100
# A text of at most this many characters holds fewer tokens than MiniLM's window (256, less
# its two special tokens): only longer memories can have passages.
PASSAGE_MIN_CHARS = 254


async def reembed_all(
    conn: asyncpg.Connection,
    embedder: Embedder,
    batch: int,
    progress: Callable[[str], object] = lambda _: None,
    passages: bool = False,
) -> int:
    """Re-embed wallet by wallet, in batches of `batch`, each batch its own transaction: an
    interrupted run keeps what it did and the next one starts from what is left. Each batch
    names its wallet, so on a distributed database (Citus) it runs on that wallet's shard.
    Returns how many it re-embedded."""
    model = embedder.model_name
    done = 0
    while True:
        wallets = await repo.wallets_embedded_otherwise(conn, model, WALLETS_PER_ROUND)
        if not wallets:
            await db.record_embedding_model(conn, model)
            if not passages:
                return done
            return done + await _passages_all(conn, embedder, batch, progress)
        for wallet in wallets:
            done = await _reembed_wallet(conn, embedder, wallet, batch, done, progress, passages)


async def _passages_all(
    conn: asyncpg.Connection,
    embedder: Embedder,
    batch: int,
    progress: Callable[[str], object],
) -> int:
    """Passages for every memory past the model's window that has none, wallet by wallet, in
    batches of `batch` (each its own transaction). Returns how many memories it looked at."""
    done, last = 0, ""
    while wallets := await repo.wallets_after(conn, last, WALLETS_PER_ROUND):
        for wallet in wallets:
            after = None
            while True:
                async with conn.transaction():
                    rows = await repo.long_memories_after(
                        conn, wallet, after, PASSAGE_MIN_CHARS, batch
                    )
                    if not rows:
                        break
                    await store_passages(conn, embedder, wallet, rows, replace=False)
                after = rows[-1]["id"]
                done += len(rows)
                progress(f"looked for passages in {done} long memories")
        last = wallets[-1]
    return done


async def _reembed_wallet(
    conn: asyncpg.Connection,
    embedder: Embedder,
    wallet: str,
    batch: int,
    done: int,
    progress: Callable[[str], object],
    passages: bool,
) -> int:
    model = embedder.model_name
    while True:
        async with conn.transaction():
            rows = await repo.embedded_otherwise(conn, wallet, model, batch)
            if not rows:
                return done
            result = await embedder.embed([r["content"] for r in rows])
            await repo.set_embeddings(conn, wallet, rows, result.vectors, model)
            if passages:
                await store_passages(conn, embedder, wallet, rows, replace=True)
            else:  # another model's windows: not comparable, gone
                await writes.insert_passages(
                    conn, wallet, [r["id"] for r in rows], [[]] * len(rows)
                )
        done += len(rows)
        progress(f"re-embedded {done} memories with {model}")
