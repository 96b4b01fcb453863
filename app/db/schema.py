"""Bring a database to the current schema (Alembic) and check it fits this configuration."""

from __future__ import annotations

import asyncpg
from alembic.config import Config

from alembic import command
from app.db import settings_repository
from app.infra.project_files import shipped

MIN_PGVECTOR = (0, 8)


class SchemaError(RuntimeError):
    """The database cannot serve this configuration; the message says how to fix it."""


def alembic_config(database_url: str, embed_dims: int, embed_model: str) -> Config:
    cfg = Config(str(shipped("alembic.ini")))
    cfg.set_main_option("script_location", str(shipped("alembic")))
    cfg.attributes["database_url"] = database_url
    cfg.attributes["embed_dims"] = embed_dims
    cfg.attributes["embed_model"] = embed_model
    cfg.attributes["configure_logger"] = False
    return cfg


def upgrade_to_head(database_url: str, embed_dims: int, embed_model: str) -> None:
    """`alembic upgrade head`; synchronous (Alembic runs its own event loop): call it off-loop."""
    command.upgrade(alembic_config(database_url, embed_dims, embed_model), "head")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


async def check_pgvector(conn: asyncpg.Connection) -> None:
    available = await settings_repository.pgvector_available_version(conn)
    if available is None:
        raise SchemaError(
            "This PostgreSQL has no pgvector extension. Install pgvector >= 0.8 on it, or unset"
            " ENGRAM_DATABASE_URL to use Engram's embedded PostgreSQL (pgvector included)."
        )
    if _version_tuple(available) < MIN_PGVECTOR:
        raise SchemaError(
            f"pgvector {available} is too old: Engram needs >= 0.8 (iterative index scans)."
            " Upgrade the extension (ALTER EXTENSION vector UPDATE) or use the embedded database."
        )


async def check_embedding_dims(conn: asyncpg.Connection, embedder_dims: int, model: str) -> None:
    stored = await settings_repository.embedding_dims(conn)
    if stored is None:
        raise SchemaError("The database has no Engram schema: run `engram migrate` first.")
    if stored != embedder_dims:
        raise SchemaError(
            f"The database stores {stored}-dimension embeddings but the configured embedder"
            f" ({model}) produces {embedder_dims}. The dimension is fixed per database: set"
            f" ENGRAM_EMBED_DIMS={stored} with an embedder that supports it, or point"
            " ENGRAM_DATABASE_URL (or ENGRAM_DATA_DIR) at a fresh database."
        )


async def check_embedding_model(conn: asyncpg.Connection, model: str) -> None:
    """The configured embedder is the one the stored vectors come from: vectors of two models
    are not comparable, so a switch re-embeds (`engram reembed`), never silently. A database
    with no vector of another model simply records the configured one."""
    recorded = await settings_repository.recorded_embedding_model(conn)
    if recorded != model and await settings_repository.embedded_otherwise(conn, model):
        raise SchemaError(
            f"The database's memories were embedded with {recorded}, but the configured"
            f" embedder is {model}: their vectors are not comparable. Run `engram reembed` to"
            f" re-embed every memory with {model}, or configure {recorded} again."
        )
    await settings_repository.record_embedding_model(conn, model)  # older databases: recorded now
