"""Parts a test can take down and bring back: a redis-server and an embedded PostgreSQL, each on
a private port the test chose, so stopping them touches nothing else on the machine."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from app.config import LOCAL_EMBED_DIMS
from app.db.embedded import EmbeddedPostgres
from app.db.schema import upgrade_to_head
from tests.support.server import free_port

REDIS_SERVER = shutil.which("redis-server") or "redis-server"
START_TIMEOUT_S = 30


class PrivateRedis:
    """redis-server on its own port, no persistence; `stop()` kills it, `start()` brings a fresh
    one back on the same port (an outage loses Redis's contents, as a real crash would)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        client = redis.Redis(port=self.port, socket_timeout=1)
        while True:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                pass
            assert self.proc.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


class PrivatePostgres:
    """An embedded PostgreSQL 18 + pgvector of the test's own, migrated; `stop()` shuts it down
    (fast mode: connections are cut), `start()` brings it back with its data on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.server = EmbeddedPostgres(workdir / "pgdata", port=free_port())
        self.dsn = ""

    def start(self) -> None:
        first = not self.dsn
        self.dsn = self.server.start()
        if first:
            upgrade_to_head(self.dsn, LOCAL_EMBED_DIMS, "all-MiniLM-L6-v2")

    def stop(self) -> None:
        self.server.stop()
