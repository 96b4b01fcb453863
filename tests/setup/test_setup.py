"""`engram setup` in a temporary home directory: a new or imported wallet, every client's file
with its content and mode, a file that would change left alone without --force (and updated,
with a copy kept, with it), merges that keep every other key, a file that is not JSON never
rewritten, questions answered on stdin, an invalid key, a server that is down or running, and
the installed command run as a real process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from eth_account import Account
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from app.ai.int8 import default_cache_dir
from app.cli import main
from app.mcp.tools import TOOLS
from app.setup.service import CLAUDE_MARKETPLACE, CLAUDE_PLUGIN, OPENCLAW_PLUGIN
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
ENGRAM = Path(sys.executable).with_name("engram")
MODEL_CACHE = default_cache_dir()  # the caller's, read before a test moves HOME: built once
# Variables that would point setup at the caller's own wallet, server or clients.
ISOLATED = (
    "ENGRAM_PRIVATE_KEY", "ENGRAM_URL", "ENGRAM_DATA_DIR", "MEMOCLAW_PRIVATE_KEY", "MEMOCLAW_URL",
    "OPENCLAW_HOME", "OPENCLAW_STATE_DIR", "OPENCLAW_CONFIG_PATH", "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ISOLATED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal: nothing is asked
    return home


@pytest.fixture
def down() -> str:
    """A URL where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"


