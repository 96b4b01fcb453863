"""`engram serve` with no database configured really starts an embedded PostgreSQL, serves, stops
it on SIGTERM and keeps the data for the next start; a mismatched embedder config fails fast."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from eth_account import Account
from prometheus_client.parser import text_string_to_metric_families

from app.auth.signature import sign_header
from app.db.embedded import EmbeddedPostgres
from tests.support.server import (
    STARTUP_TIMEOUT_S,
    engram_env,
    postmasters,
    run_engram,
    start_serve,
    stop_serve,
    wait_exit,
)

FAIL_FAST_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("engram-serve")
    try:
        yield path
    finally:
        # Safety net for a failed test: never leave a postgres running on a deleted tmp dir.
        EmbeddedPostgres(path / "pgdata").stop()


def signed(key: str) -> dict[str, str]:
    return {"x-wallet-auth": sign_header(key)}


def test_serve_stores_recalls_stops_cleanly_and_keeps_data(data_dir: Path) -> None:
    key = Account.create().key.hex()
    content = "The embedded database keeps this memory across restarts"

    proc, url = start_serve(data_dir, data_dir / "serve-1.log")
    try:
        assert postmasters(data_dir / "pgdata"), "serve did not start the embedded PostgreSQL"
        r = httpx.post(
            f"{url}/v1/store", json={"content": content}, headers=signed(key), timeout=60
        )
        assert r.status_code == 201, r.text
        memory_id = r.json()["id"]
        r = httpx.post(
            f"{url}/v1/recall",
            json={"query": "what survives a restart?"},
            headers=signed(key),
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert [m["id"] for m in r.json()["memories"]] == [memory_id]
    finally:
        stop_serve(proc, data_dir, data_dir / "serve-1.log")

    # Same data dir: no initdb, the same database, the memory and its vector still there.
    proc, url = start_serve(data_dir, data_dir / "serve-2.log")
    try:
        r = httpx.get(f"{url}/v1/memories/{memory_id}", headers=signed(key), timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["content"] == content
        r = httpx.post(
            f"{url}/v1/recall",
            json={"query": "what survives a restart?"},
            headers=signed(key),
            timeout=60,
        )
        assert [m["id"] for m in r.json()["memories"]] == [memory_id]
    finally:
        stop_serve(proc, data_dir, data_dir / "serve-2.log")


def test_serve_with_two_workers(tmp_path: Path) -> None:
    """--workers 2: two worker processes share the port and the one embedded PostgreSQL."""
    models = tmp_path / "models"
    proc, url = start_serve(
        tmp_path, tmp_path / "workers.log", "--workers", "2", ENGRAM_MODEL_CACHE=str(models)
    )
    try:
        # serve built the int8 embedding model before listening: no request waits for it
        assert len(list(models.glob("*.onnx"))) == 1
        workers = [
            child
            for child in psutil.Process(proc.pid).children(recursive=True)
            if child.name() != "postgres"
        ]
        assert len(workers) >= 2, workers
        key = Account.create().key.hex()
        ids = []
        notes = [
            "The blue kettle whistles too loudly in the morning",
            "Maria borrowed the blue kettle for the camping trip",
            "Descale the blue kettle every second month",
            "The blue kettle came from the flea market in Ghent",
        ]
        for note in notes:  # new connections: uvicorn's workers take turns accepting them
            r = httpx.post(
                f"{url}/v1/store",
                json={"content": note},
                headers=signed(key),
                timeout=60,
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        r = httpx.post(
            f"{url}/v1/recall",
            json={"query": "blue kettle", "limit": 10},
            headers=signed(key),
            timeout=60,
        )
        assert sorted(m["id"] for m in r.json()["memories"]) == sorted(ids)
        r = httpx.get(f"{url}/v1/free-tier/status", headers=signed(key), timeout=60)
        assert r.json()["free_tier_used"] == 5  # one count across workers
        # /metrics, from whichever worker answers, adds up every worker's samples
        for _ in range(4):
            found = {(s.name, tuple(sorted(s.labels.items()))): s.value
                     for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)
                     for s in f.samples}  # fmt: skip
            stores = ("engram_requests_total",
                      (("method", "POST"), ("route", "/v1/store"), ("status", "201")))  # fmt: skip
            assert found[stores] == 4 and found[("engram_free_calls_total", ())] == 5
    finally:
        stop_serve(proc, tmp_path, tmp_path / "workers.log")


@pytest.mark.parametrize("command", [["migrate"], ["serve", "--port", "0"]])
def test_embedding_dimension_mismatch_fails_fast(data_dir: Path, command: list[str]) -> None:
    # The data dir holds a 384-dimension schema (the local embedder's), whichever test ran first.
    ready = run_engram(["migrate"], engram_env(data_dir), data_dir / "migrate.log")
    assert ready.wait(timeout=STARTUP_TIMEOUT_S) == 0, (data_dir / "migrate.log").read_text()

    # A remote 512-dimension embedder (port 9 is discard: it must never be called).
    log = data_dir / f"mismatch-{command[0]}.log"
    env = engram_env(
        data_dir, ENGRAM_EMBED_DIMS="512", ENGRAM_EMBED_BASE_URL="http://127.0.0.1:9/v1"
    )
    started = time.monotonic()
    proc = run_engram(command, env, log)
    returncode = wait_exit(
        proc,
        FAIL_FAST_TIMEOUT_S,
        lambda: f"engram {command[0]} did not fail within {FAIL_FAST_TIMEOUT_S} s",
    )
    output = log.read_text()
    assert returncode != 0, output
    assert time.monotonic() - started < FAIL_FAST_TIMEOUT_S
    # The message names both dimensions and the two ways out.
    assert "stores 384-dimension embeddings" in output and "produces 512" in output, output
    assert "ENGRAM_EMBED_DIMS=384" in output and "fresh database" in output, output
    assert "Traceback" not in output, output
    assert postmasters(data_dir / "pgdata") == [], "embedded PostgreSQL left running"


def test_dev_chain_example_agent_pays_offline(tmp_path: Path) -> None:
    """README: `engram serve --dev-chain`, then the example agent spends its free tier, meets
    the 402, pays it with x402's reference client and prints the transaction of its paid call."""
    data = tmp_path / "dev"
    log = tmp_path / "serve.log"
    proc, url = start_serve(data, log, "--dev-chain")
    try:
        out = tmp_path / "agent.log"
        with out.open("w") as sink:
            done = subprocess.run(
                [sys.executable, "-m", "app.dev.paying_agent", "--url", url],
                stdout=sink, stderr=subprocess.STDOUT, timeout=120, env=engram_env(data),
            )  # fmt: skip
        text = out.read_text()
        assert done.returncode == 0, text
        assert text.count("on the free tier") == 3, text
        assert "402 on /v1/store" in text, text
        assert re.search(r"paid store: memory [0-9a-f-]{36} stored; tx 0x[0-9a-f]{64}", text), text
        assert "recall: The production build is green" in text, text
    finally:
        stop_serve(proc, data, log)
    rpc = re.search(r"anvil at (http://127\.0\.0\.1:\d+)", log.read_text())
    assert rpc, log.read_text()
    with pytest.raises(httpx.TransportError):  # the dev chain stopped with the server
        httpx.post(rpc.group(1), json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"})
