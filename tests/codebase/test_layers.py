"""The layers of docs/architecture.md, enforced: an import graph of app/ read from the source (no
module is imported), checked against the rules each layer follows.

request → middleware (identity, payment) → controller → service → repository → SQL, with kit/
and config at the bottom. A rule that fails names the module and the import that broke it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

# Modules that speak HTTP (or MCP): the API layer. Every feature keeps its HTTP in these roles.
HTTP_ROLES = {"controller", "middleware", "gate", "capture"}
HTTP_PACKAGES = {"app.http", "app.mcp"}
TOP = {"app.asgi", "app.cli", "app.__main__"}
# Below the features: shared infrastructure that knows no feature and no HTTP.
INFRASTRUCTURE = {"app.db", "app.ai", "app.infra"}
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
    package = name if _is_package(name) else name.rsplit(".", 1)[0]
    for node in ast.walk(MODULES[name]):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _is_package(name: str) -> bool:
    return (APP.parent / name.replace(".", "/") / "__init__.py").exists()


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> str:
    if name in TOP or within(name, "app.dev"):
        return "top"
    if any(within(name, p) for p in HTTP_PACKAGES) or name.rsplit(".", 1)[-1] in HTTP_ROLES:
        return "http"
    if within(name, "app.core"):
        return "kit"
    if name == "app.config":
        return "config"
    if any(within(name, p) for p in INFRASTRUCTURE) or name in {"app.infra.project_files", "app"}:
        return "infrastructure"
    return "feature"


# What each layer may import from app/ (besides itself, within its own package).
ALLOWED = {
    "kit": {"kit"},
    "config": {"kit"},
    "infrastructure": {"kit", "config", "infrastructure"},
    "feature": {"kit", "config", "infrastructure", "feature"},
    "http": {"kit", "config", "infrastructure", "feature", "http"},
    "top": {"kit", "config", "infrastructure", "feature", "http", "top"},
}


def app_imports(name: str) -> set[str]:
    return {i for i in imports_of(name) if within(i, "app") and i != "app"}


def test_the_graph_is_read() -> None:
    assert {"app.memory.service", "app.http.transaction", "app.core.errors"} <= MODULES.keys()
    assert "app.core.errors" in app_imports("app.memory.service")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name: str) -> None:
    layer = layer_of(name)
    wrong = {
        target: layer_of(target)
        for target in app_imports(name)
        if layer_of(target) not in ALLOWED[layer]
    }
    assert not wrong, f"{name} ({layer}) imports a higher layer: {wrong}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if layer_of(n) not in {"http", "top"}))
def test_no_framework_below_the_api(name: str) -> None:
    frameworks = {i for i in imports_of(name) if i.split(".")[0] in FRAMEWORKS}
    assert not frameworks, f"{name} imports {frameworks}: HTTP belongs to the API layer"


def test_settings_load_nothing_of_the_app() -> None:
    """app/config.py imports only the contract's defaults, a leaf module of the kit."""
    assert app_imports("app.config") <= {"app.core.contract"}
    if "app.core.contract" in MODULES:
        assert not app_imports("app.core.contract")


@pytest.mark.parametrize("name", sorted(n for n in MODULES if layer_of(n) == "feature"))
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
    last = name.rsplit(".", 1)[-1]
    return last == "repository" or last.endswith("_repository")


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
        if not within(name, "app.dev") and name != "app.cli"
        for target in app_imports(name)
        if within(target, "app.dev")
    }
    assert not users, f"production modules import app.dev: {users}"
