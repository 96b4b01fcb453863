"""A memory's embedding stays in its row (migration 0006): exact scans read one heap tuple per
memory, not a TOAST index and chunk besides (pg_column_toast_chunk_id is NULL for an inline
value)."""

from __future__ import annotations

import random

from eth_account import Account
from litestar.testing import AsyncTestClient

from app.db.pool import create_pool
from tests.support.api import auth


def _words(n: int, rng: random.Random) -> str:
    return " ".join(
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(n)
    )


async def test_embeddings_stay_inline_even_when_the_row_must_shrink(
    make_app, database_url: str
) -> None:
    wallet = Account.create()
    rng = random.Random(6)
    # ~2.3 KB rows (over the default 2,032-byte threshold, where the vector used to be moved
    # out), ~4 KB rows, and rows that cannot fit a page whole: their content goes out instead.
    sizes = {"short": 40, "medium": 150, "huge": 1200}
    async with AsyncTestClient(app=make_app()) as client:
        for name, words in sizes.items():
            body = {"content": f"{name}: {_words(words, rng)}"[:8192], "namespace": name}
            r = await client.post("/v1/store", json=body, headers=auth(wallet))
            assert r.status_code == 201, r.text
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            rows = await conn.fetch(
                """SELECT namespace, pg_column_size(m.*) AS row_bytes,
                          pg_column_toast_chunk_id(embedding) AS vector_chunk,
                          pg_column_toast_chunk_id(content) IS NOT NULL
                            OR pg_column_toast_chunk_id(tsv) IS NOT NULL
                            OR pg_column_compression(content) IS NOT NULL
                            OR pg_column_compression(tsv) IS NOT NULL AS text_gave_way,
                          octet_length(content) + pg_column_size(embedding) AS raw_bytes
                   FROM memories m WHERE user_id = $1""",
                wallet.address.lower(),
            )
    finally:
        await pool.close()
    by_ns = {r["namespace"]: r for r in rows}
    assert set(by_ns) == set(sizes)
    assert by_ns["short"]["row_bytes"] > 2032
    assert all(r["vector_chunk"] is None for r in rows), [dict(r) for r in rows]
    assert not by_ns["medium"]["text_gave_way"]
    # a row bigger than a page: its text was compressed or moved out, never its vector
    assert by_ns["huge"]["raw_bytes"] > 8160
    assert by_ns["huge"]["text_gave_way"]
