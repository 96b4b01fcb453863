"""What an MCP tool is: its name, description, input and output schemas, the REST request it
stands for and how its answer is shaped; and the helpers every group of tools builds requests
and results with (path ids, arguments minus those in the path, results without nulls)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from app.mcp.rest import RestCall
from app.mcp.tools.schemas import JSON, object_of

# Where user data sits in a result: kept as stored, nulls included.
USER_DATA_KEYS = frozenset({"metadata", "changes"})


def drop_nulls(value: Any) -> Any:
    """`value` without null-valued keys, at every depth except inside user data."""
    if isinstance(value, dict):
        return {
            k: (v if k in USER_DATA_KEYS else drop_nulls(v))
            for k, v in value.items()
            if v is not None
        }
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    arguments: JSON  # properties
    required: tuple[str, ...]
    output: JSON
    request: Callable[[JSON], RestCall]
    shape: Callable[[Any], JSON] = lambda body: dict(body)
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    @property
    def input_schema(self) -> JSON:
        return object_of(self.arguments, list(self.required))

    def pick(self, args: Mapping[str, Any]) -> JSON:
        """The declared arguments given, with nulls left out unless the schema allows null
        (update's `expires_at: null` clears the expiry)."""
        return {
            k: args[k]
            for k, schema in self.arguments.items()
            if k in args and (args[k] is not None or "null" in _types(schema))
        }


def _types(schema: JSON) -> list[str]:
    kind = schema.get("type")
    return kind if isinstance(kind, list) else [kind] if kind else []


def path_id(value: Any) -> str:
    return quote(str(value), safe="")


def without(args: JSON, *names: str) -> JSON:
    """Picked arguments minus those that go in the path."""
    return {k: v for k, v in args.items() if k not in names}
