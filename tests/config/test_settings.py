"""Settings: each declared once (variable, default, parser), read as they always were, loaded
without the framework, and the configuration table (docs/pages/reference/configuration.md) true
to the declarations."""

from __future__ import annotations

import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from app.config import (
    EmbedderSettings,
    EnvVar,
    ExtraNetwork,
    Settings,
    comma_list,
    flag,
    import_duty_percent,
    int8_flag,
    integer,
    integer_or_none,
    log_format,
    network_names,
    path,
    positive_integer,
    proxy_list,
    text,
    usd_amount,
    x402_schemes,
)
from tests.support.settings import READ_ELSEWHERE, declared

ROOT = Path(__file__).resolve().parents[2]


def test_loading_settings_loads_no_framework() -> None:
    """app/config.py imports nothing from the app but the contract's defaults, which import
    nothing from it."""
    script = "import sys, app.config; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "litestar" not in loaded
    assert {m for m in loaded if m == "app" or m.startswith("app.")} == {
        "app", "app.config", "app.core", "app.core.contract",
    }  # fmt: skip


def test_an_empty_environment_gives_the_declared_defaults() -> None:
    assert Settings.from_env({}) == Settings()


def test_a_variable_declared_twice_means_one_setting() -> None:
    """Only OPENAI_API_KEY serves two groups (embedder and LLM), with one default and parser."""
    by_name: dict[str, list[EnvVar[Any]]] = {}
    for _, _, var in declared():
        by_name.setdefault(var.name, []).append(var)
    shared = {name: vars_ for name, vars_ in by_name.items() if len(vars_) > 1}
    assert set(shared) == {"OPENAI_API_KEY"}
    assert len({(v.default, v.parse) for v in shared["OPENAI_API_KEY"]}) == 1
    both = Settings.from_env({"OPENAI_API_KEY": "sk-both"})
    assert both.embedder.openai_api_key == both.llm.openai_api_key == "sk-both"


# a value for each parser, and what it reads as
SAMPLES: dict[Any, tuple[str, Any]] = {
    text: ("some-value", "some-value"),
    integer: ("7", 7),
    integer_or_none: ("7", 7),
    positive_integer: ("7", 7),
    path: ("/srv/engram", Path("/srv/engram")),
    comma_list: ("a, b", ("a", "b")),
    usd_amount: ("0.25", Decimal("0.25")),
    log_format: ("text", "text"),
    import_duty_percent: ("7", 7),
    proxy_list: ("127.0.0.1, 10.0.0.0/8", ("127.0.0.1", "10.0.0.0/8")),
    x402_schemes: ("exact, batch-settlement", "exact,batch-settlement"),
    network_names: ("arbitrum", (ExtraNetwork("arbitrum"),)),  # each read with its own variables
}


@pytest.mark.parametrize(
    "group_name, field_name, var", declared(), ids=lambda x: getattr(x, "name", x)
)
def test_every_variable_reaches_its_setting(
    group_name: str, field_name: str, var: EnvVar[Any]
) -> None:
    if var.parse in (flag, int8_flag):
        raw, expected = ("0", False) if var.default else ("1", True)
    else:
        raw, expected = SAMPLES[var.parse]
    value = getattr(getattr(Settings.from_env({var.name: raw}), group_name), field_name)
    for prefix in ("ENGRAM_PRICE_", "ENGRAM_UNIT_PRICE_"):
        if var.name.startswith(prefix):
            value = value[var.name.removeprefix(prefix).lower()]
    assert value == expected != var.default


