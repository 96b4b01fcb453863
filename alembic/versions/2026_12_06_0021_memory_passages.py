"""Memory passages: the vectors of a long memory's text past the embedding model's window.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06

A memory's own vector (memories.embedding, the one the HNSW index walks) is its text's first
window (the local MiniLM truncates at 256 tokens). A longer memory's rest is embedded in
overlapping windows, one row each here, and recall scores the memory by its best window
(app/memory/repository.py `_signals`). One vector per memory stays in the index: the passages
are looked up by memory for candidates, and scanned with the wallet's exact scan. Keyed by the
wallet first, distributed with memories on Citus.

Nothing is embedded here: memories stored before this revision recall as before (their first
window) until `engram reembed` gives the long ones their passages.
"""

from alembic import op
from app.db.distribution import distribute_if_citus

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

DISTRIBUTED = [("memory_passages", "user_id", "memories")]


def _vector_type() -> str:
    bind = op.get_bind()
    return str(
        bind.exec_driver_sql(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
        ).scalar_one()
    )


def upgrade() -> None:
    op.execute(
        f"""
        CREATE TABLE memory_passages (
            user_id   text NOT NULL,
            memory_id uuid NOT NULL,
            seq       smallint NOT NULL,
            embedding {_vector_type()} NOT NULL,
            PRIMARY KEY (user_id, memory_id, seq),
            FOREIGN KEY (user_id, memory_id) REFERENCES memories (user_id, id) ON DELETE CASCADE
        )
        """
    )
    distribute_if_citus(op, DISTRIBUTED)


def downgrade() -> None:
    op.execute("DROP TABLE memory_passages")
