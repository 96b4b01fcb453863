"""The compatibility rule on every route that takes a body: unknown fields are ignored (MemoClaw's
API strips them and its clients send extra ones), known fields stay strictly validated.

For each route: a valid body answers the same (status and shape) with unknown fields added at
every level and does the same to the database; a body with one malformed known field is a 4xx
in the contract's error shape and leaves the wallet's rows exactly as they were."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct

from app.asgi import create_app
from app.auth.siwx import origin_of
from app.config import DatabaseSettings, Settings
from tests.support.facts import FACTS
from tests.support.memoclaw_clients import CliClient
from tests.support.team import signed_delegation

BODY_METHODS = {"POST", "PATCH", "PUT"}
UNKNOWN = {"client_version": "1.9.0", "x_unknown": {"nested": [1, "two", None]}}


@dataclass
class Wallet:
    """A fresh wallet with two stored memories, `a` (pinned) and `b`."""

    client: CliClient
    a: str
    b: str


Body = Callable[[Wallet], Any]


def delegation_of(w: Wallet, scopes: list[str]) -> dict[str, Any]:
    """A delegation the wallet signs to a fresh agent key, for the server it talks to."""
    return signed_delegation(w.client.account, Account.create(), scopes,
                             server=origin_of(w.client.base_url))  # fmt: skip


def _session_proof(w: Wallet) -> dict[str, Any]:
    ts = int(time.time())
    message = encode_defunct(text=f"memoclaw-auth:{ts}")
    signature = w.client.account.sign_message(message).signature.hex()
    return {"address": w.client.account.address, "timestamp": ts, "signature": "0x" + signature}


# (method, path) -> (a valid body, the same with one known field malformed)
ROUTES: dict[tuple[str, str], tuple[Body, Body]] = {
    ("POST", "/auth/session"): (
        _session_proof,
        lambda w: {**_session_proof(w), "timestamp": "soon"},
    ),
    ("POST", "/v1/store"): (
        lambda w: {"content": FACTS[5], "metadata": {"tags": ["t"]}, "importance": 0.7},
        lambda w: {"content": FACTS[5], "importance": "high"},
    ),
    ("POST", "/v1/store/batch"): (
        lambda w: {"memories": [{"content": FACTS[5]}, {"content": FACTS[6], "pinned": True}]},
        lambda w: {"memories": [{"content": FACTS[5]}, {"content": FACTS[6], "pinned": "yes"}]},
    ),
    ("POST", "/v1/recall"): (
        lambda w: {"query": "dark mode", "limit": 3, "filters": {"tags": ["x"], "pinned": True}},
        lambda w: {"query": "dark mode", "limit": 0},
    ),
    ("POST", "/v1/search"): (
        lambda w: {"query": "dark", "limit": 5},
        lambda w: {"query": "dark", "limit": "five"},
    ),
    ("PATCH", "/v1/memories/{memory_id:str}"): (
        lambda w: {"importance": 0.9, "pinned": False},
        lambda w: {"importance": 0.9, "pinned": "no"},
    ),
    ("PATCH", "/v1/memories/batch"): (
        lambda w: {"updates": [{"id": w.b, "importance": 0.4}]},
        lambda w: {"updates": [{"id": w.b, "importance": 4}]},
    ),
    ("POST", "/v1/memories/bulk-delete"): (
        lambda w: {"ids": [w.b]},
        lambda w: {"ids": w.b},
    ),
    ("POST", "/v1/memories/extract"): (
        lambda w: {"messages": [{"role": "user", "content": "My dog is called Rex."}]},
        lambda w: {"messages": [{"role": "user", "content": 42}]},
    ),
    ("POST", "/v1/ingest"): (
        lambda w: {"text": "I moved to Lisbon in March.", "auto_relate": True},
        lambda w: {"text": "I moved to Lisbon in March.", "auto_relate": "sure"},
    ),
    ("POST", "/v1/migrate"): (
        lambda w: {"files": [{"filename": "a.md", "content": "# A\n\nTomatoes need sun."}]},
        lambda w: {"files": [{"filename": "a.md", "content": ["# A"]}]},
    ),
    ("POST", "/v1/memories/consolidate"): (
        lambda w: {"min_similarity": 0.9},
        lambda w: {"min_similarity": 0.1},
    ),
    ("POST", "/v1/context"): (
        lambda w: {"query": "dark mode", "max_memories": 2, "format": "structured"},
        lambda w: {"query": "dark mode", "format": "yaml"},
    ),
    ("POST", "/v1/memories/{memory_id:str}/relations"): (
        lambda w: {"target_id": w.b, "relation_type": "supports", "metadata": {"why": "x"}},
        lambda w: {"target_id": w.b, "relation_type": "likes"},
    ),
    ("POST", "/v1/memories/{memory_id:str}/feedback"): (
        lambda w: {"helpful": True},
        lambda w: {"helpful": "yes"},
    ),
    ("POST", "/v1/memories/core"): (
        lambda w: {"memory_id": w.b},
        lambda w: {"memory_id": 7},
    ),
    ("POST", "/v1/grants"): (
        lambda w: {"grantee": Account.create().address, "namespace": "team", "access": "read"},
        lambda w: {"grantee": Account.create().address, "namespace": "team", "access": "admin"},
    ),
    ("POST", "/v1/agents"): (
        lambda w: delegation_of(w, ["read"]),
        lambda w: {**delegation_of(w, ["read"]), "scopes": ["admin"]},
    ),
    ("PUT", "/v1/namespaces/{namespace:str}/guard"): (
        lambda w: {"mode": "review"},
        lambda w: {"mode": "block"},
    ),
    ("POST", "/v1/import"): (
        lambda w: {"format": "json", "memories": [{"content": FACTS[7], "access_count": 3}]},
        lambda w: {"format": "json", "memories": [{"content": FACTS[7], "access_count": -3}]},
    ),
}
ROUTE_IDS = [f"{method} {path}" for method, path in sorted(ROUTES)]
# Routes that answer on several paths with one handler, and the path their entry is under.
SAME_HANDLER = {
    ("PATCH", "/v1/memories/batch-update"): ("PATCH", "/v1/memories/batch"),
    ("POST", "/v1/memories/batch"): ("PATCH", "/v1/memories/batch"),
    ("POST", "/v1/memories/batch-update"): ("PATCH", "/v1/memories/batch"),
    ("POST", "/v1/memories/batch-delete"): ("POST", "/v1/memories/bulk-delete"),
    ("POST", "/v1/core"): ("POST", "/v1/memories/core"),
    ("POST", "/v1/core-memories"): ("POST", "/v1/memories/core"),
}


def body_routes() -> list[tuple[str, str]]:
    """(method, path template) of every route whose handler reads a body: the API's, not the
    console's (its own pages' forms and sign-in, signed in by cookie: tests/console checks the
    same rule there, test_unknown_fields_are_ignored in test_pages.py and test_sign_in.py)."""
    app = create_app(Settings(database=DatabaseSettings(url="postgresql://unused/unused")))
    found = set()
    for route in app.routes:
        if route.path.startswith("/console"):
            continue
        for handler in getattr(route, "route_handlers", []):
            if "data" in handler.parsed_fn_signature.parameters:
                found.update((m, route.path) for m in handler.http_methods & BODY_METHODS)
    return sorted(found)


def test_every_body_route_is_covered() -> None:
    routes = body_routes()
    assert len(routes) >= 20, routes
    assert set(routes) == set(ROUTES) | set(SAME_HANDLER), set(routes) ^ (
        set(ROUTES) | set(SAME_HANDLER)
    )


def with_unknown_fields(body: Any, under_metadata: bool = False) -> Any:
    """`body` with UNKNOWN added to every object in it, except user metadata (free-form)."""
    if isinstance(body, dict) and not under_metadata:
        return {
            **{k: with_unknown_fields(v, k == "metadata") for k, v in body.items()},
            **UNKNOWN,
        }
    if isinstance(body, list):
        return [with_unknown_fields(v) for v in body]
    return body


def shape(value: Any) -> Any:
    """What a client's parser sees of an answer: keys and kinds, not values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