def test_parsing_is_unchanged() -> None:
    read = Settings.from_env
    with pytest.raises(SystemExit, match=r"^ENGRAM_PORT must be an integer, got 'x'$"):
        read({"ENGRAM_PORT": "x"})
    with pytest.raises(SystemExit, match=r"^ENGRAM_FREE_TIER_CALLS must be an integer, got '1.5'$"):
        read({"ENGRAM_FREE_TIER_CALLS": "1.5"})
    assert read({"ENGRAM_HOST": ""}).server.host == "127.0.0.1"  # empty means unset
    assert read({"ENGRAM_PORT": ""}).server.port == 8000
    with pytest.raises(SystemExit, match=r"^ENGRAM_LOG_FORMAT must be json or text, got 'xml'$"):
        read({"ENGRAM_LOG_FORMAT": "xml"})
    # flags: 0/false/off/no in any case turn one off, anything else on
    for off in ("0", "false", "OFF", "No"):
        assert read({"ENGRAM_RECALL_ACCESS_BOOST": off}).recall.access_boost is False
    for on in ("1", "yes", "true", "anything"):
        assert read({"ENGRAM_RECALL_COUNTS_ACCESS": on}).recall.counts_access is True
    # ENGRAM_EMBED_INT8 kept its own older spelling: lower case only, and "no" is not off
    for off in ("0", "false", "off"):
        assert read({"ENGRAM_EMBED_INT8": off}).embedder.int8 is False
    for on in ("", "1", "no", "FALSE", "Off"):
        assert read({"ENGRAM_EMBED_INT8": on}).embedder.int8 is True
    # 0 means unset for the embedder's dimensions and the token's decimals
    assert read({"ENGRAM_EMBED_DIMS": "0", "ENGRAM_X402_ASSET_DECIMALS": "0"}) == Settings()
    assert read({"ENGRAM_X402_ASSET_DECIMALS": "18"}).x402.asset_decimals == 18
    jwt = read({"ENGRAM_JWT_SECRETS": " k1:s1 ,, s2 ,"}).auth.jwt_secrets
    assert jwt == ("k1:s1", "s2")
    assert read({"ENGRAM_JWT_SECRETS": " , "}).auth.jwt_secrets == ()
    with pytest.raises(SystemExit, match=r"^ENGRAM_PRICE_STORE must be a USD amount$"):
        read({"ENGRAM_PRICE_STORE": "free"})
    with pytest.raises(SystemExit, match=r"^ENGRAM_PRICE_LLM_CALL must be positive$"):
        read({"ENGRAM_PRICE_LLM_CALL": "-0.01"})
    assert read({"ENGRAM_TRUSTED_PROXIES": "*"}).server.trusted_proxies == ("*",)
    assert read({"ENGRAM_TRUSTED_PROXIES": "::1, fd00::/8"}).server.trusted_proxies == (
        "::1", "fd00::/8")  # fmt: skip
    with pytest.raises(SystemExit, match=r"^ENGRAM_TRUSTED_PROXIES lists 'proxy.local': an IP"):
        read({"ENGRAM_TRUSTED_PROXIES": "10.0.0.1, proxy.local"})
    assert read({}).x402.channels is False  # payment channels are off unless asked for
    assert read({"ENGRAM_X402_SCHEMES": "exact,batch-settlement"}).x402.channels is True
    assert read({"ENGRAM_X402_SCHEMES": "exact,upto"}).x402.upto is True
    for wrong in ("batch-settlement", "exact,sometimes"):
        with pytest.raises(SystemExit, match=r"^ENGRAM_X402_SCHEMES must list exact"):
            read({"ENGRAM_X402_SCHEMES": wrong})


def test_the_embedder_group_knows_its_dimension() -> None:
    assert EmbedderSettings().expected_dims == 384
    assert EmbedderSettings(openai_api_key="sk").expected_dims == 512
    assert EmbedderSettings(base_url="http://127.0.0.1:9/v1", dims=768).expected_dims == 768


def test_keys_stay_out_of_repr() -> None:
    secrets = {
        "OPENAI_API_KEY": "sk-not-in-repr",
        "ENGRAM_X402_RELAYER_KEY": "0xrelayer-not-in-repr",
        "ENGRAM_JWT_SECRETS": "jwt-not-in-repr",
    }
    shown = repr(Settings.from_env(secrets))
    assert not [value for value in secrets.values() if value in shown]


def readme_table() -> dict[str, str]:
    """The docs' configuration table: variable -> its default column."""
    page = (ROOT / "docs" / "pages" / "reference" / "configuration.md").read_text()
    section = page.split("\n## Variables\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]*) \|", section, flags=re.MULTILINE)
    assert len(rows) == len({name for name, _ in rows}), "a variable listed twice"
    return {name: default.strip() for name, default in rows}


def shown(default: object) -> str | None:
    """A default as the table writes it; None when unset is the default (the table says what that
    means, e.g. "embedded PostgreSQL")."""
    if default is None or default == ():
        return None
    if isinstance(default, bool):
        return "1" if default else "0"
    return str(default)


def test_readme_lists_every_variable_with_its_default() -> None:
    table = readme_table()
    variables = {var.name: var for _, _, var in declared()}
    assert set(table) == set(variables) | set(READ_ELSEWHERE)
    for name, module in READ_ELSEWHERE.items():
        assert name in (ROOT / module).read_text()
    for name, var in variables.items():
        value = shown(var.default)
        if value is None:
            assert table[name], f"configuration.md: say what {name} unset means"
        else:
            # a gloss may follow the value: "604800 (7 days)"
            assert table[name] == value or table[name].startswith(f"{value} ("), name


def test_the_local_model_takes_one_thread_unless_told_and_never_none() -> None:
    assert Settings.from_env({}).embedder.threads == 1
    assert Settings.from_env({"ENGRAM_EMBED_THREADS": "2"}).embedder.threads == 2
    with pytest.raises(SystemExit, match="ENGRAM_EMBED_THREADS must be 1 or more"):
        Settings.from_env({"ENGRAM_EMBED_THREADS": "0"})
