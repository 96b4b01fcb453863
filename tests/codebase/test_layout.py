"""The docs' Layout page (docs/pages/concepts/layout.md) names every package and module at the top
of app/, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def layout_block() -> str:
    page = (ROOT / "docs" / "pages" / "concepts" / "layout.md").read_text()
    return page.split("```", 2)[1]


def test_the_readme_layout_matches_app() -> None:
    listed = set(re.findall(r"^(app/[\w.]+/?)", layout_block(), re.MULTILINE))
    actual = {
        f"app/{p.name}/" if p.is_dir() else f"app/{p.name}"
        for p in (ROOT / "app").iterdir()
        if not p.name.startswith("_")
        and (p.is_dir() or p.suffix == ".py")
        and p.name != "__pycache__"
    }
    assert listed == actual, f"missing: {actual - listed}, stale: {listed - actual}"


def test_the_readme_layout_names_the_top_level_folders() -> None:
    listed = set(re.findall(r"^(\w+)/", layout_block(), re.MULTILINE))
    for folder in ("alembic", "deploy", "docs", "integrations", "tests", "bench"):
        assert folder in listed and (ROOT / folder).is_dir(), folder
