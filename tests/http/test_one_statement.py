"""Free routes that run one SQL statement run it as its own transaction: no BEGIN, no COMMIT
(app/http/transaction.py, `one_statement`), and a paid route always gets a transaction."""

from __future__ import annotations

from litestar import Litestar, get
from litestar.testing import AsyncTestClient

from app.core.contract import RECALL
from app.http.markers import (
    ONE_STATEMENT_OPT_KEY,
    one_statement,
    paid,
    price_of,
    runs_as_one_statement,
)
from tests.support.api import auth, store_memory

# The gate's note of the free calls left may read the wallet row first: a read of its own.
FREE_CALLS_READ = "FROM wallets WHERE address"


def _statements_of(logged: list[str]) -> list[str]:
    return [q for q in logged if FREE_CALLS_READ not in q]


async def test_list_count_and_read_by_id_each_run_one_statement_and_no_begin(
    make_app, wallet
) -> None:
    app = make_app(database={"pool_min": 1, "pool_max": 1})  # one connection: one logger sees all
    logged: list[str] = []
    async with AsyncTestClient(app=app) as client:
        async with app.state.pool.acquire() as conn:
            conn.add_query_logger(lambda record: logged.append(record.query))
        stored = await store_memory(client, wallet, "the harbour ferry leaves at seven")
        memory_id = stored["id"]
        h = auth(wallet)
        for path in ("/v1/memories?limit=5", "/v1/memories/count", f"/v1/memories/{memory_id}"):
            logged.clear()
            r = await client.get(path, headers=h)
            assert r.status_code == 200, r.text
            ran = _statements_of(logged)
            assert len(ran) == 1, (path, ran)
            assert not any(q.strip().rstrip(";").upper() in ("BEGIN", "COMMIT") for q in ran)
        # the read by id counted its access, committed by the statement itself
        assert r.json()["access_count"] == 1
        logged.clear()
        missing = await client.get("/v1/memories/00000000-0000-4000-8000-000000000000", headers=h)
        assert missing.status_code == 404
        assert len(_statements_of(logged)) == 1
        # a paid route keeps its transaction
        logged.clear()
        r = await client.post("/v1/recall", json={"query": "ferry"}, headers=h)
        assert r.status_code == 200, r.text
        assert any(q.strip().upper().startswith("BEGIN") for q in logged), logged


def test_a_paid_route_that_declares_one_statement_still_gets_a_transaction() -> None:
    @get("/free", opt=one_statement())
    async def free() -> None: ...

    @get("/paid", opt={**one_statement(), **paid(RECALL)})
    async def charged() -> None: ...

    assert runs_as_one_statement(free)
    assert not runs_as_one_statement(charged)


def test_every_route_that_declares_one_statement_is_free(app: Litestar) -> None:
    declared = [
        h
        for route in app.routes
        for h in getattr(route, "route_handlers", [])
        if h.opt.get(ONE_STATEMENT_OPT_KEY)
    ]
    assert declared, "list, count and read by id declare one statement"
    assert all(price_of(h) is None for h in declared), [h.handler_name for h in declared]
