"""Every key of a wallet-owned table includes the wallet; on Citus, distribute by wallet.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

Citus requires every PRIMARY KEY and UNIQUE constraint of a distributed table to include its
distribution column. On plain PostgreSQL this migration only widens three keys (each old key
implied the new one, so existing rows fit):
- memory_relations: PRIMARY KEY (user_id, id), UNIQUE (user_id, source_id, target_id, type);
- memory_history: PRIMARY KEY (user_id, id);
- payments: PRIMARY KEY (wallet, id), UNIQUE (wallet, network, asset, payer, nonce). A proof's
  nonce is still spent once: the chain refuses its second settlement, and the in-flight guard
  on (network, payer, nonce) is global.

When the `citus` extension is installed in the database, it then distributes (docs/scale-out.md):
- by wallet, co-located with `memories`: memories (with its partitions), wallets, memory_history,
  memory_relations, payments;
- by nonce, alone: auth_nonces (looked up by nonce only);
- as reference tables (copied to every node): grants and delegations (read by grantee or agent
  as well as by owner), engram_settings and alembic_version.
Tables already distributed are left as they are, so the step can be run again.
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# (table, distribution column, co-located with); the order respects foreign keys.
DISTRIBUTED = [
    ("memories", "user_id", "none"),
    ("wallets", "address", "memories"),
    ("memory_history", "user_id", "memories"),
    ("memory_relations", "user_id", "memories"),
    ("payments", "wallet", "memories"),
    ("auth_nonces", "nonce", "none"),
]
REFERENCE = ["engram_settings", "grants", "delegations", "alembic_version"]


def upgrade() -> None:
    op.execute("ALTER TABLE memory_relations DROP CONSTRAINT memory_relations_pkey")
    op.execute("ALTER TABLE memory_relations ADD PRIMARY KEY (user_id, id)")
    op.execute(
        "ALTER TABLE memory_relations"
        " DROP CONSTRAINT memory_relations_source_id_target_id_relation_type_key"
    )
    op.execute(
        "ALTER TABLE memory_relations ADD CONSTRAINT memory_relations_unique_link"
        " UNIQUE (user_id, source_id, target_id, relation_type)"
    )
    op.execute("ALTER TABLE memory_history DROP CONSTRAINT memory_history_pkey")
    op.execute("ALTER TABLE memory_history ADD PRIMARY KEY (user_id, id)")
    op.execute("ALTER TABLE payments DROP CONSTRAINT payments_pkey")
    op.execute("ALTER TABLE payments ADD PRIMARY KEY (wallet, id)")
    op.execute("ALTER TABLE payments DROP CONSTRAINT payments_network_asset_payer_nonce_key")
    op.execute(
        "ALTER TABLE payments ADD CONSTRAINT payments_proof_once"
        " UNIQUE (wallet, network, asset, payer, nonce)"
    )
    if _citus_installed():
        with op.get_context().autocommit_block():  # Citus distributes outside the DDL's block
            _distribute()
            _hnsw_defaults_everywhere()


def _citus_installed() -> bool:
    bind = op.get_bind()
    return bool(bind.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'citus'").scalar())


def _distribute() -> None:
    bind = op.get_bind()
    done = {row[0] for row in bind.exec_driver_sql("SELECT table_name::text FROM citus_tables")}
    for table in REFERENCE:
        if table not in done:
            op.execute(f"SELECT create_reference_table('{table}')")
    for table, column, colocate_with in DISTRIBUTED:
        if table not in done:
            op.execute(
                f"SELECT create_distributed_table('{table}', '{column}',"
                f" colocate_with => '{colocate_with}')"
            )


# The pool sets these per session (app/db/pool.py), which reaches the coordinator only: the
# shards' HNSW scans run in the workers' own sessions. As database defaults on every node, they
# hold there too (docs/scale-out.md has the measurement).
HNSW_DEFAULTS = {"hnsw.ef_search": "400", "hnsw.iterative_scan": "relaxed_order"}


def _hnsw_defaults_everywhere() -> None:
    for name, value in HNSW_DEFAULTS.items():
        statement = f"ALTER DATABASE %I SET {name} = '{value}'"
        op.execute(f"DO $$ BEGIN EXECUTE format($f${statement}$f$, current_database()); END $$")
        op.execute(f"SELECT run_command_on_workers(format($f${statement}$f$, current_database()))")


def downgrade() -> None:
    if _citus_installed():
        raise NotImplementedError("undistributing Citus tables is an operator's decision")
    op.execute("ALTER TABLE payments DROP CONSTRAINT payments_proof_once")
    op.execute(
        "ALTER TABLE payments ADD CONSTRAINT payments_network_asset_payer_nonce_key"
        " UNIQUE (network, asset, payer, nonce)"
    )
    op.execute("ALTER TABLE payments DROP CONSTRAINT payments_pkey")
    op.execute("ALTER TABLE payments ADD PRIMARY KEY (id)")
    op.execute("ALTER TABLE memory_history DROP CONSTRAINT memory_history_pkey")
    op.execute("ALTER TABLE memory_history ADD PRIMARY KEY (id)")
    op.execute("ALTER TABLE memory_relations DROP CONSTRAINT memory_relations_unique_link")
    op.execute(
        "ALTER TABLE memory_relations ADD CONSTRAINT"
        " memory_relations_source_id_target_id_relation_type_key"
        " UNIQUE (source_id, target_id, relation_type)"
    )
    op.execute("ALTER TABLE memory_relations DROP CONSTRAINT memory_relations_pkey")
    op.execute("ALTER TABLE memory_relations ADD PRIMARY KEY (id)")