async def _state(database_url: str, wallet: str) -> tuple[Any, ...]:
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            """SELECT (SELECT count(*) FROM memories WHERE user_id = $1) AS memories,
                      (SELECT max(updated_at) FROM memories WHERE user_id = $1) AS updated,
                      (SELECT count(*) FROM memories WHERE user_id = $1 AND pinned) AS pinned,
                      (SELECT count(*) FROM memory_relations WHERE user_id = $1) AS relations,
                      (SELECT count(*) FROM memory_history WHERE user_id = $1) AS history""",
            wallet.lower(),
        )
        return tuple(row)
    finally:
        await conn.close()


def state(database_url: str, w: Wallet) -> tuple[Any, ...]:
    """Rows of the wallet's memories, pinned ones, relations, history, and its last update."""
    return asyncio.run(_state(database_url, w.client.account.address))


def counts(database_url: str, w: Wallet) -> tuple[Any, ...]:
    """The wallet's state without its last update time (two wallets differ there)."""
    memories, _, *rest = state(database_url, w)
    return (memories, *rest)


@pytest.fixture
def new_wallet(engram_url: str) -> Iterator[Callable[[], Wallet]]:
    clients: list[CliClient] = []

    def make() -> Wallet:
        client = CliClient(engram_url)
        clients.append(client)
        stored = client.ok("POST", "/v1/store/batch", {"memories": [
            {"content": FACTS[0], "pinned": True}, {"content": FACTS[1]},
        ]})["ids"]  # fmt: skip
        return Wallet(client, stored[0], stored[1])

    yield make
    for client in clients:
        client.close()


def _send(w: Wallet, method: str, template: str, body: Any) -> Any:
    path = re.sub(r"\{[^}]+\}", w.a, template)
    return w.client.request(method, path, body)


@pytest.mark.parametrize(("method", "template"), sorted(ROUTES), ids=ROUTE_IDS)
def test_unknown_fields_change_nothing(
    new_wallet: Callable[[], Wallet], database_url: str, method: str, template: str
) -> None:
    valid, _ = ROUTES[(method, template)]
    plain, extra = new_wallet(), new_wallet()
    answer = _send(plain, method, template, valid(plain))
    assert 200 <= answer.status_code < 300, (answer.status_code, answer.text)
    with_extra = _send(extra, method, template, with_unknown_fields(valid(extra)))
    assert with_extra.status_code == answer.status_code, with_extra.text
    assert shape(with_extra.json()) == shape(answer.json())
    # the same rows were written, and nothing of the unknown fields was kept
    assert counts(database_url, extra) == counts(database_url, plain)
    assert "x_unknown" not in extra.client.request("GET", "/v1/export").text


@pytest.mark.parametrize(("method", "template"), sorted(ROUTES), ids=ROUTE_IDS)
def test_malformed_known_field_is_4xx_and_stores_nothing(
    new_wallet: Callable[[], Wallet], database_url: str, method: str, template: str
) -> None:
    _, malformed = ROUTES[(method, template)]
    w = new_wallet()
    before = state(database_url, w)
    r = _send(w, method, template, with_unknown_fields(malformed(w)))
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and error["message"], error
    assert state(database_url, w) == before
