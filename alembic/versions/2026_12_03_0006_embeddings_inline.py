"""Keep a memory's embedding in its row, not in the TOAST table.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

A memory row with a 384-d embedding (1,544 bytes), a sentence of content and its tsvector is
about 2.1 KB, just over PostgreSQL's 2,032-byte TOAST threshold; pgvector's `vector` is stored
EXTERNAL, so the toaster moved the embedding, the biggest value, out of line: in bench/scale.py's
data 55 % of rows kept their vector in the TOAST table. Every exact scan (recall over a wallet
or filter of up to 2,000 memories, dedup, a batch's nearest lookup) then fetched each vector
through the TOAST index: about five buffer reads per row instead of one (19,500 blocks for
4,420 rows in the slowest filtered recall at 1M rows).

Each partition's `toast_tuple_target` goes to its maximum, so a row is toasted only when it would
not otherwise fit a page, and the embedding's storage becomes MAIN: when a row must shrink, its
content, tsvector and metadata leave the row first, the vector last.

Rows already stored keep their layout until they are rewritten: `VACUUM FULL memories` brings
them inline (it rebuilds the indexes too, so it is left to the operator, as is its lock).
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# PostgreSQL's ceiling for toast_tuple_target (TOAST_TUPLE_TARGET_MAIN with 8 KB pages).
INLINE_TARGET = 8160
DEFAULT_TARGET = 2032


def _partitions() -> list[str]:
    bind = op.get_bind()
    return [
        str(name)
        for (name,) in bind.exec_driver_sql(
            "SELECT relid::regclass::text FROM pg_partition_tree('memories') WHERE isleaf"
        )
    ]


def upgrade() -> None:
    op.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN")
    for partition in _partitions():
        op.execute(f"ALTER TABLE {partition} SET (toast_tuple_target = {INLINE_TARGET})")


def downgrade() -> None:
    for partition in _partitions():
        op.execute(f"ALTER TABLE {partition} SET (toast_tuple_target = {DEFAULT_TARGET})")
    op.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE EXTERNAL")
