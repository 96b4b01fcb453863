"""The schema fits a distributed PostgreSQL (Citus) by wallet: app/db/distribution.py's layout.

Citus cannot run in CI, so these hold its rules on plain PostgreSQL: every key of a wallet-owned
table includes the wallet; every table has a place in the layout; the migration distributes by
that layout; and the statement checker (tests/support/sql_check.py), which the suite-wide audit
(tests/support/sql_audit.py) runs on every statement, catches what would leave one shard.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid

import asyncpg
import pytest

from app.db.distribution import BY_OTHER, BY_WALLET, REFERENCE
from app.infra.project_files import shipped
from tests.support.sql_check import VOLATILITY_SQL, problems_of

WALLET = "0x" + "ab" * 20


async def _fetch(database_url: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def test_every_key_of_a_wallet_owned_table_includes_the_wallet(database_url: str) -> None:
    rows = await _fetch(
        database_url,
        """SELECT c.relname AS table, i.relname AS key,
                  array_agg(a.attname::text) AS columns
           FROM pg_index x
           JOIN pg_class c ON c.oid = x.indrelid
           JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(x.indkey)
           JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
           WHERE (x.indisunique OR x.indisprimary) AND NOT c.relispartition
           GROUP BY c.relname, i.relname""",
    )
    keys = [(r["table"], r["key"], set(r["columns"])) for r in rows if r["table"] in BY_WALLET]
    assert {t for t, _, _ in keys} == set(BY_WALLET)  # each has a key at all
    missing = [(t, k) for t, k, cols in keys if BY_WALLET[t] not in cols]
    assert missing == []


async def test_every_table_has_a_place_in_the_layout(database_url: str) -> None:
    rows = await _fetch(
        database_url,
        """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition""",
    )
    tables = {r["relname"] for r in rows}
    placed = set(BY_WALLET) | set(BY_OTHER) | set(REFERENCE)
    assert tables == placed


def _migration(path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migrations_distribute_by_the_layout() -> None:
    migrations = [_migration(p) for p in sorted(shipped("alembic").glob("versions/*.py"))]
    placed = [row for m in migrations for row in getattr(m, "DISTRIBUTED", [])]
    assert {table: column for table, column, _ in placed} == {**BY_WALLET, **BY_OTHER}
    assert len(placed) == len({table for table, _, _ in placed})  # each table once
    references = [t for m in migrations for t in getattr(m, "REFERENCE", [])]
    assert set(references) == set(REFERENCE)
    colocated = {t for t, _, with_ in placed if with_ == "memories"}
    assert colocated == set(BY_WALLET) - {"memories"}


@pytest.fixture(scope="module")
def volatility(database_url: str) -> dict[str, str]:
    return {r[0]: r[1] for r in asyncio.run(_fetch(database_url, VOLATILITY_SQL))}


ONE_SHARD = [
    "SELECT * FROM memories m WHERE m.user_id = $1 AND m.id = $2",
    "SELECT count(*) FROM payments WHERE wallet = $1",
    """SELECT h.id FROM memories m
       LEFT JOIN memory_history h ON h.user_id = m.user_id AND h.memory_id = m.id
       WHERE m.user_id = $1""",
    "UPDATE memories m SET pinned = true WHERE m.user_id = $1 AND m.id = $2",
    "DELETE FROM memory_relations r WHERE r.user_id = $1 AND r.id = $2",
    "INSERT INTO memory_history (user_id, memory_id, action) VALUES ($1, $2, 'create')",
    """INSERT INTO wallets (address, free_calls_used, last_seen_at) VALUES ($1, 1, now())
       ON CONFLICT (address) DO UPDATE SET free_calls_used = wallets.free_calls_used + 1,
           last_seen_at = excluded.last_seen_at WHERE wallets.free_calls_used < $2""",
    "SELECT value FROM engram_settings WHERE key = $2",  # a reference table
    "DELETE FROM auth_nonces WHERE nonce = $2 RETURNING 1",
]

LEAVES_ONE_SHARD = {
    "no filter": "SELECT count(*) FROM memories",
    "a filter in a comment": "SELECT * FROM memories m WHERE m.id = $2 -- AND m.user_id = $1",
    "a filter in a string": "SELECT * FROM memories m WHERE m.content = 'm.user_id = $1'",
    "under an OR": "SELECT count(*) FROM payments WHERE wallet = $1 OR payer = $1",
    "under a NOT": "SELECT * FROM memories m WHERE NOT (m.user_id = $1)",
    "another column": "SELECT * FROM memories m WHERE m.agent_id = $1",
    "a list of wallets": "SELECT * FROM memories m WHERE m.user_id = ANY($1)",
    "one table of two": """SELECT * FROM memories m JOIN memory_relations r ON r.source_id = m.id
                           WHERE m.user_id = $1""",
    "a subquery unfiltered": """SELECT * FROM memories m WHERE m.user_id = $1
                                AND m.id IN (SELECT memory_id FROM memory_history)""",
    "an insert from a column": """INSERT INTO memories (user_id, content)
                                  SELECT u.w, u.c FROM unnest($1::text[], $2::text[]) u(w, c)""",
    "a parameter that is no wallet": "SELECT * FROM memories m WHERE m.user_id = $2",
    "the nonce sweep": "DELETE FROM auth_nonces WHERE expires_at < now()",
    "now() in ON CONFLICT DO UPDATE": """INSERT INTO wallets (address) VALUES ($1)
        ON CONFLICT (address) DO UPDATE SET last_seen_at = now()""",
    "CURRENT_TIMESTAMP in ON CONFLICT DO UPDATE": """INSERT INTO wallets (address) VALUES ($1)
        ON CONFLICT (address) DO UPDATE SET last_seen_at = CURRENT_TIMESTAMP""",
    "random() in ON CONFLICT's WHERE": """INSERT INTO wallets (address) VALUES ($1)
        ON CONFLICT (address) DO UPDATE SET free_calls_used = 0 WHERE random() < 0.5""",
}


@pytest.mark.parametrize("sql", ONE_SHARD)
def test_the_checker_passes_one_shard_statements(sql: str, volatility: dict[str, str]) -> None:
    assert problems_of(sql, [WALLET, str(uuid.uuid4())], volatility) == []


@pytest.mark.parametrize("sql", LEAVES_ONE_SHARD.values(), ids=LEAVES_ONE_SHARD.keys())
def test_the_checker_catches_what_leaves_one_shard(sql: str, volatility: dict[str, str]) -> None:
    assert problems_of(sql, [WALLET, "not-a-wallet"], volatility) != []
