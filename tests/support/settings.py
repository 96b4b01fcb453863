"""Settings for a test: others' with some fields of some groups changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from app.config import Settings


def changed(settings: Settings, **groups: Mapping[str, Any]) -> Settings:
    """`changed(settings, limits={"free_tier_calls": 2}, x402={"pay_to": pay_to})`: each keyword
    names a group of Settings and the fields of it to change; everything else stays as it is."""
    return replace(
        settings,
        **{name: replace(getattr(settings, name), **fields) for name, fields in groups.items()},
    )
