"""A switch of embedding model is never silent: a database whose vectors come from another
model is refused at start with the way out, `engram reembed` re-embeds every memory (resuming
where an interrupted run stopped), and the database then serves and recalls with the new model."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import numpy as np
import pytest
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.ai.embedders import LocalMiniLMEmbedder
from app.config import LOCAL_EMBED_DIMS
from app.db.schema import check_embedding_model, upgrade_to_head
from app.memory.reembed import reembed_all
from tests.support.api import auth, store_memory
from tests.support.db import create_database

PROJECT = Path(__file__).resolve().parents[2]
MODEL = "all-MiniLM-L6-v2"  # the local embedder the test app runs
CONTENTS = ["the boiler is serviced every October", "Ann's sister moved to Lisbon in April",
            "invoices are due in thirty days"]  # fmt: skip


async def fresh_database(database_url: str) -> str:
    url = await create_database(database_url, f"engram_reembed_{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(upgrade_to_head, url, LOCAL_EMBED_DIMS, MODEL)
    return url


async def as_if_from(url: str, model: str) -> None:
    """The database's vectors as another model left them: other vectors, another name."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "UPDATE memories SET embedding_model = $1,"
            " embedding = ('[' || array_to_string(array_fill(0.05, ARRAY[$2::int]), ',') || ']')::vector",
            model, LOCAL_EMBED_DIMS,
        )  # fmt: skip
        await conn.execute(
            """INSERT INTO engram_settings (key, value) VALUES ('embedding_model', $1)
               ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
            model,
        )
    finally:
        await conn.close()


async def models_of(url: str) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        return {
            r["embedding_model"] for r in await conn.fetch("SELECT embedding_model FROM memories")
        }
    finally:
        await conn.close()


async def stored(make_app, url: str, wallet) -> list[str]:
    async with AsyncTestClient(app=make_app(database={"url": url})) as client:
        return [(await store_memory(client, wallet, c))["memory"]["id"] for c in CONTENTS]


async def test_vectors_of_another_model_are_refused_then_reembedded(
    make_app, database_url, wallet
) -> None:
    url = await fresh_database(database_url)
    ids = await stored(make_app, url, wallet)
    await as_if_from(url, "old-model-v1")
    with pytest.raises(BaseException) as refused:  # the lifespan's error, in a task group
        async with AsyncTestClient(app=make_app(database={"url": url})):
            pass
    assert "SchemaError" in repr(refused.value) and "Run `engram reembed`" in repr(refused.value)

    embedder = LocalMiniLMEmbedder()
    conn = await asyncpg.connect(url)
    await register_vector(conn)
    try:
        lines: list[str] = []
        assert await reembed_all(conn, embedder, batch=2, progress=lines.append) == 3
        assert lines == [
            f"re-embedded 2 memories with {MODEL}",
            f"re-embedded 3 memories with {MODEL}",
        ]
        await check_embedding_model(conn, MODEL)  # passes now
        expected = (await embedder.embed(CONTENTS)).vectors
        for content, vector in zip(CONTENTS, expected, strict=True):
            got = await conn.fetchval("SELECT embedding FROM memories WHERE content = $1", content)
            assert np.allclose(got.to_numpy(), vector, atol=1e-6)
        assert await reembed_all(conn, embedder, batch=2) == 0  # nothing left: a no-op
    finally:
        await conn.close()
    assert await models_of(url) == {MODEL}
    async with AsyncTestClient(app=make_app(database={"url": url})) as client:
        r = await client.post("/v1/recall", json={"query": "where does Ann's sister live"},
                              headers=auth(wallet))  # fmt: skip
        assert r.json()["memories"][0]["id"] == ids[1]


async def test_a_database_with_no_vector_of_another_model_records_the_configured_one(
    database_url,
) -> None:
    url = await fresh_database(database_url)
    await as_if_from(url, "old-model-v1")  # no memory: nothing to re-embed
    conn = await asyncpg.connect(url)
    try:
        await check_embedding_model(conn, MODEL)
        assert (
            await conn.fetchval("SELECT value FROM engram_settings WHERE key = 'embedding_model'")
            == MODEL
        )
    finally:
        await conn.close()


async def test_the_reembed_command(make_app, database_url, wallet) -> None:
    """`engram reembed` as an operator runs it, against a database left by another model."""
    url = await fresh_database(database_url)
    await stored(make_app, url, wallet)
    await as_if_from(url, "old-model-v1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["ENGRAM_DATABASE_URL"] = url
    if os.environ.get("ENGRAM_MODEL_CACHE"):
        env["ENGRAM_MODEL_CACHE"] = os.environ["ENGRAM_MODEL_CACHE"]
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app", "reembed", "--batch", "2"], cwd=PROJECT,
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "re-embedded 3 memories"
    assert await models_of(url) == {MODEL}


async def test_a_database_from_before_the_model_was_recorded_serves(
    make_app, database_url, wallet
) -> None:
    """A database whose settings name no model (older than this check) takes its memories'."""
    url = await fresh_database(database_url)
    ids = await stored(make_app, url, wallet)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DELETE FROM engram_settings WHERE key = 'embedding_model'")
    finally:
        await conn.close()
    async with AsyncTestClient(app=make_app(database={"url": url})) as client:
        r = await client.post("/v1/recall", json={"query": "when is the boiler serviced"},
                              headers=auth(wallet))  # fmt: skip
        assert r.json()["memories"][0]["id"] == ids[0]
    conn = await asyncpg.connect(url)
    try:
        recorded = "SELECT value FROM engram_settings WHERE key = 'embedding_model'"
        assert await conn.fetchval(recorded) == MODEL
    finally:
        await conn.close()


async def test_every_wallet_is_reembedded_wallet_by_wallet(
    make_app, database_url, wallet, other_wallet
) -> None:
    """Each batch is one wallet's (on Citus, one shard's), and every wallet gets done."""
    url = await fresh_database(database_url)
    await stored(make_app, url, wallet)
    await stored(make_app, url, other_wallet)
    await as_if_from(url, "old-model-v1")
    conn = await asyncpg.connect(url)
    await register_vector(conn)
    try:
        lines: list[str] = []
        assert await reembed_all(conn, LocalMiniLMEmbedder(), batch=2, progress=lines.append) == 6
        # 3 memories a wallet in batches of 2: 2 + 1, then 2 + 1
        assert [int(line.split()[1]) for line in lines] == [2, 3, 5, 6]
    finally:
        await conn.close()
    assert await models_of(url) == {MODEL}
