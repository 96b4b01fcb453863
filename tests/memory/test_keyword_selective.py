"""The keyword side over a big wallet (the index path) looks for the query's selective words
only: a word in more than SELECTIVE_SHARE of the IDF sample brings no candidate by itself, the
rarest word stands in when every word is common, and every candidate still scores all the
query's words. The exact path (small wallets) looks for every word."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from eth_account import Account

from app.db.pool import create_pool
from app.memory.filters import MemoryFilter
from app.memory.repository import recall as repo

COMMON_ONLY, RARE, RAREST_COMMON, BAIT = 190, 3, 30, 12


def _query_vector() -> np.ndarray:
    vector = np.zeros(384, dtype=np.float32)
    vector[0] = 1.0
    return vector


def _rows(wallet: str, rng: np.random.Generator) -> list[tuple[object, ...]]:
    contents = [f"apple orchard note {i}" for i in range(COMMON_ONLY)]
    contents += [f"apple zebra sighting {i}" for i in range(RARE)]
    # a second common word, rarer than apple: in RAREST_COMMON of the rows above
    contents = [
        c.replace("note", "pear note") if i < RAREST_COMMON else c for i, c in enumerate(contents)
    ]
    vectors = [rng.standard_normal(384).astype(np.float32) for _ in contents]
    # rows right by the query vector, holding none of its words: the vector side's 10
    for i in range(BAIT):
        contents.append(f"unrelated bait {i}")
        vectors.append(_query_vector() + 0.05 * rng.standard_normal(384).astype(np.float32))
    return [
        (
            wallet, "default", content, hashlib.sha256(content.encode()).digest(),
            v / np.linalg.norm(v), "test",
        )
        for content, v in zip(contents, vectors, strict=True)
    ]  # fmt: skip


@pytest.fixture
async def big_wallet_conn(database_url: str):
    wallet = Account.create().address.lower()
    pool = await create_pool(database_url, min_size=1, max_size=1)
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "memories",
            records=_rows(wallet, np.random.default_rng(3)),
            columns=["user_id", "namespace", "content", "content_hash", "embedding",
                     "embedding_model"],
        )  # fmt: skip
        yield conn, wallet
    await pool.close()


async def _candidates(conn, wallet: str, query: str, exact: bool) -> dict[str, float]:
    async with conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        rows, hits = await repo.recall_candidates(
            conn, MemoryFilter(wallet=wallet), _query_vector(), query, 10, exact, 2001
        )
    assert hits == 10
    return {r["content"]: float(r["keyword_match"]) for r in rows}


def _by_keyword(candidates: dict[str, float]) -> dict[str, float]:
    return {c: k for c, k in candidates.items() if not c.startswith("unrelated bait")}


async def test_only_selective_words_bring_keyword_candidates_over_a_big_wallet(
    big_wallet_conn,
) -> None:
    conn, wallet = big_wallet_conn
    index = await _candidates(conn, wallet, "apple zebra", exact=False)
    assert len(index) - len(_by_keyword(index)) == 10  # the vector side: 10 bait rows
    # "apple" is in 193 of 205 rows, "zebra" in 3: only zebra's rows come by keyword
    assert sorted(_by_keyword(index)) == [f"apple zebra sighting {i}" for i in range(RARE)]
    assert all(k > 0 for k in _by_keyword(index).values())

    exact = await _candidates(conn, wallet, "apple zebra", exact=True)
    by_keyword = _by_keyword(exact)
    # the exact path looks for every word: 3 zebra rows, then 7 by apple alone
    assert len(by_keyword) == 10
    assert sum("zebra" in c for c in by_keyword) == RARE
    # every candidate scores every word, either way: a zebra row holds apple's IDF too
    zebra = exact["apple zebra sighting 0"]
    apple = max(k for c, k in by_keyword.items() if "zebra" not in c)
    assert zebra > apple > 0
    assert index["apple zebra sighting 0"] == pytest.approx(zebra)


async def test_the_rarest_word_stands_in_when_every_word_is_common(big_wallet_conn) -> None:
    conn, wallet = big_wallet_conn
    index = await _candidates(conn, wallet, "apple pear", exact=False)
    by_keyword = _by_keyword(index)
    # pear (in 30 of 205 rows) is common too, but the rarer: its rows bring the keyword 10
    assert len(by_keyword) == 10
    assert all("pear" in c for c in by_keyword)
    assert len(_by_keyword(await _candidates(conn, wallet, "apple", exact=False))) == 10
