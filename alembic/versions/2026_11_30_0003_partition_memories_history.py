"""Memories hash-partitioned by wallet, a composite (wallet, tsvector) GIN, and memory history.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Every read of memories names one wallet, so partitioning by `user_id` prunes each query to one
of 16 partitions, each with its own HNSW graph: a big wallet's filtered vector scan walks a graph
where most nodes are its own, and the keyword side uses a GIN on (user_id, tsv) (btree_gin)
instead of matching a common word across every wallet. The primary key becomes (user_id, id);
relations and history reference memories by that pair, so the database itself refuses a
relation or history row whose memory belongs to another wallet.

Existing rows are copied into the partitioned table (the vector dimension is read off the old
column). History rows record every change to a memory in the transaction that makes it.
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PARTITIONS = 16
# Room on each page for recall's access-count updates to be HOT (heap-only: no new entry in the
# HNSW, GIN and btree indexes); on full pages every recall re-inserted 10 rows into every index.
FILLFACTOR = 80
MEMORY_TYPES = ("correction", "preference", "decision", "project", "observation", "general")
HISTORY_ACTIONS = ("create", "update", "consolidate", "delete", "restore", "import")
COPIED = (
    "id, user_id, namespace, content, content_hash, embedding, embedding_model, metadata,"
    " importance, memory_type, session_id, agent_id, expires_at, pinned, immutable, created_at,"
    " updated_at, accessed_at, access_count, deleted_at"
)


def _vector_type() -> str:
    bind = op.get_bind()
    return str(
        bind.exec_driver_sql(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
        ).scalar_one()
    )


def _check_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def upgrade() -> None:
    vector_type = _vector_type()
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.execute("ALTER TABLE memory_relations DROP CONSTRAINT memory_relations_source_id_fkey")
    op.execute("ALTER TABLE memory_relations DROP CONSTRAINT memory_relations_target_id_fkey")
    op.execute("ALTER TABLE memories RENAME TO memories_unpartitioned")
    op.execute("ALTER INDEX memories_pkey RENAME TO memories_unpartitioned_pkey")
    for index in (
        "memories_embedding_hnsw",
        "memories_tsv_gin",
        "memories_live_by_wallet",
        "memories_live_by_hash",
        "memories_tags_gin",
    ):
        op.execute(f"DROP INDEX {index}")
    op.execute(
        f"""
        CREATE TABLE memories (
            id              uuid NOT NULL DEFAULT gen_random_uuid(),
            user_id         text NOT NULL,
            namespace       text NOT NULL DEFAULT 'default' CHECK (length(namespace) <= 255),
            content         text NOT NULL CHECK (length(content) BETWEEN 1 AND 8192),
            content_hash    bytea NOT NULL,
            embedding       {vector_type} NOT NULL,
            embedding_model text NOT NULL,
            metadata        jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            importance      double precision NOT NULL DEFAULT 0.5
                            CHECK (importance BETWEEN 0 AND 1),
            memory_type     text NOT NULL DEFAULT 'general'
                            CHECK (memory_type IN ({_check_list(MEMORY_TYPES)})),
            session_id      text CHECK (length(session_id) <= 255),
            agent_id        text CHECK (length(agent_id) <= 255),
            expires_at      timestamptz,
            pinned          boolean NOT NULL DEFAULT false,
            immutable       boolean NOT NULL DEFAULT false,
            created_at      timestamptz NOT NULL DEFAULT now(),
            updated_at      timestamptz NOT NULL DEFAULT now(),
            accessed_at     timestamptz NOT NULL DEFAULT now(),
            access_count    integer NOT NULL DEFAULT 0,
            deleted_at      timestamptz,
            tsv             tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
            CONSTRAINT memories_pkey PRIMARY KEY (user_id, id)
        ) PARTITION BY HASH (user_id)
        """
    )
    for remainder in range(PARTITIONS):
        op.execute(
            f"CREATE TABLE memories_p{remainder:02d} PARTITION OF memories"
            f" FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {remainder})"
            f" WITH (fillfactor = {FILLFACTOR})"
        )
    op.execute(f"INSERT INTO memories ({COPIED}) SELECT {COPIED} FROM memories_unpartitioned")
    op.execute("DROP TABLE memories_unpartitioned")
    op.execute(
        "CREATE INDEX memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops)"
    )
    op.execute("CREATE INDEX memories_wallet_tsv_gin ON memories USING gin (user_id, tsv)")
    op.execute(
        "CREATE INDEX memories_live_by_wallet ON memories (user_id, namespace, created_at DESC)"
        " WHERE deleted_at IS NULL"
    )
    op.execute(
        "CREATE INDEX memories_live_by_hash ON memories (user_id, namespace, content_hash)"
        " WHERE deleted_at IS NULL"
    )
    op.execute(
        "CREATE INDEX memories_wallet_tags_gin ON memories"
        " USING gin (user_id, (metadata -> 'tags'))"
    )
    op.execute(
        """ALTER TABLE memory_relations
           ADD CONSTRAINT memory_relations_source_fkey FOREIGN KEY (user_id, source_id)
               REFERENCES memories (user_id, id) ON DELETE CASCADE,
           ADD CONSTRAINT memory_relations_target_fkey FOREIGN KEY (user_id, target_id)
               REFERENCES memories (user_id, id) ON DELETE CASCADE"""
    )
    op.execute("CREATE INDEX memory_relations_source ON memory_relations (user_id, source_id)")
    op.execute("DROP INDEX memory_relations_target")
    op.execute("CREATE INDEX memory_relations_target ON memory_relations (user_id, target_id)")
    op.execute(
        f"""
        CREATE TABLE memory_history (
            id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id    text NOT NULL,
            memory_id  uuid NOT NULL,
            action     text NOT NULL CHECK (action IN ({_check_list(HISTORY_ACTIONS)})),
            changes    jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            FOREIGN KEY (user_id, memory_id) REFERENCES memories (user_id, id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "CREATE INDEX memory_history_by_memory ON memory_history (user_id, memory_id, created_at)"
    )


def downgrade() -> None:
    raise NotImplementedError("0003 is not reversible: restore from a backup (pg_dump) instead")
