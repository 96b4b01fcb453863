"""Observability (issue 21, point 1): Prometheus metrics at /metrics, one JSON log line per
request that never holds a secret, /ready beside a cheap /health.

In process: each metric moves with the requests that should move it (deltas: the test process
keeps one registry for all its apps). Through a real `engram serve --dev-chain`: a full flow
(session token, free calls, a 402 paid with x402's reference client, recall) leaves JSON request
lines with the request id, route template, status, duration and a short wallet hash, counts
verifications and settlements, and none of the flow's keys, signatures, payment headers, token
or memory content anywhere in the log."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_account.messages import encode_defunct
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

from app.auth.signature import auth_message
from app.dev.mode import DEMO_WALLET_KEY
from tests.support.api import auth
from tests.support.server import start_serve, stop_serve
from tests.support.x402 import reference_payment


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(client: Any) -> dict[Any, float]:
    r = await client.get("/metrics")  # no identity: it is public, like /health
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


async def test_metrics_follow_the_requests(make_app) -> None:
    wallet = Account.create()
    async with AsyncTestClient(app=make_app(limits={"rate_limit_per_minute": 5})) as client:
        before = await scrape(client)
        r = await client.post("/v1/store", headers=auth(wallet),
                              json={"content": "The night build runs at 02:00 UTC"})  # fmt: skip
        assert r.status_code == 201
        for _ in range(2):  # the second recall's query embedding comes from the cache
            r = await client.post("/v1/recall", headers=auth(wallet),
                                  json={"query": "when does the night build run"})  # fmt: skip
            assert r.status_code == 200
        assert (
            await client.get("/v1/memories", headers={"x-wallet-auth": "bad"})
        ).status_code == 401
        limited = [await client.get("/v1/memories", headers=auth(wallet)) for _ in range(3)]
        assert limited[-1].status_code == 429, [r.status_code for r in limited]
        after = await scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("engram_requests_total", route="/v1/store", method="POST", status="201") == 1
    assert moved("engram_requests_total", route="/v1/recall", method="POST", status="200") == 2
    assert moved("engram_requests_total", route="/v1/memories", method="GET", status="401") == 1
    assert moved("engram_requests_total", route="/v1/memories", method="GET", status="429") >= 1
    assert moved("engram_request_duration_seconds_count", route="/v1/recall", method="POST") == 2
    for phase in ("embed", "sql", "scoring"):
        assert moved("engram_phase_duration_seconds_count", operation="recall", phase=phase) >= 2
    for phase in ("embed", "sql"):
        assert moved("engram_phase_duration_seconds_count", operation="store", phase=phase) == 1
    assert moved("engram_embedding_cache_lookups_total", result="hit") >= 1
    assert moved("engram_embedding_cache_lookups_total", result="miss") >= 2
    assert moved("engram_free_calls_total") == 3  # the store and the two recalls
    assert moved("engram_rate_limited_total", limit="overall") >= 1
    # the pool's gauges: nothing held or waited for between requests
    assert value(after, "engram_db_pool_in_use") >= 0
    assert value(after, "engram_db_pool_waiting") == 0
    assert not [k for k in after if "0x" in str(k)], "a label carries a wallet"


async def test_ready_names_what_is_not_ready_and_health_stays_cheap(make_app) -> None:
    async with AsyncTestClient(app=make_app()) as client:
        for _ in range(100):  # the local model loads in the background as the app starts
            r = await client.get("/ready")
            if r.status_code == 200:
                break
            assert r.status_code == 503 and r.json()["error"]["details"]["embedder"] == "loading"
            await asyncio.sleep(0.1)
        assert r.json() == {"ready": True, "database": "ok", "redis": "not configured",
                            "embedder": "ok"}  # fmt: skip
    down = make_app(database={"redis_url": "redis://127.0.0.1:1/0"})
    async with AsyncTestClient(app=down) as client:
        r = await client.get("/ready")
        assert r.status_code == 503, r.text
        details = r.json()["error"]["details"]
        assert details["database"] == "ok" and details["redis"].startswith("unreachable")
        assert r.headers["retry-after"]


def json_lines(log: Path) -> list[dict[str, Any]]:
    """The log's JSON lines (the embedded PostgreSQL and anvil write plain lines beside them)."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def test_a_paid_flow_logs_one_json_line_per_request_and_no_secret(
    tmp_path: Path, database_url: str
) -> None:
    data, log = tmp_path / "serve", tmp_path / "serve.log"
    proc, url = start_serve(data, log, "--dev-chain", ENGRAM_DATABASE_URL=database_url)
    wallet, payer = Account.create(), Account.from_key(DEMO_WALLET_KEY)
    content = "The vault combination is 31-17-44 " + wallet.address[-6:]
    query = "what opens the vault " + wallet.address[-6:]
    secrets: dict[str, str] = {}
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            headers = auth(wallet)
            secrets["x-wallet-auth"] = headers["x-wallet-auth"]
            secrets["its signature"] = headers["x-wallet-auth"].rsplit(":", 1)[1][-40:]
            r = await http.post("/auth/session", json=session_body(wallet))
            assert r.status_code == 200, r.text
            secrets["session token"] = r.json()["token"]
            bearer = {"authorization": f"Bearer {secrets['session token']}"}
            for n in range(3):  # the dev chain's free tier
                r = await http.post("/v1/store", headers=headers,
                                    json={"content": f"{content} (note {n})"})  # fmt: skip
                assert r.status_code == 201, r.text
            r = await http.post("/v1/store", headers=bearer, json={"content": content})
            assert r.status_code == 402, r.text
            payment = await reference_payment(payer, r)
            for name, header in payment.items():
                secrets[f"payment header {name}"] = header
                secrets[f"payment header {name} (part)"] = header[40:80]
            r = await http.post("/v1/store", headers={**bearer, **payment},
                                json={"content": content})  # fmt: skip
            assert r.status_code == 201, r.text
            request_id = r.headers["x-request-id"]
            r = await http.post("/v1/recall", headers=headers, json={"query": query})
            assert r.status_code in (200, 402), r.text
            found = samples((await http.get("/metrics")).text)
    finally:
        stop_serve(proc, data, log)
    assert value(found, "engram_x402_verifications_total", outcome="valid") >= 1
    assert value(found, "engram_x402_settlements_total", outcome="settled") >= 1
    assert value(found, "engram_x402_settle_duration_seconds_count") >= 1
    assert value(found, "engram_free_calls_total") >= 3

    # --dev-chain announces its demo wallet's key on purpose (anvil's public test key), once
    text = "\n".join(line for line in log.read_text().splitlines()
                     if not line.startswith("  demo wallet "))  # fmt: skip
    for key in (wallet.key.hex(), DEMO_WALLET_KEY):
        secrets[f"private key {key[:6]}"] = key.removeprefix("0x")
    secrets["memory content"] = "31-17-44"
    secrets["recall query"] = query
    leaked = [name for name, secret in secrets.items() if secret in text]
    assert not leaked, f"the log holds: {leaked}"

    lines = [line for line in json_lines(log) if line.get("message") == "request"]
    wallet_hash = hashlib.sha256(wallet.address.lower().encode()).hexdigest()[:12]
    stores = [line for line in lines if line["route"] == "/v1/store"]
    assert [line["status"] for line in stores] == [201, 201, 201, 402, 201], stores
    paid = next(line for line in stores if line["request_id"] == request_id)
    assert paid["paid"] is True and paid["wallet"] == wallet_hash and paid["method"] == "POST"
    assert all(isinstance(line["duration_ms"], float | int) for line in lines)
    assert all(set(line) >= {"ts", "level", "logger", "request_id", "status"} for line in lines)


def session_body(wallet: Any) -> dict[str, Any]:
    """POST /auth/session's body: the wallet's signature over memoclaw-auth:{now}."""
    ts = int(time.time())
    signature = wallet.sign_message(encode_defunct(text=auth_message(ts))).signature.hex()
    return {"address": wallet.address, "timestamp": ts, "signature": signature}
