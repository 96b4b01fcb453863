"""A pytest plugin that holds every SQL statement the suite makes Engram run to
tests/support/sql_check.py's rules (one shard per wallet, no volatile ON CONFLICT update).

While the tests run, each repository function is wrapped to name itself, and asyncpg's query
methods note (function, statement, parameters) once per distinct statement. At the end of each
test process the statements are checked on the real database (pg_proc's volatility), unless
their function is a named exception below; any problem fails the run. A whole-suite run also
checks that every repository function ran, so a statement nobody exercised cannot slip past.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import inspect
import json
import os
import pkgutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import app
from tests.support.sql_check import VOLATILITY_SQL, problems_of

# Repository functions whose statements are not one wallet's, each with why.
EXCEPTIONS: dict[str, str] = {
    "app.db.settings_repository.pgvector_available_version": "start-up check of the extension",
    "app.db.settings_repository.embedding_dims": "start-up check of the schema",
    "app.db.settings_repository.recorded_embedding_model": "a setting (reference table)",
    "app.db.settings_repository.record_embedding_model": "a setting (reference table)",
    "app.db.settings_repository.embedded_otherwise": "start-up check over all memories, once per start",
    "app.db.settings_repository.ping": "health check",
    "app.db.settings_repository.citus_installed": "start-up: which session settings the pool takes",
    "app.db.settings_repository.commit_without_waiting_for_flush": "SET LOCAL, no table",
    "app.db.settings_repository.plan_for_the_parameters": "SET LOCAL, no table",
    "app.memory.repository.reembed.wallets_embedded_otherwise": (
        "`engram reembed`, after a model switch: which wallets it has left to do"
    ),
    "app.memory.repository.reembed.wallets_after": (
        "`engram reembed`'s passage pass: which wallets it has left to do"
    ),
    "app.auth.repository.sweep_expired_nonces": "the timer's sweep, off the request path",
    "app.console.repository._sweep": "the timer's sweeps of expired sessions and links",
    "app.payments.repository.pending_before": "the reconciler, on a timer: pending rows of all wallets",
    "app.payments.repository.channels_to_claim": "the channel claimer, on a timer: all wallets",
    "app.payments.repository.pending_claims": "the channel claimer, on a timer: all wallets",
    "app.payments.repository.unsettled_claims": "the channel claimer, on a timer: all wallets",
}

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("repository_fn", default=None)
QUERY_METHODS = ("fetch", "fetchrow", "fetchval", "execute", "cursor")
AUDIT_DIR = "ENGRAM_SQL_AUDIT_DIR"


def repository_modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(app.__path__, "app."):
        if is_repository(info.name):
            yield importlib.import_module(info.name)


def is_repository(name: str) -> bool:
    """A module named `repository` or `*_repository`, or any module of a `repository` package
    (app/memory/repository/)."""
    *packages, last = name.split(".")
    return last == "repository" or last.endswith("_repository") or "repository" in packages


def repository_functions() -> dict[str, Any]:
    found = {}
    for module in repository_modules():
        for name, fn in vars(module).items():
            if inspect.iscoroutinefunction(fn) and fn.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = (module, name, fn)
    return found


class Recorder:
    def __init__(self) -> None:
        self.statements: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.called: set[str] = set()

    def wrap(self, qualname: str, fn: Any) -> Any:
        @functools.wraps(fn)
        async def named(*args: Any, **kwargs: Any) -> Any:
            self.called.add(qualname)
            token = _current.set(qualname)
            try:
                return await fn(*args, **kwargs)
            finally:
                _current.reset(token)

        return named

    def note(self, query: str, args: tuple[Any, ...]) -> None:
        qualname = _current.get()
        if qualname is not None and (qualname, query) not in self.statements:
            self.statements[(qualname, query)] = args


def _recording(method: Any, recorder: Recorder) -> Any:
    @functools.wraps(method)
    def call(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        recorder.note(query, args)
        return method(self, query, *args, **kwargs)

    return call


@pytest.fixture(scope="session", autouse=True)
def sql_audit(database_url: str) -> Iterator[Recorder]:
    recorder = Recorder()
    functions = repository_functions()
    originals = {name: getattr(asyncpg.Connection, name) for name in QUERY_METHODS}
    for qualname, (module, name, fn) in functions.items():
        setattr(module, name, recorder.wrap(qualname, fn))
    for name, method in originals.items():
        setattr(asyncpg.Connection, name, _recording(method, recorder))
    try:
        yield recorder
    finally:
        for name, method in originals.items():
            setattr(asyncpg.Connection, name, method)
        for module, name, fn in functions.values():
            setattr(module, name, fn)
    _report(recorder, database_url)


def _report(recorder: Recorder, database_url: str) -> None:
    async def volatility() -> dict[str, str]:
        conn = await asyncpg.connect(database_url)
        try:
            return {r[0]: r[1] for r in await conn.fetch(VOLATILITY_SQL)}
        finally:
            await conn.close()

    by_name = asyncio.run(volatility())
    problems = [
        f"{qualname}: {problem}\n    {' '.join(query.split())[:300]}"
        for (qualname, query), args in recorder.statements.items()
        if qualname not in EXCEPTIONS
        for problem in problems_of(query, args, by_name)
    ]
    folder = os.environ.get(AUDIT_DIR)
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder, f"{worker}.json").write_text(json.dumps(sorted(recorder.called)))
    if problems:
        pytest.fail("Statements that would leave one shard:\n" + "\n".join(problems))


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        os.environ[AUDIT_DIR] = tempfile.mkdtemp(prefix="engram-sql-audit-")


def _whole_suite(config: pytest.Config) -> bool:
    narrowed = any(config.getoption(o, None) for o in ("keyword", "markexpr", "lf", "deselect"))
    paths = [Path(a.split("::")[0]).resolve() for a in config.args]
    return not narrowed and paths == [Path(config.rootpath, "tests").resolve()]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not _whole_suite(config) or exitstatus != 0:
        return
    called: set[str] = set()
    for file in Path(os.environ[AUDIT_DIR]).glob("*.json"):
        called.update(json.loads(file.read_text()))
    never = sorted(set(repository_functions()) - called - set(EXCEPTIONS))
    if never:
        print("\nRepository functions no test ran (their SQL went unchecked):", *never, sep="\n  ")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
