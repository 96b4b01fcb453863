"""What `engram setup` writes, as pure functions: the wallet, and each client's configuration
built from (or merged into) what its file holds now. Reading and writing files is files.py, the
server is server.py, questions and flags are cli.py.

Where each format comes from:
- MemoClaw's CLI (github.com/anajuliabit/memoclaw-cli at f79e20b): src/config.ts reads
  `~/.memoclaw/config.json` (`loadPersistedConfig`: keys `url`, `privateKey`; MEMOCLAW_URL and
  MEMOCLAW_PRIVATE_KEY in the environment win over it), and `memoclaw init`
  (src/commands/config.ts `cmdInit`) writes `{privateKey, address, url}` with mode 0600.
- MCP clients: one entry under `mcpServers`, the shape Claude Code keeps in `~/.claude.json` for
  `claude mcp add --scope user` and in a project's `.mcp.json` (code.claude.com/docs/en/mcp):
  `{"type": "stdio", "command", "args", "env"}` or `{"type": "http", "url", "headers"}`.
- Claude Code plugins (code.claude.com/docs/en/plugins/marketplace-reference, settings):
  `extraKnownMarketplaces.<name>.source = {"source": "directory", "path": <dir holding
  .claude-plugin/marketplace.json>}` and `enabledPlugins["<plugin>@<marketplace>"] = true` in
  `~/.claude/settings.json`, whose `env` block reaches the hooks (ENGRAM_URL, ENGRAM_PRIVATE_KEY,
  ENGRAM_PYTHON: integrations/claude-code/scripts/engram_hook.py).
- OpenClaw (docs.openclaw.ai/tools/plugin, /help/environment, /gateway/configuration-reference):
  `~/.openclaw/openclaw.json` (JSON5) `plugins.load.paths` (what `openclaw plugins install
  --link` adds), `plugins.entries.<id>.{enabled, config}`, `plugins.slots.memory`; the config
  holds `${ENGRAM_PRIVATE_KEY}` (the plugin's uiHints ask for a reference) and the key itself
  goes to `~/.openclaw/.env`, which the gateway loads without overriding its environment.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# secp256k1's group order: a private key is an integer in [1, n - 1].
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
PRIVATE_KEY_RE = re.compile(r"^(0x)?([0-9a-fA-F]{64})$")

# The names the integrations declare (tests/setup/test_service.py checks them against the files):
# integrations/claude-code/.claude-plugin/marketplace.json and plugin.json,
# integrations/openclaw/openclaw.plugin.json.
CLAUDE_MARKETPLACE = "engram"
CLAUDE_PLUGIN = "engram-memory"
OPENCLAW_PLUGIN = "engram-memory"
MCP_SERVER_NAME = "engram"
KEY_ENV = "ENGRAM_PRIVATE_KEY"
# What the plugins read instead of the key when it is set (the hook and index.js prefer a
# session token): setup's entries name the key, so a stale token there is taken out.
TOKEN_ENV = "ENGRAM_SESSION_TOKEN"

JsonObject = dict[str, Any]


class SetupError(Exception):
    """Why setup cannot go on; the message is shown to the user as it is."""


class InvalidArgument(SetupError):
    """A flag or an answer that cannot be used (exit code 2, as argparse's errors)."""


class InvalidPrivateKey(InvalidArgument):
    pass


class NoAnswer(InvalidArgument):
    """stdin closed before a question that has no default was answered."""


class Unmergeable(SetupError):
    """A file setup will not rewrite: not JSON, or not the shape its client reads."""


@dataclass(frozen=True)
class Wallet:
    address: str  # EIP-55 checksummed
    private_key: str  # 0x and 64 lower-case hex digits, as MemoClaw's CLI stores it

    @property
    def masked_key(self) -> str:
        return mask(self.private_key)


def mask(secret: str) -> str:
    """A preview safe to print: the first 6 and last 4 characters (MemoClaw's `config show`)."""
    return f"{secret[:6]}…{secret[-4:]}" if len(secret) > 12 else "****"


def parse_private_key(raw: str) -> Wallet:
    """The wallet of a hex private key, refused unless it is exactly one (the message never
    repeats the input: a mistyped key is still a secret)."""
    found = PRIVATE_KEY_RE.match(raw.strip())
    if not found:
        raise InvalidPrivateKey(
            "a private key is 64 hex digits (32 bytes), with or without 0x; that is not one"
        )
    digits = found.group(2).lower()
    if not 0 < int(digits, 16) < SECP256K1_N:
        raise InvalidPrivateKey("that is not a secp256k1 private key (out of range)")
    from eth_account import Account

    key = "0x" + digits
    return Wallet(Account.from_key(key).address, key)


def new_wallet() -> Wallet:
    from eth_account import Account

    return parse_private_key(Account.create().key.hex())


def memoclaw_key(env: Mapping[str, str], config_text: str | None) -> str | None:
    """The key MemoClaw's CLI would use: MEMOCLAW_PRIVATE_KEY, else its config.json's."""
    if env.get("MEMOCLAW_PRIVATE_KEY"):
        return env["MEMOCLAW_PRIVATE_KEY"]
    try:
        key = load_json(config_text).get("privateKey")
    except Unmergeable:
        return None
    return key if isinstance(key, str) and key else None


# ---- where the files are ----------------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    wallet: Path
    memoclaw_cli: Path
    mcp: Path
    claude_settings: Path
    openclaw_config: Path
    openclaw_env: Path


def client_paths(
    home: Path, config_dir: Path, env: Mapping[str, str], mcp_config: Path | None
) -> Paths:
    """Each client's file, as that client finds it. `config_dir` is Engram's own (the wallet);
    OpenClaw honours OPENCLAW_HOME, OPENCLAW_STATE_DIR and OPENCLAW_CONFIG_PATH
    (docs.openclaw.ai/help/environment)."""
    openclaw_home = Path(env["OPENCLAW_HOME"]).expanduser() if env.get("OPENCLAW_HOME") else home
    state = (
        Path(env["OPENCLAW_STATE_DIR"]).expanduser()
        if env.get("OPENCLAW_STATE_DIR")
        else openclaw_home / ".openclaw"
    )
    configured = env.get("OPENCLAW_CONFIG_PATH")
    return Paths(
        wallet=config_dir / "wallet.json",
        memoclaw_cli=home / ".memoclaw" / "config.json",
        mcp=mcp_config or home / ".claude.json",
        claude_settings=home / ".claude" / "settings.json",
        openclaw_config=Path(configured).expanduser() if configured else state / "openclaw.json",
        openclaw_env=state / ".env",
    )


# ---- documents --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """One file setup writes: for which client, whether it holds a secret (then it is written
    0600), and how its new text follows from its current one (None: no file yet)."""

    what: str
    path: Path
    private: bool
    update: Callable[[str | None], str]
    is_json: bool = True

    def same(self, current: str, new: str) -> bool:
        """Equal for the client: JSON compares as data (key order and spacing aside)."""
        return load_json(current) == load_json(new) if self.is_json else current == new


def json_document(
    what: str, path: Path, private: bool, build: Callable[[JsonObject], JsonObject]
) -> Document:
    return Document(what, path, private, lambda text: dump_json(build(load_json(text))))


def load_json(text: str | None) -> JsonObject:
    if text is None or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unmergeable(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(doc, dict):
        raise Unmergeable("not a JSON object")
    return doc


def dump_json(doc: JsonObject) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _object(doc: JsonObject, *keys: str) -> JsonObject:
    """The object at `keys` in `doc`, created when missing; refused when something else is
    there (setup changes only its own entries, it does not repair a client's config)."""
    node = doc
    for depth, key in enumerate(keys, 1):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise Unmergeable(f"`{'.'.join(keys[:depth])}` is not a JSON object")
        node = child
    return node


def _list(doc: JsonObject, key: str, where: str) -> list[Any]:
    value = doc.setdefault(key, [])
    if not isinstance(value, list):
        raise Unmergeable(f"`{where}` is not a JSON array")
    return value


def wallet_record(doc: JsonObject, wallet: Wallet) -> JsonObject:
    """Engram's own record of the wallet, in MemoClaw's CLI's key names."""
    doc = copy.deepcopy(doc)
    doc.update(address=wallet.address, privateKey=wallet.private_key)
    return doc


def saved_wallet(text: str | None) -> Wallet | None:
    doc = load_json(text)
    if not doc:
        return None
    key = doc.get("privateKey")
    if not isinstance(key, str):
        raise Unmergeable("holds no privateKey")
    return parse_private_key(key)


def memoclaw_cli_config(doc: JsonObject, wallet: Wallet, url: str) -> JsonObject:
    doc = copy.deepcopy(doc)
    doc.update(privateKey=wallet.private_key, address=wallet.address, url=url)
    return doc


def mcp_stdio_entry(engram: list[str], url: str, wallet: Wallet) -> JsonObject:
    """`engram mcp` on stdio; its identity from the environment only (app/mcp/stdio.py)."""
    return {
        "type": "stdio",
        "command": engram[0],
        "args": [*engram[1:], "mcp", "--url", url],
        "env": {KEY_ENV: wallet.private_key},
    }


def mcp_http_entry(url: str, token: str) -> JsonObject:
    """/mcp over streamable HTTP, authenticated like REST: a bearer session token."""
    return {"type": "http", "url": f"{url}/mcp", "headers": {"Authorization": f"Bearer {token}"}}


def with_mcp_server(doc: JsonObject, entry: JsonObject) -> JsonObject:
    doc = copy.deepcopy(doc)
    _object(doc, "mcpServers")[MCP_SERVER_NAME] = entry
    return doc


def mcp_bearer_token(doc: JsonObject, url: str) -> str | None:
    """The session token of an existing /mcp entry for this URL, to keep it while it is good."""
    servers = doc.get("mcpServers")
    entry = servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None
    if not isinstance(entry, dict) or entry.get("url") != f"{url}/mcp":
        return None
    headers = entry.get("headers")
    header = headers.get("Authorization") if isinstance(headers, dict) else None
    if isinstance(header, str) and header.startswith("Bearer "):
        return header.removeprefix("Bearer ")
    return None


def claude_code_settings(
    doc: JsonObject, plugin_dir: Path, url: str, wallet: Wallet, python: str
) -> JsonObject:
    """The hooks plugin from a directory marketplace, enabled, with its environment."""
    doc = copy.deepcopy(doc)
    marketplace = _object(doc, "extraKnownMarketplaces", CLAUDE_MARKETPLACE)
    marketplace["source"] = {"source": "directory", "path": str(plugin_dir)}
    _object(doc, "enabledPlugins")[f"{CLAUDE_PLUGIN}@{CLAUDE_MARKETPLACE}"] = True
    env = _object(doc, "env")
    env.pop(TOKEN_ENV, None)
    env.update({"ENGRAM_URL": url, KEY_ENV: wallet.private_key, "ENGRAM_PYTHON": python})
    return doc


def openclaw_config(doc: JsonObject, plugin_dir: Path, url: str) -> JsonObject:
    """The memory plugin loaded from its directory, enabled, configured and in the memory slot;
    an existing allow-list gets its id (a new one would block every other plugin)."""
    doc = copy.deepcopy(doc)
    plugins = _object(doc, "plugins")
    deny = plugins.get("deny")
    if isinstance(deny, list) and OPENCLAW_PLUGIN in deny:
        raise Unmergeable(f"`plugins.deny` lists {OPENCLAW_PLUGIN}: take it out by hand first")
    if "allow" in plugins:
        allow = _list(plugins, "allow", "plugins.allow")
        if OPENCLAW_PLUGIN not in allow:
            allow.append(OPENCLAW_PLUGIN)
    paths = _list(_object(plugins, "load"), "paths", "plugins.load.paths")
    if str(plugin_dir) not in paths:
        paths.append(str(plugin_dir))
    entry = _object(plugins, "entries", OPENCLAW_PLUGIN)
    entry["enabled"] = True
    config = _object(plugins, "entries", OPENCLAW_PLUGIN, "config")
    config.pop("sessionToken", None)
    config.update(url=url, privateKey="${" + KEY_ENV + "}")
    # auto-capture reads the finished turn at agent_end (docs: guides/agents.md, OpenClaw via
    # the plugin)
    _object(plugins, "entries", OPENCLAW_PLUGIN, "hooks")["allowConversationAccess"] = True
    _object(plugins, "slots")["memory"] = OPENCLAW_PLUGIN
    return doc


def dotenv_with(text: str | None, name: str, value: str) -> str:
    """A dotenv file with `name=value`: its line replaced (one left), or appended; every other
    line kept as it is."""
    assignment = re.compile(rf"^\s*(?:export\s+)?{re.escape(name)}\s*=")
    lines: list[str] = []
    placed = False
    for line in (text or "").splitlines():
        if assignment.match(line):
            if not placed:
                lines.append(f"{name}={value}")
                placed = True
            continue
        lines.append(line)
    if not placed:
        lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"
