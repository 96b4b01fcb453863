"""How Engram's tables spread over a distributed PostgreSQL (Citus): the layout that migrations
0011, 0013-0018 and 0021 apply when the `citus` extension is installed, and that the tests hold the
schema and every repository statement to (tests/db/test_distribution.py,
tests/support/sql_audit.py).

Wallet-owned tables are distributed by their wallet column, co-located with `memories`: every
statement that names a wallet touches one shard group, and a request's transaction stays on one
worker. docs/scale-out.md explains the choices."""

from __future__ import annotations

from typing import Any

# table -> its wallet column (the distribution column). Every PRIMARY KEY and UNIQUE constraint
# of these tables includes it, and every statement on them filters by it.
BY_WALLET: dict[str, str] = {
    "memories": "user_id",
    "wallets": "address",
    "memory_history": "user_id",
    "memory_relations": "user_id",
    "payments": "wallet",
    "usage_daily": "wallet",
    "payment_channels": "wallet",  # the payer's (migration 0016)
    "channel_vouchers": "wallet",
    "channel_claims": "wallet",  # the claimer's claims and refunds (migration 0017)
    "namespace_guards": "user_id",  # a namespace's guard mode, set by its owner (migration 0018)
    "memory_passages": "user_id",  # a long memory's windows past the first (migration 0021)
}

# Distributed by another column, alone: sign-in nonces, looked up by the nonce only; the
# console's sessions and sign-in links, by the hash of their token only.
BY_OTHER: dict[str, str] = {
    "auth_nonces": "nonce",
    "console_sessions": "token_hash",
    "console_links": "token_hash",
}

# Reference tables (a copy on every node): small, read from every shard's requests, written
# rarely. Grants and delegations are read by grantee or agent as well as by owner; the nonces
# an owner cancelled are read with its delegations (migration 0015).
REFERENCE: tuple[str, ...] = (
    "engram_settings", "grants", "delegations", "delegation_cancels", "alembic_version",
)  # fmt: skip


def distribute_if_citus(op: Any, tables: list[tuple[str, str, str]]) -> None:
    """What a migration that creates wallet-owned tables runs last: on Citus, each table
    (name, distribution column, co-located with) is distributed, outside the migration's
    transaction as Citus requires; on plain PostgreSQL nothing."""
    bind = op.get_bind()
    if not bind.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'citus'").scalar():
        return
    with op.get_context().autocommit_block():
        for table, column, colocate_with in tables:
            op.execute(
                f"SELECT create_distributed_table('{table}', '{column}',"
                f" colocate_with => '{colocate_with}')"
            )
