"""Event time and storage order of memories.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

- `occurred_at`: when the memory's event happened, and `mentioned_at`: when it was said or
  written, the time a relative date in it counts from ("yesterday"): the client's
  `occurred_at`, or read off the content (app/memory/dates.py). Recall boosts memories whose
  span from one to the other meets a time the query names, and filters on `occurred_at`.
- `seq`: the order memories were written in (one sequence for all wallets). Recall's second
  round follows a hit to the memories written right after it in the same namespace and
  session: a conversation's next turns (app/memory/scoring.py, "continuation"). Existing rows
  are numbered by creation time.
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SEQUENCE memories_seq AS bigint")
    op.execute(
        "ALTER TABLE memories ADD COLUMN occurred_at timestamptz,"
        " ADD COLUMN mentioned_at timestamptz, ADD COLUMN seq bigint"
    )
    op.execute(
        """UPDATE memories m SET seq = o.n
           FROM (SELECT user_id, id, nextval('memories_seq') AS n
                 FROM (SELECT user_id, id FROM memories ORDER BY created_at, id) ordered) o
           WHERE m.user_id = o.user_id AND m.id = o.id"""
    )
    op.execute(
        "ALTER TABLE memories ALTER COLUMN seq SET DEFAULT nextval('memories_seq'),"
        " ALTER COLUMN seq SET NOT NULL"
    )
    op.execute("ALTER SEQUENCE memories_seq OWNED BY memories.seq")
    op.execute(
        "CREATE INDEX memories_live_by_seq ON memories (user_id, namespace, seq)"
        " WHERE deleted_at IS NULL"
    )
    op.execute(
        "CREATE INDEX memories_live_by_event ON memories (user_id, occurred_at)"
        " WHERE deleted_at IS NULL AND occurred_at IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_live_by_event")
    op.execute("DROP INDEX memories_live_by_seq")
    op.execute(
        "ALTER TABLE memories DROP COLUMN seq, DROP COLUMN mentioned_at, DROP COLUMN occurred_at"
    )
