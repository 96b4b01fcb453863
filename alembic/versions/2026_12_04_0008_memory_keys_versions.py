"""A memory's stable key and its version (team memory: upsert by key, optimistic concurrency).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

`key` names a memory within its wallet and namespace ("tikv/compaction-tuning"): a store with a
known key updates that memory instead of adding one. At most one live memory holds a key in a
namespace (a deleted one gives its key up). `version` starts at 1 and counts every change to
the memory; writers name the version they read (`If-Match`, `expected_version`) so that none
silently overwrites another. Existing memories get version 1 and no key: adding the columns with
a constant default rewrites nothing.
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE memories ADD COLUMN key text"
        " CHECK (key IS NULL OR length(key) BETWEEN 1 AND 255),"
        " ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version >= 1)"
    )
    op.execute(
        "CREATE UNIQUE INDEX memories_live_key ON memories (user_id, namespace, key)"
        " WHERE key IS NOT NULL AND deleted_at IS NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_live_key")
    op.execute("ALTER TABLE memories DROP COLUMN key, DROP COLUMN version")
