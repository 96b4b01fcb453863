"""Provenance and trust on every memory, and each namespace's guard (issue 39).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06

`source` says where the content came from (user, assistant, tool, import, extract, console,
api), `written_by` and `writer` who wrote it (the wallet itself, an agent key acting for it, or
a grantee), `surface` through what (rest, mcp, hook, console). `flags` holds the store-time
classifier's findings (app/guard/classifier.py), `quarantined` a memory a grantee or an agent
key wrote into a namespace under review, not recalled until the owner approves it. Existing
memories keep NULLs there (no provenance was recorded for them, and a read leaves them out);
adding nullable columns and one with a constant default rewrites nothing.

`namespace_guards` holds a namespace's guard mode when its owner set one (off, flag, refuse,
review; none set: flag). Keyed by the wallet first, distributed with memories on Citus.
"""

from alembic import op
from app.db.distribution import distribute_if_citus

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

DISTRIBUTED = [("namespace_guards", "user_id", "memories")]


def upgrade() -> None:
    op.execute(
        "ALTER TABLE memories"
        " ADD COLUMN source text CHECK (source IN"
        " ('user', 'assistant', 'tool', 'import', 'extract', 'console', 'api')),"
        " ADD COLUMN written_by text,"
        " ADD COLUMN writer text CHECK (writer IN ('owner', 'agent', 'grantee')),"
        " ADD COLUMN surface text CHECK (surface IN ('rest', 'mcp', 'hook', 'console')),"
        " ADD COLUMN flags jsonb,"
        " ADD COLUMN quarantined boolean NOT NULL DEFAULT false"
    )
    op.execute(
        """
        CREATE TABLE namespace_guards (
            user_id    text NOT NULL,
            namespace  text NOT NULL,
            mode       text NOT NULL CHECK (mode IN ('off', 'flag', 'refuse', 'review')),
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (user_id, namespace)
        )
        """
    )
    distribute_if_citus(op, DISTRIBUTED)


def downgrade() -> None:
    op.execute("DROP TABLE namespace_guards")
    op.execute(
        "ALTER TABLE memories DROP COLUMN source, DROP COLUMN written_by, DROP COLUMN writer,"
        " DROP COLUMN surface, DROP COLUMN flags, DROP COLUMN quarantined"
    )