def setup(
    capsys: pytest.CaptureFixture[str], *args: str, answers: str | None = None
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `engram setup ARGS` run in this process."""
    if answers is not None:
        sys.stdin = io.StringIO(answers)  # restored by the `home` fixture's monkeypatch
    try:
        main(["setup", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_of(home: Path) -> dict[str, Path]:
    return {
        "wallet": home / ".config/engram/wallet.json",
        "memoclaw": home / ".memoclaw/config.json",
        "mcp": home / ".claude.json",
        "claude": home / ".claude/settings.json",
        "openclaw": home / ".openclaw/openclaw.json",
        "openclaw_env": home / ".openclaw/.env",
    }


def test_a_new_wallet_configures_every_client(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = setup(capsys, "--all", "--yes", "--url", down)
    assert code == 0, out + err
    paths = files_of(home)
    wallet = read(paths["wallet"])
    key, address = wallet["privateKey"], wallet["address"]
    assert Account.from_key(key).address == address
    assert key not in out + err, "the full key is never printed"
    assert f"{address} (created; key {key[:6]}…{key[-4:]})" in out
    assert "not reachable" in out and f"{down}/console" in out

    assert read(paths["memoclaw"]) == {"privateKey": key, "address": address, "url": down}
    assert read(paths["mcp"]) == {"mcpServers": {"engram": {
        "type": "stdio", "command": str(ENGRAM), "args": ["mcp", "--url", down],
        "env": {"ENGRAM_PRIVATE_KEY": key},
    }}}  # fmt: skip
    plugin_id = f"{CLAUDE_PLUGIN}@{CLAUDE_MARKETPLACE}"
    assert read(paths["claude"]) == {
        "extraKnownMarketplaces": {CLAUDE_MARKETPLACE: {"source": {
            "source": "directory", "path": str(ROOT / "integrations/claude-code"),
        }}},
        "enabledPlugins": {plugin_id: True},
        "env": {"ENGRAM_URL": down, "ENGRAM_PRIVATE_KEY": key, "ENGRAM_PYTHON": sys.executable},
    }  # fmt: skip
    assert read(paths["openclaw"]) == {"plugins": {
        "load": {"paths": [str(ROOT / "integrations/openclaw")]},
        "entries": {OPENCLAW_PLUGIN: {"enabled": True, "config": {
            "url": down, "privateKey": "${ENGRAM_PRIVATE_KEY}",
        }, "hooks": {"allowConversationAccess": True}}},
        "slots": {"memory": OPENCLAW_PLUGIN},
    }}  # fmt: skip
    assert paths["openclaw_env"].read_text() == f"ENGRAM_PRIVATE_KEY={key}\n"
    for name in ("wallet", "memoclaw", "mcp", "claude", "openclaw_env"):
        assert mode(paths[name]) == 0o600, name  # each holds the key
    assert key not in paths["openclaw"].read_text()
    assert mode(paths["memoclaw"].parent) == 0o700


def test_running_it_again_changes_nothing(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert setup(capsys, "--all", "--yes", "--url", down)[0] == 0
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files_of(home).values()}
    code, out, _ = setup(capsys, "--all", "--yes", "--url", down)
    assert code == 0
    assert "saved in ~/.config/engram/wallet.json" in out  # the same wallet, not a new one
    assert out.count("unchanged") == 6 and "created" not in out
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files_of(home).values()} == before


@pytest.mark.parametrize("how", ["flag", "env", "memoclaw"])
def test_an_imported_key_is_the_wallet(
    home: Path,
    down: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    account = Account.create()
    digits = account.key.hex().removeprefix("0x")
    args = ["--memoclaw-cli", "--mcp", "--yes", "--url", down]
    if how == "flag":
        args += ["--private-key", digits.upper()]  # no 0x, upper case: still the same key
    elif how == "env":
        monkeypatch.setenv("ENGRAM_PRIVATE_KEY", "0x" + digits)
    else:
        monkeypatch.setenv("MEMOCLAW_PRIVATE_KEY", "0x" + digits)
        args.append("--from-memoclaw")
    code, out, err = setup(capsys, *args)
    assert code == 0, out + err
    assert f"{account.address} (imported" in out
    paths = files_of(home)
    assert read(paths["wallet"]) == {"address": account.address, "privateKey": "0x" + digits}
    assert read(paths["memoclaw"])["privateKey"] == "0x" + digits
    assert read(paths["mcp"])["mcpServers"]["engram"]["env"]["ENGRAM_PRIVATE_KEY"] == "0x" + digits


@pytest.mark.parametrize("key", ["0x123", "g" * 64, "0x" + "0" * 64])
def test_an_invalid_key_exits_2_and_writes_nothing(
    home: Path, down: str, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    code, _, err = setup(capsys, "--all", "--yes", "--url", down, "--private-key", key)
    assert code == 2
    assert "engram setup:" in err and "private key" in err and key not in err
    assert not any(p.exists() for p in files_of(home).values())


def test_from_memoclaw_without_a_memoclaw_key_exits_2(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = setup(capsys, "--from-memoclaw", "--yes", "--url", down)
    assert code == 2 and "MemoClaw's CLI has no key" in err


def test_a_file_that_would_change_is_left_without_force_and_updated_with_it(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    memoclaw = files_of(home)["memoclaw"]
    memoclaw.parent.mkdir()
    theirs = Account.create()
    original = json.dumps({"privateKey": theirs.key.hex(), "address": theirs.address,
                           "url": "https://api.memoclaw.com", "namespace": "work"})  # fmt: skip
    memoclaw.write_text(original)
    os.chmod(memoclaw, 0o644)

    code, out, _ = setup(capsys, "--memoclaw-cli", "--yes", "--url", down)
    assert code == 1
    assert "skipped    ~/.memoclaw/config.json" in out and "--force" in out
    assert memoclaw.read_text() == original and mode(memoclaw) == 0o644

    code, out, _ = setup(capsys, "--memoclaw-cli", "--yes", "--force", "--url", down)
    assert code == 0
    assert "updated    ~/.memoclaw/config.json" in out
    ours = read(files_of(home)["wallet"])
    assert read(memoclaw) == {"privateKey": ours["privateKey"], "address": ours["address"],
                              "url": down, "namespace": "work"}  # fmt: skip
    assert mode(memoclaw) == 0o600
    (kept,) = memoclaw.parent.glob("config.json.bak-*")
    assert kept.read_text() == original and mode(kept) == 0o600  # their key is not lost
    assert f"kept as ~/.memoclaw/{kept.name}" in out


def test_merging_keeps_every_other_key(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = files_of(home)
    claude_json = {
        "numStartups": 12,
        "projects": {"/work": {"allowedTools": ["Bash"]}},
        "mcpServers": {"github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/"}},
    }
    settings = {
        "model": "opus",
        "permissions": {"allow": ["Bash(git log:*)"]},
        "env": {"DISABLE_TELEMETRY": "1", "ENGRAM_SESSION_TOKEN": "stale"},
        "enabledPlugins": {"context7@claude-plugins-official": True},
        "extraKnownMarketplaces": {"team": {"source": {"source": "github", "repo": "o/r"}}},
    }
    openclaw = {
        "agents": {"defaults": {"model": "x"}},
        "plugins": {
            "allow": ["voice-call"],
            "load": {"paths": ["/opt/other-plugin"]},
            "entries": {
                "voice-call": {"enabled": True, "config": {"provider": "twilio"}},
                OPENCLAW_PLUGIN: {"config": {"minSimilarity": 0.5, "sessionToken": "old"}},
            },
            "slots": {"memory": "memory-core"},
        },
    }
    for name, doc in (("mcp", claude_json), ("claude", settings), ("openclaw", openclaw)):
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        paths[name].write_text(json.dumps(doc))
    paths["openclaw_env"].write_text("OPENROUTER_API_KEY=sk-or-1\nENGRAM_PRIVATE_KEY=0xold\n")

    code, out, err = setup(capsys, "--mcp", "--claude-code", "--openclaw", "--yes", "--force",
                           "--url", down)  # fmt: skip
    assert code == 0, out + err
    key = read(paths["wallet"])["privateKey"]

    merged = read(paths["mcp"])
    assert merged["mcpServers"].pop("engram")["env"] == {"ENGRAM_PRIVATE_KEY": key}
    assert merged == claude_json

    merged = read(paths["claude"])
    assert merged["env"] == {"DISABLE_TELEMETRY": "1", "ENGRAM_URL": down,
                             "ENGRAM_PRIVATE_KEY": key, "ENGRAM_PYTHON": sys.executable}  # fmt: skip
    assert merged["enabledPlugins"] == {**settings["enabledPlugins"],
                                        f"{CLAUDE_PLUGIN}@{CLAUDE_MARKETPLACE}": True}  # fmt: skip
    assert merged["extraKnownMarketplaces"]["team"] == settings["extraKnownMarketplaces"]["team"]
    assert {k: merged[k] for k in ("model", "permissions")} == {
        k: settings[k] for k in ("model", "permissions")
    }

    plugins = read(paths["openclaw"])["plugins"]
    assert read(paths["openclaw"])["agents"] == openclaw["agents"]
    assert plugins["allow"] == ["voice-call", OPENCLAW_PLUGIN]
    assert plugins["load"]["paths"] == ["/opt/other-plugin", str(ROOT / "integrations/openclaw")]
    assert plugins["entries"]["voice-call"] == openclaw["plugins"]["entries"]["voice-call"]
    assert plugins["entries"][OPENCLAW_PLUGIN] == {"enabled": True, "config": {
        "minSimilarity": 0.5, "url": down, "privateKey": "${ENGRAM_PRIVATE_KEY}",
    }, "hooks": {"allowConversationAccess": True}}  # fmt: skip
    assert plugins["slots"] == {"memory": OPENCLAW_PLUGIN}
    assert (
        paths["openclaw_env"].read_text()
        == f"OPENROUTER_API_KEY=sk-or-1\nENGRAM_PRIVATE_KEY={key}\n"
    )


def test_a_file_that_is_not_json_is_never_rewritten(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = files_of(home)
    paths["openclaw"].parent.mkdir()
    json5 = "{\n  // OpenClaw reads JSON5\n  gateway: { port: 18789 },\n}\n"
    paths["openclaw"].write_text(json5)
    code, out, _ = setup(capsys, "--all", "--yes", "--force", "--url", down)
    assert code == 1
    assert "refused    ~/.openclaw/openclaw.json" in out and "not valid JSON (line 2" in out
    assert "even with --force" in out
    assert paths["openclaw"].read_text() == json5
    assert not list(paths["openclaw"].parent.glob("openclaw.json.bak-*"))
    assert read(paths["memoclaw"])["url"] == down  # the other clients are still set up


def test_questions_answered_on_stdin(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    memoclaw = files_of(home)["memoclaw"]
    memoclaw.parent.mkdir()
    memoclaw.write_text('{"url": "https://api.memoclaw.com"}')
    account = Account.create()
    answers = "\n".join([
        "i",  # Wallet? import
        account.key.hex(),  # Private key
        "n",  # Start `engram serve` in the background now?
        "y",  # Configure MemoClaw's CLI?
        "y",  # Add Engram as an MCP server?
        "",  # MCP transport? (stdio)
        "n",  # Install the Claude Code plugin?
        "n",  # Install the OpenClaw plugin?
        "y",  # ~/.memoclaw/config.json would change. Update it?
    ]) + "\n"  # fmt: skip
    code, out, err = setup(capsys, "--interactive", "--url", down, answers=answers)
    assert code == 0, out + err
    assert "Start `engram serve` in the background now? [Y/n]" in out
    assert "~/.memoclaw/config.json would change (MemoClaw's CLI). Update it? [y/N]" in out
    assert read(memoclaw)["address"] == account.address
    assert read(files_of(home)["mcp"])["mcpServers"]["engram"]["type"] == "stdio"
    assert not files_of(home)["claude"].exists() and not files_of(home)["openclaw"].exists()
    assert account.key.hex().removeprefix("0x") not in out

    # asked again, a change declined is kept as it was: the user's choice, not a failure
    elsewhere = f"http://127.0.0.1:{free_port()}"
    code, out, _ = setup(capsys, "--interactive", "--memoclaw-cli", "--url", elsewhere,
                         answers="y\nn\nn\n")  # fmt: skip
    assert code == 0
    assert "kept       ~/.memoclaw/config.json" in out
    assert read(memoclaw)["url"] == down


def test_mcp_config_names_another_file(
    home: Path, down: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project" / ".mcp.json"
    project.parent.mkdir()
    project.write_text(json.dumps({"mcpServers": {"fs": {"command": "npx", "args": ["x"]}}}))
    code, out, _ = setup(capsys, "--mcp", "--mcp-config", str(project), "--yes", "--force",
                         "--url", down)  # fmt: skip
    assert code == 0
    servers = read(project)["mcpServers"]
    assert servers["fs"] == {"command": "npx", "args": ["x"]}
    assert servers["engram"]["args"] == ["mcp", "--url", down]
    assert f"updated    {project}" in out and not files_of(home)["mcp"].exists()


def test_a_server_that_is_down_is_said_clearly(
    home: Path, down: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = setup(capsys, "--mcp", "http", "--yes", "--url", down)
    assert code == 1
    assert f"{down}: not reachable" in out and "Connection refused" in out
    assert "start it with `engram serve` (or --start-server)" in out
    assert "skipped    ~/.claude.json" in out and "needs a session token" in out
    assert not files_of(home)["mcp"].exists()


def test_a_running_server_gives_mcp_over_http_a_session_token(
    home: Path, engram_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = setup(capsys, "--mcp", "http", "--yes", "--url", engram_url)
    assert code == 0, out + err
    assert f"{engram_url}: up" in out
    entry = read(files_of(home)["mcp"])["mcpServers"]["engram"]
    assert entry["type"] == "http" and entry["url"] == f"{engram_url}/mcp"
    status = httpx.get(f"{engram_url}/v1/free-tier/status", headers=entry["headers"], timeout=10)
    assert status.status_code == 200
    assert status.json()["wallet"] == read(files_of(home)["wallet"])["address"].lower()
    assert f"console   {engram_url}/console" in out
    # a second run keeps the token (it has days left): nothing changes
    code, out, _ = setup(capsys, "--mcp", "http", "--yes", "--url", engram_url)
    assert code == 0 and "unchanged  ~/.claude.json" in out


def test_the_installed_command_in_a_fresh_home(tmp_path: Path, down: str) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ISOLATED}
    done = subprocess.run(
        [str(ENGRAM), "setup", "--all", "--url", down],
        env={**env, "HOME": str(home)}, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    key = read(home / ".config/engram/wallet.json")["privateKey"]
    assert key not in done.stdout + done.stderr
    assert read(home / ".memoclaw/config.json")["privateKey"] == key
    assert mode(home / ".claude/settings.json") == 0o600
    assert done.stdout.count("\n  created    ") == 6


def test_setup_starts_the_server_when_asked(
    home: Path,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--start-server`: `engram serve` in the background, its log in the data directory, ready
    before setup goes on (on the session's database, with the model already built)."""
    monkeypatch.setenv("ENGRAM_DATABASE_URL", database_url)
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ENGRAM_MODEL_CACHE", str(MODEL_CACHE))
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = setup(capsys, "--yes", "--start-server", "--wait", "60", "--url", url)
    started = re.search(r"starting engram serve \(pid (\d+)", out)
    assert started, out + err
    server = psutil.Process(int(started.group(1)))
    log = tmp_path / "data" / "serve.log"
    try:
        assert code == 0, out + err + log.read_text()
        assert f"{url}: not reachable" in out and "up (Engram" in out
        assert f"kill {server.pid}" in out
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        assert os.getsid(server.pid) != os.getsid(0)  # detached: it outlives setup's terminal
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    assert "Traceback" not in log.read_text()


async def test_the_written_entries_drive_the_clients(
    home: Path, engram_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What setup wrote, used as the clients use it: the MCP entry's command, arguments and
    environment start `engram mcp` with its tools; the Claude Code hook, with the plugin's
    environment from settings.json, recalls from the server (signing with the key)."""
    # in a thread: setup is synchronous code (the console link runs its own event loop)
    code, out, err = await asyncio.to_thread(
        setup, capsys, "--mcp", "--claude-code", "--yes", "--url", engram_url
    )
    assert code == 0, out + err
    entry = read(files_of(home)["mcp"])["mcpServers"]["engram"]
    base_env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env={**base_env, **entry["env"]}
    )
    async with stdio_client(params) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream) as session:
            await session.initialize()
            assert {tool.name for tool in (await session.list_tools()).tools} == set(TOOLS)
            status = await session.call_tool("memoclaw_status", {})  # signed with the entry's key
    assert not status.isError, status.content
    assert (
        read(files_of(home)["wallet"])["address"].lower()
        in json.dumps(status.structuredContent).lower()
    )

    settings = read(files_of(home)["claude"])
    plugin = Path(settings["extraKnownMarketplaces"][CLAUDE_MARKETPLACE]["source"]["path"])
    env = settings["env"]
    done = await asyncio.to_thread(
        subprocess.run,
        [env["ENGRAM_PYTHON"], str(plugin / "scripts/engram_hook.py"), "search", "coffee"],
        env={**base_env, **env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "No memories found for 'coffee'" in done.stdout
