"""Configured parts are real: an OpenAI-compatible embeddings endpoint at 512 dimensions serves
store and recall end to end, in a database created for that dimension; a PostgreSQL without
pgvector is refused with a clear message."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

from litestar.testing import AsyncTestClient

from app.db.schema import upgrade_to_head
from tests.support.api import auth, store_memory
from tests.support.db import create_database
from tests.support.openai_wire import OpenAICompatibleServer

PROJECT = Path(__file__).resolve().parents[2]


async def test_openai_compatible_endpoint_end_to_end(make_app, database_url, wallet) -> None:
    url = await create_database(database_url, f"engram512_{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(upgrade_to_head, url, 512, "text-embedding-3-small")
    with OpenAICompatibleServer() as endpoint:
        app = make_app(database={"url": url}, embedder={"base_url": endpoint.base_url})
        async with AsyncTestClient(app=app) as client:
            h = auth(wallet)
            for content in ("the cat sleeps on the red sofa", "invoices are due in thirty days"):
                stored = await store_memory(client, wallet, content)
                assert stored["tokens_used"] > 0
                assert stored["memory"]["embedding_model"] == "text-embedding-3-small"
            r = await client.post("/v1/recall", json={"query": "when are invoices due"}, headers=h)
            assert r.json()["memories"][0]["content"] == "invoices are due in thirty days"
            assert (await client.get("/health")).json()["embedder"]["dims"] == 512
    bodies = [req["body"] for req in endpoint.requests]
    assert bodies and all(b["encoding_format"] == "float" for b in bodies)
    assert all(b["dimensions"] == 512 and b["model"] == "text-embedding-3-small" for b in bodies)


def test_postgres_without_pgvector_is_refused_clearly(tmp_path: Path) -> None:
    """The machine's system PostgreSQL 15 has no pgvector (docs/api-contract.md, "Measurements
    the code cites")."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["ENGRAM_DATABASE_URL"] = os.environ.get(
        "ENGRAM_TEST_PLAIN_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        done = subprocess.run(
            [sys.executable, "-m", "app", "migrate"],
            cwd=PROJECT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    text = out.read_text()
    assert done.returncode != 0, text
    assert "no pgvector extension" in text and "ENGRAM_DATABASE_URL" in text, text
    assert "Traceback" not in text, text
