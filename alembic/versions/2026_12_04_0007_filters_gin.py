"""One GIN index answers a recall's filters together: wallet, namespace, type and tags.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04

A filtered recall over a big wallet (namespace + memory_type + a tag, bench/scale.py at 1M rows)
found its rows through `memories_wallet_tags_gin` (wallet, tags) and then read every row with
that tag to drop the other namespaces and types: 9,361 heap blocks for 197 matching rows, 16 ms
for the count that picks the plan and as much again for the exact scan. With the namespace and
the type as columns of the same GIN index (btree_gin, as for the wallet), the index intersects
the four conditions and the heap is read for the matching rows only (198 blocks, 4 ms). A query
that names fewer of them (tags alone, a namespace alone) uses the columns it names.
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX memories_wallet_filters_gin ON memories"
        " USING gin (user_id, namespace, memory_type, (metadata -> 'tags'))"
    )
    op.execute("DROP INDEX memories_wallet_tags_gin")


def downgrade() -> None:
    op.execute(
        "CREATE INDEX memories_wallet_tags_gin ON memories"
        " USING gin (user_id, (metadata -> 'tags'))"
    )
    op.execute("DROP INDEX memories_wallet_filters_gin")
