"""A static model (ENGRAM_EMBED_STATIC_DIR) is an embedder like MiniLM for the database: it is
recorded with the vectors it made, a silent switch to or from it is refused at start, and
`engram reembed` moves a database with memories in three wallets from MiniLM to it and back in
place (its 16-dim vectors padded to the database's 384), each way then serving recall."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from app.ai.embedders import Embedder, LocalMiniLMEmbedder, build_embedder
from app.config import LOCAL_EMBED_DIMS, EmbedderSettings
from app.db.schema import check_embedding_model, upgrade_to_head
from app.memory.reembed import reembed_all
from tests.support.api import auth, store_memory
from tests.support.db import create_database
from tests.support.static_model import make_static_model

MINILM = "all-MiniLM-L6-v2"
STATIC = "potion-like"  # the made model's directory name, which names it
CONTENTS = ["the boiler is serviced every October", "Ann's sister moved to Lisbon in April",
            "invoices are due in thirty days"]  # fmt: skip


MakeApp = Callable[..., Litestar]


async def refused(make_app: MakeApp, url: str, **groups: Any) -> str:
    with pytest.raises(BaseException) as error:  # the lifespan's error, in a task group
        async with AsyncTestClient(app=make_app(database={"url": url}, **groups)):
            pass
    return repr(error.value)


async def reembedded(url: str, embedder: Embedder) -> int:
    conn = await asyncpg.connect(url)
    await register_vector(conn)
    try:
        done = await reembed_all(conn, embedder, batch=2)
        await check_embedding_model(conn, embedder.model_name)  # passes now
        expected = (await embedder.embed(CONTENTS)).vectors
        for content, vector in zip(CONTENTS, expected, strict=True):
            for got in await conn.fetch(
                "SELECT embedding, embedding_model FROM memories WHERE content = $1", content
            ):
                assert got["embedding_model"] == embedder.model_name
                assert np.allclose(got["embedding"].to_numpy(), vector, atol=1e-6)
        return done
    finally:
        await conn.close()


async def recalls(
    make_app: MakeApp,
    url: str,
    wallets: list[LocalAccount],
    ids: dict[str, list[str]],
    **groups: Any,
) -> None:
    """Each wallet finds its own Ann memory first."""
    async with AsyncTestClient(app=make_app(database={"url": url}, **groups)) as client:
        for wallet in wallets:
            r = await client.post("/v1/recall", json={"query": "where does Ann's sister live",
                                  "min_similarity": 0}, headers=auth(wallet))  # fmt: skip
            assert r.json()["memories"][0]["id"] == ids[wallet.address][1]


async def test_minilm_to_static_and_back(
    tmp_path: Path, make_app: MakeApp, database_url: str
) -> None:
    directory = make_static_model(tmp_path / STATIC)
    static = {"embedder": {"static_dir": directory}}
    url = await create_database(database_url, f"engram_static_{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(upgrade_to_head, url, LOCAL_EMBED_DIMS, MINILM)
    wallets = [Account.create() for _ in range(3)]
    ids: dict[str, list[str]] = {}
    async with AsyncTestClient(app=make_app(database={"url": url})) as client:
        for wallet in wallets:
            ids[wallet.address] = [
                (await store_memory(client, wallet, c))["memory"]["id"] for c in CONTENTS
            ]

    # MiniLM's vectors under the static model: refused, with the way out
    assert "Run `engram reembed` to re-embed every memory with potion-like" in (
        await refused(make_app, url, **static)
    )
    assert await reembedded(url, build_embedder(EmbedderSettings(static_dir=directory))) == 9
    await recalls(make_app, url, wallets, ids, **static)
    async with AsyncTestClient(app=make_app(database={"url": url}, **static)) as client:
        stored = await store_memory(client, wallets[0], "the gutters are cleared in November")
        assert stored["memory"]["embedding_model"] == STATIC
        assert (await client.get("/health")).json()["embedder"] == {"model": STATIC, "dims": 384}

    # and back: the static vectors under MiniLM are refused in turn, then re-embedded
    assert f"embedded with {STATIC}, but the configured embedder is {MINILM}" in (
        await refused(make_app, url)
    )
    assert await reembedded(url, LocalMiniLMEmbedder()) == 10  # with the one it stored
    await recalls(make_app, url, wallets, ids)
