"""Initial schema: memories (pgvector HNSW + tsvector GIN), relations, wallets, settings.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

The embedding dimension is fixed per database: it is taken from the configured embedder when the
schema is created and recorded in engram_settings, so a later start with another embedder fails
with a clear message instead of corrupting the vector column.
"""

import os

from alembic import context, op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

MEMORY_TYPES = ("correction", "preference", "decision", "project", "observation", "general")
RELATION_TYPES = ("related_to", "supersedes", "contradicts", "derived_from", "supports")


def _embed_dims() -> int:
    dims = context.config.attributes.get("embed_dims")
    if dims is None:
        from app.config import Settings

        dims = Settings.from_env().embedder.expected_dims
    dims = int(dims)
    if not 1 <= dims <= 2000:  # HNSW on `vector` indexes at most 2,000 dimensions
        raise SystemExit(f"embedding dimension {dims} is outside 1..2000")
    return dims


def _sql_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def upgrade() -> None:
    dims = _embed_dims()
    model = context.config.attributes.get("embed_model") or os.environ.get("ENGRAM_EMBED_MODEL", "")
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute(
        """
        CREATE TABLE engram_settings (
            key   text PRIMARY KEY,
            value text NOT NULL
        )
        """
    )
    op.execute(
        f"INSERT INTO engram_settings (key, value) VALUES ('embedding_dims', '{dims}'),"
        f" ('embedding_model_at_creation', '{model}')"
    )
    op.execute(
        """
        CREATE TABLE wallets (
            address         text PRIMARY KEY CHECK (address ~ '^0x[0-9a-f]{40}$'),
            free_calls_used integer NOT NULL DEFAULT 0 CHECK (free_calls_used >= 0),
            created_at      timestamptz NOT NULL DEFAULT now(),
            last_seen_at    timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE memories (
            id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id         text NOT NULL,
            namespace       text NOT NULL DEFAULT 'default' CHECK (length(namespace) <= 255),
            content         text NOT NULL CHECK (length(content) BETWEEN 1 AND 8192),
            content_hash    bytea NOT NULL,
            embedding       vector({dims}) NOT NULL,
            embedding_model text NOT NULL,
            metadata        jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            importance      double precision NOT NULL DEFAULT 0.5
                            CHECK (importance BETWEEN 0 AND 1),
            memory_type     text NOT NULL DEFAULT 'general'
                            CHECK (memory_type IN ({_sql_list(MEMORY_TYPES)})),
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
            tsv             tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
        )
        """
    )
    op.execute(
        "CREATE INDEX IF NOT EXISTS memories_embedding_hnsw ON memories"
        " USING hnsw (embedding vector_cosine_ops)"
    )
    op.execute("CREATE INDEX memories_tsv_gin ON memories USING gin (tsv)")
    op.execute(
        "CREATE INDEX memories_live_by_wallet ON memories (user_id, namespace, created_at DESC)"
        " WHERE deleted_at IS NULL"
    )
    op.execute(
        "CREATE INDEX memories_live_by_hash ON memories (user_id, namespace, content_hash)"
        " WHERE deleted_at IS NULL"
    )
    op.execute("CREATE INDEX memories_tags_gin ON memories USING gin ((metadata -> 'tags'))")
    op.execute(
        f"""
        CREATE TABLE memory_relations (
            id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id       text NOT NULL,
            source_id     uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            target_id     uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            relation_type text NOT NULL CHECK (relation_type IN ({_sql_list(RELATION_TYPES)})),
            metadata      jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            created_at    timestamptz NOT NULL DEFAULT now(),
            UNIQUE (source_id, target_id, relation_type),
            CHECK (source_id <> target_id)
        )
        """
    )
    op.execute("CREATE INDEX memory_relations_target ON memory_relations (target_id)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS memory_relations")
    op.execute("DROP TABLE IF EXISTS memories")
    op.execute("DROP TABLE IF EXISTS wallets")
    op.execute("DROP TABLE IF EXISTS engram_settings")
