"""MemoClaw's own clients on the wire, replayed: how the command-line client (npm `memoclaw`
1.9.0, src/http.ts) and the MCP server (npm `memoclaw-mcp` 1.17.1, src/api.ts) send a request,
and what their output schemas demand of an answer. Neither client installs from the registry
here, so tests send what they send, byte for byte where it matters:

- both sign `x-wallet-auth` with viem: the checksummed address and a `0x`-prefixed signature;
- the CLI always sends `Content-Type: application/json` and a body only when it has one;
- the MCP server sends `Content-Type` only with a body, and `JSON.stringify` drops the keys
  whose value is `undefined` (here: `UNDEFINED`), at any depth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount

from app.auth.signature import auth_message

UNDEFINED: Any = object()  # a JavaScript `undefined`: JSON.stringify leaves the key out


def viem_wallet_auth(account: LocalAccount) -> str:
    """`${account.address}:${timestamp}:${signature}` as viem's signMessage gives it."""
    ts = int(time.time())
    signature = account.sign_message(encode_defunct(text=auth_message(ts))).signature.hex()
    return f"{account.address}:{ts}:0x{signature.removeprefix('0x')}"


def js_stringify(value: Any) -> str:
    """JSON.stringify: compact, undefined members dropped."""

    def strip(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {k: strip(x) for k, x in v.items() if x is not UNDEFINED}
        if isinstance(v, list):
            return [None if x is UNDEFINED else strip(x) for x in v]
        return v

    return json.dumps(strip(value), separators=(",", ":"), ensure_ascii=False)


class Client:
    """One wallet talking to one Engram as a MemoClaw client does."""

    always_content_type = True

    def __init__(self, base_url: str, account: LocalAccount | None = None) -> None:
        self.base_url = base_url
        self.account = account or Account.create()
        self.http = httpx.Client(base_url=base_url, timeout=120)

    def request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"x-wallet-auth": viem_wallet_auth(self.account)}
        if body is not None or self.always_content_type:
            headers["Content-Type"] = "application/json"
        content = js_stringify(body) if body is not None else None
        return self.http.request(method, path, content=content, headers=headers)

    def ok(self, method: str, path: str, body: Any = None, status: int | None = None) -> Any:
        """The parsed answer of a request that must succeed (2xx, or exactly `status`)."""
        r = self.request(method, path, body)
        if status is None:
            assert 200 <= r.status_code < 300, (method, path, r.status_code, r.text)
        else:
            assert r.status_code == status, (method, path, r.status_code, r.text)
        return r.json()

    def close(self) -> None:
        self.http.close()


class CliClient(Client):
    """`memoclaw` 1.9.0: `Content-Type: application/json` on every request."""


class McpClient(Client):
    """`memoclaw-mcp` 1.17.1: `Content-Type` only when there is a body."""

    always_content_type = False


# ---- what the MCP server's output schemas (src/tools.ts) demand ---------------------------------
# Each tool declares an output schema, and a strict MCP client rejects a result that breaks it:
# a declared property must have its declared type whenever it is present (null is no string).

MCP_MEMORY_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "content": str,
    "importance": (int, float),
    "memory_type": str,
    "namespace": str,
    "tags": list,
    "pinned": bool,
    "immutable": bool,
    "expires_at": str,
    "created_at": str,
    "updated_at": str,
    "session_id": str,
    "agent_id": str,
}
MCP_RELATION_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "source_id": str,
    "target_id": str,
    "relation_type": str,
    "metadata": dict,
}


def _typed(item: Mapping[str, Any], types: Mapping[str, Any], required: tuple[str, ...]) -> None:
    for name in required:
        assert name in item, (name, item)
    for name, kind in types.items():
        if name in item:
            value = item[name]
            assert isinstance(value, kind), (name, value, item)
            assert kind is bool or not isinstance(value, bool), (name, value, item)


def assert_mcp_memory(memory: Mapping[str, Any], recalled: bool = False) -> None:
    """MEMORY_OBJECT_SCHEMA (RECALL_RESULT_SCHEMA with `recalled`): id and content required."""
    _typed(memory, MCP_MEMORY_TYPES, ("id", "content"))
    assert all(isinstance(t, str) for t in memory.get("tags", [])), memory
    if recalled and "similarity" in memory:
        assert isinstance(memory["similarity"], (int, float)), memory


def assert_mcp_relation(relation: Mapping[str, Any]) -> None:
    """RELATION_OBJECT_SCHEMA: source_id, target_id and relation_type required."""
    _typed(relation, MCP_RELATION_TYPES, ("source_id", "target_id", "relation_type"))


def assert_no_nulls(value: Any, path: str = "$") -> None:
    """Nowhere a null: what a client that renders or schema-checks an answer needs."""
    assert value is not None, path
    if isinstance(value, Mapping):
        for key, item in value.items():
            assert_no_nulls(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            assert_no_nulls(item, f"{path}[{i}]")
