"""The console's namespace list: the names of the namespaces holding a live memory, in order,
read by a skip scan (repository/reads.py namespace_names)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from app.memory.repository import reads
from tests.support.api import auth, store_memory


async def test_live_namespaces_only_in_order(
    client: AsyncTestClient, wallet: LocalAccount, other_wallet: LocalAccount, database_url: str
) -> None:
    await store_memory(client, wallet, "Zebra facts live here", namespace="zoo")
    await store_memory(client, wallet, "Alpha facts live here", namespace="alpha")
    await store_memory(client, wallet, "Another alpha fact, about tea", namespace="alpha")
    gone = await store_memory(client, wallet, "Deleted namespace content", namespace="deleted")
    await client.delete(f"/v1/memories/{gone['id']}", headers=auth(wallet))
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    await store_memory(client, wallet, "Expiring namespace content", namespace="expired",
                       expires_at=soon)  # fmt: skip
    await store_memory(client, other_wallet, "Someone else's namespace", namespace="beta")
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE memories SET expires_at = now() - interval '1 s'"
            " WHERE user_id = $1 AND namespace = 'expired'",
            wallet.address.lower(),
        )
        names = await reads.namespace_names(conn, wallet.address.lower())
        counted = [r["name"] for r in await reads.namespaces(conn, wallet.address.lower())]
    finally:
        await conn.close()
    assert names == ["alpha", "zoo"]
    assert sorted(counted) == names  # the same namespaces the counting query lists
