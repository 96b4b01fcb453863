"""The keyword side's lexicon: each query word's BM25 IDF among the rows searched, as counted by
hand (words in none, some and every row; a query of stop words only has none)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from eth_account import Account

from app.db.pool import create_pool
from app.memory.filters import MemoryFilter
from app.memory.repository import recall as repo

CONTENTS = [
    "apple orchard in spring",
    "apple pie recipe",
    "apple cider and pear juice",
    "pear tree pruning",
    "apple harvest festival",
    "winter garden notes",
]


@pytest.fixture
async def wallet_conn(database_url: str):
    wallet = Account.create().address.lower()
    rng = np.random.default_rng(1)
    rows = []
    for content in CONTENTS:
        vector = rng.standard_normal(384).astype(np.float32)
        rows.append((
            wallet, content, hashlib.sha256(content.encode()).digest(),
            vector / np.linalg.norm(vector), "test",
        ))  # fmt: skip
    pool = await create_pool(database_url, min_size=1, max_size=1)
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "memories",
            records=rows,
            columns=["user_id", "content", "content_hash", "embedding", "embedding_model"],
        )
        yield conn, wallet
    await pool.close()


async def _lexicon(conn, wallet: str, query: str) -> repo.Lexicon:
    rows, _ = await repo.recall_candidates(
        conn, MemoryFilter(wallet=wallet), np.ones(384, np.float32) / np.sqrt(384),
        query, 10, True, 2001,
    )  # fmt: skip
    return repo.lexicon_of(rows)


def _idf(df: int, n: int = len(CONTENTS)) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


async def test_each_word_is_weighed_by_the_rows_that_hold_it(wallet_conn) -> None:
    conn, wallet = wallet_conn
    lexicon = await _lexicon(conn, wallet, "apple pear garden zebra festival")
    # apple in 4 rows, pear in 2, garden and festival in 1, zebra in none
    expected = {"appl": _idf(4), "pear": _idf(2), "garden": _idf(1), "festiv": _idf(1),
                "zebra": _idf(0)}  # fmt: skip
    assert lexicon == pytest.approx(expected)


async def test_a_query_of_stop_words_has_no_lexicon(wallet_conn) -> None:
    conn, wallet = wallet_conn
    assert await _lexicon(conn, wallet, "the and of") == {}
