"""Engram over real HTTP for tests. `served`: an app object under uvicorn in a thread of the
test process. `start_serve`/`serving`: a real `engram serve` process, started on a free port,
waited for, stopped with SIGTERM and checked to have shut down cleanly (API first, then its
embedded PostgreSQL)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import uvicorn
from litestar import Litestar

ENGRAM = Path(sys.executable).with_name("engram")  # the console script users run
# The first start runs initdb and the migrations; the embedder loads on the first store.
STARTUP_TIMEOUT_S = 90
SHUTDOWN_TIMEOUT_S = 30


def engram_env(data_dir: Path, **extra: str) -> dict[str, str]:
    # Drop the caller's Engram/OpenAI settings: they would pick another database or embedder.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_") and k != "OPENAI_API_KEY"
    }
    return {**env, "ENGRAM_DATA_DIR": str(data_dir), **extra}


def run_engram(
    args: list[str], env: dict[str, str], log: Path, engram: Path = ENGRAM
) -> subprocess.Popen[bytes]:
    # Output goes to a file: the postmaster inherits it and a pipe would never reach EOF.
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(engram), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
        )


# Ports handed to servers a test starts are drawn below the kernel's ephemeral range (Linux:
# 32768-60999): a port the kernel picked (bind to 0) is free now, but until the server binds it
# (seconds later, after initdb and the migrations) any outgoing connection of this machine, a
# database client's or the other xdist worker's, may be given it ("address already in use",
# seen once in CI). Below the range only another explicit bind can take it.
TEST_PORTS = range(20000, 32000)


def free_port() -> int:
    for _ in range(100):
        port = random.choice(TEST_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {TEST_PORTS}")


def postmasters(pgdata: Path) -> list[int]:
    """PIDs of postgres servers started with `-D <pgdata>`."""
    pids = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and "-D" in cmdline:
            target = cmdline[cmdline.index("-D") + 1]
            if Path(target).resolve() == pgdata.resolve():
                pids.append(proc.pid)
    return pids


def start_serve(
    data_dir: Path, log: Path, *extra: str, engram: Path = ENGRAM, **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    """`engram serve` (the test venv's console script, or `engram`) up and answering /health."""
    port = free_port()
    proc = run_engram(
        ["serve", "--port", str(port), *extra], engram_env(data_dir, **env), log, engram
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, STARTUP_TIMEOUT_S, running=lambda: proc.poll() is None)
    except AssertionError as exc:
        proc.kill()
        pytest.fail(f"engram serve: {exc} (exit code {proc.wait()}):\n{log.read_text()}")
    return proc, url


def wait_exit(proc: subprocess.Popen[bytes], timeout: float, failure: Callable[[], str]) -> int:
    """The process's exit code; the test fails (process killed) if it runs past `timeout`."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(failure())


def stop_serve(proc: subprocess.Popen[bytes], data_dir: Path, log: Path) -> None:
    """SIGTERM must shut down the API and then the embedded PostgreSQL, and exit 0."""
    proc.send_signal(signal.SIGTERM)
    returncode = wait_exit(
        proc,
        SHUTDOWN_TIMEOUT_S,
        lambda: f"engram serve ignored SIGTERM for {SHUTDOWN_TIMEOUT_S} s:\n{log.read_text()}",
    )
    output = log.read_text()
    assert returncode == 0, output
    assert "Traceback" not in output, output
    assert postmasters(data_dir / "pgdata") == [], "embedded PostgreSQL left running"
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()


@contextlib.contextmanager
def serving(data_dir: Path, **env: str) -> Iterator[tuple[str, Path]]:
    """(base URL, log file) of an `engram serve` on `data_dir`, stopped (and checked) after."""
    log = data_dir / "serve.log"
    proc, url = start_serve(data_dir, log, **env)
    try:
        yield url, log
    finally:
        stop_serve(proc, data_dir, log)


# Where a paying server's payments would go: nothing reaches it (no proof gets that far).
PAY_TO = "0x" + "2" * 40


@contextlib.contextmanager
def paying_serving(data_dir: Path, database_url: str) -> Iterator[tuple[str, Path]]:
    """`serving` with x402 on and no free calls, so every paid route reads its payment headers,
    and no rate limit in the way of a sweep. Its facilitator is never reached: nothing sent to
    it gets past reading the proof."""
    with serving(
        data_dir, ENGRAM_DATABASE_URL=database_url,
        ENGRAM_RATE_LIMIT_PER_MINUTE="0", ENGRAM_FREE_TIER_CALLS="0",
        ENGRAM_X402_PAY_TO=PAY_TO, ENGRAM_X402_FACILITATOR_URL="http://127.0.0.1:9",
    ) as served:  # fmt: skip
        yield served


@contextlib.contextmanager
def served(app: Litestar, startup_timeout: float = 60) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread (its lifespan and pool live in that thread's loop),
    for clients that need a real HTTP server; yields the base URL."""
    # Bind the socket first and hand it to uvicorn: no one can take the port in between.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, startup_timeout, running=thread.is_alive)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def wait_healthy(url: str, timeout: float = 60, running: Callable[[], bool] = lambda: True) -> None:
    """Until GET /health answers 200 (a start, or a recovery); fails past `timeout`, or at once
    when `running` says the server is gone (its log says why)."""
    deadline = time.monotonic() + timeout
    while True:
        assert running(), f"the server at {url} exited (see its log)"
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"no /health from {url} in {timeout} s"
        time.sleep(0.1)
