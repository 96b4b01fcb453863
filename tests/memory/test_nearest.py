"""The nearest-duplicate lookup: a batch measured against the wallet's rows read once finds, for
every item, what one lookup per item finds (app/memory/repository/dedup.py `nearest_each`)."""

from __future__ import annotations

import numpy as np
from eth_account import Account
from litestar.testing import AsyncTestClient

from app.db.pool import create_pool
from app.memory.repository import dedup as repo
from tests.support.api import auth


async def test_a_batch_finds_each_items_nearest_as_single_lookups_do(
    make_app, database_url: str
) -> None:
    wallet = Account.create()
    rng = np.random.default_rng(7)
    contents = [f"fact number {i} about topic {i % 7}" for i in range(40)]
    app = make_app()
    async with AsyncTestClient(app=app) as client:
        for namespace, chunk in (("a", contents[:25]), ("b", contents[25:])):
            body = {"memories": [{"content": c, "namespace": namespace} for c in chunk]}
            r = await client.post("/v1/store/batch", json=body, headers=auth(wallet))
            assert r.status_code == 201, r.text
        stored = (await app.state.embedder.embed(contents[:6])).vectors
        noise = [v / np.linalg.norm(v) for v in rng.normal(size=(6, 384)).astype(np.float32)]
        vectors = [*stored, *noise]
        namespaces = ["a", "a", "b", "b", "empty", "a", "a", "b", "b", "a", "empty", "b"]
    owner = wallet.address.lower()
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            batch = await repo.nearest_each(conn, owner, namespaces, vectors, exact=True)
            singles = [
                (await repo.nearest_each(conn, owner, [ns], [v], exact=True))[0]
                for ns, v in zip(namespaces, vectors, strict=True)
            ]
    finally:
        await pool.close()

    def found(hit):
        return None if hit is None else (hit[0]["id"], hit[0]["namespace"], round(hit[1], 5))

    assert [found(h) for h in batch] == [found(h) for h in singles]
    assert batch[4] is None and batch[10] is None  # nothing stored in that namespace
    assert round(batch[0][1], 4) == 1.0 and batch[0][0]["content"] == contents[0]
    assert batch[2][0]["namespace"] == "b"  # never a memory of another namespace
