"""Settings for a test: others' with some fields of some groups changed; every variable the
settings read, and the ones other modules read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from app.config import ENV_KEY, EnvVar, Settings

# Variables in the configuration table (docs/pages/reference/configuration.md) that settings do
# not read, and the module that reads each.
READ_ELSEWHERE = {
    "ENGRAM_MODEL_CACHE": "app/ai/int8.py",
    "ENGRAM_PG_SHARED_BUFFERS": "app/db/embedded.py",
}


def declared() -> list[tuple[str, str, EnvVar[Any]]]:
    """(group, field, variable) for every setting read from the environment."""
    out = []
    for group_name, group in Settings.groups().items():
        for f in fields(group):
            if ENV_KEY in f.metadata:
                out += [(group_name, f.name, var) for var in f.metadata[ENV_KEY].variables()]
    return out


def engram_variables() -> set[str]:
    """Every ENGRAM_* variable Engram reads."""
    return {var.name for _, _, var in declared()} | set(READ_ELSEWHERE)


def changed(settings: Settings, **groups: Mapping[str, Any]) -> Settings:
    """`changed(settings, limits={"free_tier_calls": 2}, x402={"pay_to": pay_to})`: each keyword
    names a group of Settings and the fields of it to change; everything else stays as it is."""
    return replace(
        settings,
        **{name: replace(getattr(settings, name), **fields) for name, fields in groups.items()},
    )
