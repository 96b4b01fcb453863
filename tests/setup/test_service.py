"""`engram setup`'s documents and files, without the command: keys, merges that keep every other
key, the dotenv line, the names the integrations declare, atomic private writes."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import jwt
import pytest
from eth_account import Account

from app.setup import files
from app.setup.server import ConsoleLink, console_link, normalize_url, token_still_good
from app.setup.service import (
    CLAUDE_MARKETPLACE,
    CLAUDE_PLUGIN,
    OPENCLAW_PLUGIN,
    SECP256K1_N,
    InvalidArgument,
    InvalidPrivateKey,
    Unmergeable,
    claude_code_settings,
    client_paths,
    dotenv_with,
    load_json,
    mask,
    mcp_bearer_token,
    mcp_http_entry,
    memoclaw_key,
    new_wallet,
    openclaw_config,
    parse_private_key,
    saved_wallet,
)

INTEGRATIONS = Path(__file__).resolve().parents[2] / "integrations"


def test_a_key_is_normalised_and_its_address_derived() -> None:
    account = Account.create()
    digits = account.key.hex().removeprefix("0x")
    for raw in (digits, "0x" + digits, " 0x" + digits.upper() + "\n"):
        wallet = parse_private_key(raw)
        assert wallet.private_key == "0x" + digits.lower()
        assert wallet.address == account.address


@pytest.mark.parametrize(
    "raw",
    ["", "0x123", "zz" * 32, "0x" + "ab" * 33, "0x" + "0" * 64, f"{SECP256K1_N:064x}"],
    ids=["empty", "short", "not-hex", "long", "zero", "order"],
)
def test_what_is_not_a_key_is_refused_without_repeating_it(raw: str) -> None:
    with pytest.raises(InvalidPrivateKey) as refused:
        parse_private_key(raw)
    assert raw not in str(refused.value) or not raw


def test_a_new_wallet_is_a_real_one() -> None:
    wallet = new_wallet()
    assert Account.from_key(wallet.private_key).address == wallet.address
    assert wallet.masked_key == f"{wallet.private_key[:6]}…{wallet.private_key[-4:]}"
    assert mask("short") == "****"


def test_memoclaw_key_follows_memoclaws_cli() -> None:
    config = json.dumps({"privateKey": "0xabc", "url": "x"})
    assert memoclaw_key({}, config) == "0xabc"
    assert memoclaw_key({"MEMOCLAW_PRIVATE_KEY": "0xdef"}, config) == "0xdef"
    assert memoclaw_key({}, "{not json") is None
    assert memoclaw_key({}, None) is None


def test_a_saved_wallet_is_read_back() -> None:
    wallet = new_wallet()
    text = json.dumps({"address": wallet.address, "privateKey": wallet.private_key})
    assert saved_wallet(text) == wallet
    assert saved_wallet(None) is None
    with pytest.raises(Unmergeable):
        saved_wallet('{"address": "0x1"}')


def test_load_json_says_where_it_breaks() -> None:
    assert load_json("  \n") == {}
    with pytest.raises(Unmergeable, match=r"line 2, column 1"):
        load_json('{"a": 1,\n}')
    with pytest.raises(Unmergeable, match="not a JSON object"):
        load_json("[1, 2]")


def test_the_names_setup_writes_are_the_integrations_own() -> None:
    marketplace = json.loads(
        (INTEGRATIONS / "claude-code/.claude-plugin/marketplace.json").read_text()
    )
    plugin = json.loads((INTEGRATIONS / "claude-code/.claude-plugin/plugin.json").read_text())
    openclaw = json.loads((INTEGRATIONS / "openclaw/openclaw.plugin.json").read_text())
    assert marketplace["name"] == CLAUDE_MARKETPLACE
    assert [p["name"] for p in marketplace["plugins"]] == [plugin["name"]] == [CLAUDE_PLUGIN]
    assert marketplace["plugins"][0]["source"] == "./"  # the plugin is the marketplace's root
    assert openclaw["id"] == OPENCLAW_PLUGIN
    # the config setup writes passes the plugin's own schema (additionalProperties: false)
    assert {"url", "privateKey"} <= openclaw["configSchema"]["properties"].keys()


def test_claude_code_settings_replace_a_stale_token_and_keep_the_rest() -> None:
    wallet = new_wallet()
    before = {"env": {"ENGRAM_SESSION_TOKEN": "stale", "OTHER": "1"}, "model": "opus"}
    after = claude_code_settings(before, Path("/p"), "http://h", wallet, "/py")
    assert after["env"] == {"OTHER": "1", "ENGRAM_URL": "http://h",
                            "ENGRAM_PRIVATE_KEY": wallet.private_key, "ENGRAM_PYTHON": "/py"}  # fmt: skip
    assert after["model"] == "opus" and before["env"]["ENGRAM_SESSION_TOKEN"] == "stale"
    with pytest.raises(Unmergeable, match="`env` is not a JSON object"):
        claude_code_settings({"env": ["A=1"]}, Path("/p"), "http://h", wallet, "/py")


def test_openclaw_allow_list_is_extended_only_when_there_is_one() -> None:
    without = openclaw_config({}, Path("/p"), "http://h")
    assert "allow" not in without["plugins"]  # a new allow-list would block every other plugin
    with_list = openclaw_config({"plugins": {"allow": ["voice-call"]}}, Path("/p"), "http://h")
    assert with_list["plugins"]["allow"] == ["voice-call", OPENCLAW_PLUGIN]
    again = openclaw_config(with_list, Path("/p"), "http://h")
    assert again == with_list  # idempotent: no second path, no second allow entry
    with pytest.raises(Unmergeable, match=r"plugins\.deny"):
        openclaw_config({"plugins": {"deny": [OPENCLAW_PLUGIN]}}, Path("/p"), "http://h")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, "ENGRAM_PRIVATE_KEY=0xk\n"),
        ("A=1", "A=1\nENGRAM_PRIVATE_KEY=0xk\n"),
        ("# c\nENGRAM_PRIVATE_KEY=old\nB=2\n", "# c\nENGRAM_PRIVATE_KEY=0xk\nB=2\n"),
        ("export ENGRAM_PRIVATE_KEY=old\nENGRAM_PRIVATE_KEY = again\n", "ENGRAM_PRIVATE_KEY=0xk\n"),
        ("ENGRAM_PRIVATE_KEY_OTHER=1\n", "ENGRAM_PRIVATE_KEY_OTHER=1\nENGRAM_PRIVATE_KEY=0xk\n"),
    ],
)
def test_dotenv_line(before: str | None, after: str) -> None:
    assert dotenv_with(before, "ENGRAM_PRIVATE_KEY", "0xk") == after


def test_client_paths_follow_openclaws_variables(tmp_path: Path) -> None:
    home, config = tmp_path / "home", tmp_path / "cfg"
    default = client_paths(home, config, {}, None)
    assert default.openclaw_config == home / ".openclaw/openclaw.json"
    assert default.mcp == home / ".claude.json" and default.wallet == config / "wallet.json"
    moved = client_paths(home, config, {"OPENCLAW_STATE_DIR": str(tmp_path / "s"),
                                        "OPENCLAW_CONFIG_PATH": str(tmp_path / "c.json")},
                         tmp_path / ".mcp.json")  # fmt: skip
    assert moved.openclaw_config == tmp_path / "c.json"
    assert moved.openclaw_env == tmp_path / "s/.env"
    assert moved.mcp == tmp_path / ".mcp.json"


def test_urls_are_checked() -> None:
    assert normalize_url(" http://127.0.0.1:8000/ ") == "http://127.0.0.1:8000"
    for bad in ("127.0.0.1:8000", "ftp://h", "http://h:99999"):
        with pytest.raises(InvalidArgument):
            normalize_url(bad)


def test_a_kept_token_must_name_the_wallet_and_have_a_day_left() -> None:
    wallet = new_wallet()
    now = time.time()

    def token(sub: str, left: float) -> str:
        return jwt.encode({"sub": sub, "exp": int(now + left)}, "k" * 32, algorithm="HS256")

    assert token_still_good(token(wallet.address.lower(), 3 * 86_400), wallet, now)
    assert not token_still_good(token(wallet.address.lower(), 3_600), wallet, now)
    assert not token_still_good(token("0xsomeoneelse", 3 * 86_400), wallet, now)
    assert not token_still_good("not a token", wallet, now)


def test_a_private_write_is_0600_atomic_and_keeps_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "config.json"
    real.parent.mkdir()
    real.write_text("{}")
    os.chmod(real, 0o644)
    link = tmp_path / "home" / "config.json"
    link.parent.mkdir()
    link.symlink_to(real)
    target = files.resolved(link)
    files.write(target, '{"a": 1}\n', private=True)
    assert link.is_symlink() and real.read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert [p.name for p in real.parent.iterdir()] == ["config.json"]  # no temporary left


def test_a_kept_copy_is_private_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("one")
    os.chmod(path, 0o644)
    first = files.keep_previous(path)
    path.write_text("two")
    second = files.keep_previous(path)
    assert first != second and first.read_text() == "one" and second.read_text() == "two"
    assert stat.S_IMODE(first.stat().st_mode) == 0o600


def test_a_public_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text("{}")
    os.chmod(path, 0o640)
    files.write(path, "{}\n", private=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_the_console_link_falls_back_to_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    wallet = new_wallet()
    assert console_link("http://h", wallet, False) == ConsoleLink("http://h/console", False)

    def no_console(name: str) -> None:
        raise ModuleNotFoundError(name)

    monkeypatch.setattr("app.setup.server.importlib.import_module", no_console)
    assert console_link("http://h", wallet, True) == ConsoleLink("http://h/console", False)


def test_a_kept_mcp_token_is_read_only_from_engrams_entry_for_this_url() -> None:
    url = "http://h"
    doc = {"mcpServers": {"engram": mcp_http_entry(url, "tok"), "other": {"url": "x"}}}
    assert mcp_bearer_token(doc, url) == "tok"
    assert mcp_bearer_token(doc, "http://elsewhere") is None
    assert mcp_bearer_token({"mcpServers": []}, url) is None
    assert (
        mcp_bearer_token({"mcpServers": {"engram": {"url": f"{url}/mcp", "headers": "x"}}}, url)
        is None
    )
