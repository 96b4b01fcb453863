"""The architecture of docs/pages/concepts/architecture.md, enforced: an import graph of app/ read
from the source (no module is imported), checked against

- the package order (ORDER below): a package imports only packages before it in the list, and
  the packages of one step not each other; an import that points up fails with its file, line
  and name;
- the file roles within the features: no framework below the HTTP roles, SQL only in
  repositories, no repository calling a service, and nothing on the production path importing
  the dev tools.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

# The package order, from the bottom up (docs/pages/concepts/architecture.md says why each
# package stands where it does). Each entry is one step; a step may hold several packages that
# know nothing of one another.
ORDER: list[tuple[str, ...]] = [
    ("core",),  # errors, contract defaults, boundary structs, values carried on a request
    ("config",),  # settings
    ("infra",),  # instance state (Redis or in-process), metrics, logs, project files
    ("db",),  # pool, embedded PostgreSQL, schema checks
    ("ai",),  # embedders, fact models, token counts
    ("http",),  # HTTP glue as a library: markers, transaction, errors, state, rate limits
    ("history",),  # every change to a memory, recorded by whoever makes it
    ("free_tier",),  # free calls per wallet
    ("usage",),  # metered calls, reports
    ("payments",),  # x402: gate, offers, proofs, channels, ledger
    ("auth",),  # who calls: wallet signatures, sessions, Sign-In-With-X
    ("grants",),  # namespaces shared with other wallets
    ("agents",),  # agent keys acting for an owner
    ("access",),  # who acts, for which owner, how far: resolved once per request
    ("guard",),  # namespace guards: what a namespace does with flagged or others' memories
    ("memory",),  # store, recall, list, update, delete; history and quarantine routes
    ("relations",),  # relations between memories, the graph walk
    ("tags", "pinned", "suggested", "context", "ingest", "consolidate", "transfer"),  # flows
    ("console", "mcp"),  # surfaces over the features
    ("setup",),  # `engram setup`
    ("asgi", "dev"),  # the composition root (create_app), and the dev tools (off production)
    ("cli",),  # the `engram` command
    ("__main__",),  # python -m app
]
RANK = {package: rank for rank, step in enumerate(ORDER) for package in step}

# Modules that speak HTTP (or MCP) inside a feature: the framework is theirs alone.
HTTP_ROLES = {"controller", "middleware", "gate", "capture", "requests", "pages"}
HTTP_PACKAGES = {"app.http", "app.mcp"}
TOP = {"app.asgi", "app.cli", "app.__main__", "app.dev"}
FRAMEWORKS = {"litestar", "starlette", "uvicorn"}
SQL_CALLS = {"execute", "executemany", "fetch", "fetchrow", "fetchval", "copy_records_to_table"}


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {
        module_name(p): ast.parse(p.read_text(), str(p))
        for p in sorted(APP.rglob("*.py"))
        if "_bundled" not in p.parts
    }


MODULES = modules()


def imports_of(name: str) -> Iterator[str]:
    """Every module `name` imports, at any depth in its body (function-level imports count)."""
    for _, target in located_imports(name):
        yield target


def located_imports(name: str) -> Iterator[tuple[int, str]]:
    """(line, module) for every import of `name`."""
    package = name if _is_package(name) else name.rsplit(".", 1)[0]
    for node in ast.walk(MODULES[name]):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if full in MODULES else base


def _is_package(name: str) -> bool:
    return (APP.parent / name.replace(".", "/") / "__init__.py").exists()


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def package_of(name: str) -> str:
    """The top-level package (or module) of app/ that `name` belongs to: app.memory.store ->
    memory, app.asgi -> asgi."""
    return name.split(".")[1] if name.count(".") else name


def is_http(name: str) -> bool:
    """A module that speaks HTTP: the HTTP library, MCP, the top, or a feature's HTTP role
    (controller.py, or a second controller named `<what>_controller.py`)."""
    role = name.rsplit(".", 1)[-1]
    return (
        any(within(name, p) for p in HTTP_PACKAGES | TOP)
        or role in HTTP_ROLES
        or role.endswith("_controller")
    )


def path_of(name: str) -> str:
    suffix = "/__init__.py" if _is_package(name) else ".py"
    return name.replace(".", "/") + suffix


def app_imports(name: str) -> set[str]:
    return {i for i in imports_of(name) if within(i, "app") and i != "app"}


def upward_imports(name: str) -> list[str]:
    """The imports of `name` that point up the package order (or sideways within one step),
    each as `file:line imports module`."""
    own = RANK[package_of(name)]
    return sorted(
        {
            f"{path_of(name)}:{line} imports {target}"
            for line, target in located_imports(name)
            if within(target, "app")
            and target != "app"
            and package_of(target) != package_of(name)
            and RANK[package_of(target)] >= own
        }
    )


def test_the_graph_is_read() -> None:
    assert {"app.memory.service", "app.http.transaction", "app.core.errors"} <= MODULES.keys()
    assert "app.core.errors" in app_imports("app.memory.service")


def test_every_package_has_its_place_in_the_order() -> None:
    packages = {package_of(n) for n in MODULES if n != "app"}
    assert packages <= RANK.keys(), f"not in ORDER: {sorted(packages - RANK.keys())}"
    assert not RANK.keys() - packages, f"in ORDER, not in app/: {sorted(RANK.keys() - packages)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "app"))
def test_imports_follow_the_package_order(name: str) -> None:
    wrong = upward_imports(name)
    assert not wrong, (
        f"{package_of(name)} stands below these (tests/codebase/test_layers.py ORDER): "
        + "; ".join(wrong)
    )


def test_a_planted_upward_import_is_caught() -> None:
    """The check itself: an import of memory planted in the HTTP library fails, naming it."""
    MODULES["app.http.planted"] = ast.parse("from app.memory.service import MemoryService\n")
    try:
        assert upward_imports("app.http.planted") == [
            "app/http/planted.py:1 imports app.memory.service"
        ]
    finally:
        del MODULES["app.http.planted"]


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not is_http(n)))
def test_no_framework_below_the_api(name: str) -> None:
    frameworks = {i for i in imports_of(name) if i.split(".")[0] in FRAMEWORKS}
    assert not frameworks, f"{name} imports {frameworks}: HTTP belongs to the HTTP roles"


def test_settings_load_nothing_of_the_app() -> None:
    """app/config.py imports only the contract's defaults, a leaf module of the kit."""
    assert app_imports("app.config") <= {"app.core.contract"}
    if "app.core.contract" in MODULES:
        assert not app_imports("app.core.contract")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_repositories_call_no_service(name: str) -> None:
    """Within the features, calls go service → repository, never back (controllers are HTTP and
    checked above)."""
    if is_repository(name):
        services = {i for i in app_imports(name) if i.rsplit(".", 1)[-1] == "service"}
        assert not services, f"{name} imports services {services}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_sql_only_in_repositories(name: str) -> None:
    if is_repository(name):
        return
    calls = {
        node.func.attr
        for node in ast.walk(MODULES[name])
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SQL_CALLS
        and _first_arg_is_sql(node)
    }
    assert not calls, f"{name} runs SQL itself ({calls}); SQL goes in a repository"


def is_repository(name: str) -> bool:
    """repository.py, <what>_repository.py, or a module of a `repository` package."""
    *packages, last = name.split(".")
    return last == "repository" or last.endswith("_repository") or "repository" in packages


def _first_arg_is_sql(call: ast.Call) -> bool:
    if not call.args or not isinstance(call.args[0], ast.Constant):
        return False
    text = call.args[0].value
    return isinstance(text, str) and text.lstrip().split(" ", 1)[0].upper() in {
        "SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "SET", "CREATE", "ALTER", "LOCK", "DROP",
    }  # fmt: skip


def test_dev_tools_stay_off_the_production_path() -> None:
    users = {
        name
        for name in MODULES
        if not within(name, "app.dev") and not within(name, "app.cli")
        for target in app_imports(name)
        if within(target, "app.dev")
    }
    assert not users, f"production modules import app.dev: {users}"
