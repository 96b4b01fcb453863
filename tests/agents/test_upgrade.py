"""Team memory's migrations (0008 keys and versions, 0009 grants and history's actor, 0010
delegations) upgrade a database that already holds memories and their history; afterwards the
old memory is shared by a grant and reached by an agent key, and its history reads as before.
0015 (issued-at, cancelled nonces, namespaces in NFC) upgrades one holding delegations, and
comes down again."""

from __future__ import annotations

import asyncio
import unicodedata
import uuid

import asyncpg
from eth_account import Account
from litestar.testing import AsyncTestClient

from alembic import command
from app.config import LOCAL_EMBED_DIMS
from app.db.schema import alembic_config, upgrade_to_head
from tests.support.api import auth
from tests.support.db import create_database
from tests.support.team import as_agent, as_grantee, delegate, grant, signed_delegation

MODEL = "all-MiniLM-L6-v2"


async def test_team_migrations_upgrade_a_database_with_memories_and_history(
    make_app, database_url: str
) -> None:
    url = await create_database(database_url, f"engram_team_{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(command.upgrade, alembic_config(url, LOCAL_EMBED_DIMS, MODEL), "0007")
    owner, teammate, agent = Account.create(), Account.create(), Account.create()
    conn = await asyncpg.connect(url)
    try:
        vector = "[" + ",".join(["0.05"] * LOCAL_EMBED_DIMS) + "]"
        memory_id = await conn.fetchval(
            """INSERT INTO memories (user_id, namespace, content, content_hash, embedding,
                                     embedding_model)
               VALUES ($1, 'team', 'the on-call rota changes on Mondays', sha256('r'::bytea),
                       $2::vector, $3) RETURNING id""",
            owner.address.lower(), vector, MODEL,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO memory_history (user_id, memory_id, action, changes)"
            """ VALUES ($1, $2, 'create', '{"content": {"after": "x"}}')""",
            owner.address.lower(), memory_id,
        )  # fmt: skip
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, url, LOCAL_EMBED_DIMS, MODEL)
    async with AsyncTestClient(app=make_app(database={"url": url})) as client:
        r = await client.get(f"/v1/memories/{memory_id}/history", headers=auth(owner))
        assert r.status_code == 200, r.text
        assert [("actor" in e, e["action"]) for e in r.json()["history"]] == [(False, "create")]
        await grant(client, owner, teammate, "read", "team")
        r = await client.get(f"/v1/memories/{memory_id}", headers=as_grantee(teammate, owner))
        assert r.status_code == 200 and r.json()["version"] == 1
        await delegate(client, owner, agent, ["write"], ["team"])
        r = await client.patch(f"/v1/memories/{memory_id}", headers=as_agent(agent, owner),
                               json={"content": "the on-call rota changes on Tuesdays"})  # fmt: skip
        assert r.status_code == 200 and r.json()["version"] == 2
        r = await client.get(f"/v1/memories/{memory_id}/history", headers=auth(owner))
        assert [e.get("actor") for e in r.json()["history"]] == [None, agent.address.lower()]


async def test_delegations_upgrade_to_issued_at_and_nfc_and_come_down(
    make_app, database_url: str
) -> None:
    url = await create_database(database_url, f"engram_deleg_{uuid.uuid4().hex[:8]}")
    config = alembic_config(url, LOCAL_EMBED_DIMS, MODEL)
    await asyncio.to_thread(command.upgrade, config, "0014")
    owner, agent = Account.create(), Account.create()
    decomposed = unicodedata.normalize("NFD", "café")
    conn = await asyncpg.connect(url)
    try:  # registered before 0015: namespaces as the owner wrote them, no issued-at
        created = await conn.fetchval(
            """INSERT INTO delegations (owner, agent, scopes, namespaces, nonce, signature)
               VALUES ($1, $2, '{write}', $3, 'n0nce-before', '0x00') RETURNING created_at""",
            owner.address.lower(), agent.address.lower(), [decomposed],
        )  # fmt: skip
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, url, LOCAL_EMBED_DIMS, MODEL)
    async with AsyncTestClient(app=make_app(database={"url": url})) as client:
        r = await client.get("/v1/agents", headers=auth(owner))
        [key] = r.json()["given"]
        assert key["namespaces"] == [unicodedata.normalize("NFC", "café")]
        assert key["issued_at"] == created.isoformat().replace("+00:00", "Z")
        r = await client.post("/v1/store", headers=as_agent(agent, owner),
                              json={"content": "Oat milk is on the top shelf", "namespace": "café"})  # fmt: skip
        assert r.status_code == 201, r.text
        # a delegation signed before it was registered (issued earlier) does not replace it
        older = signed_delegation(owner, agent, ["read", "write"],
                                  issued_at="2026-01-01T00:00:00Z")  # fmt: skip
        assert (await client.post("/v1/agents", json=older, headers=auth(owner))).status_code == 409
    await asyncio.to_thread(command.downgrade, config, "0014")
    conn = await asyncpg.connect(url)
    try:
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'delegations'"
        )
        assert "issued_at" not in {c["column_name"] for c in columns}
        assert await conn.fetchval("SELECT to_regclass('delegation_cancels')") is None
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, url, LOCAL_EMBED_DIMS, MODEL)
