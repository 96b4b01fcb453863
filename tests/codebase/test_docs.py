"""The docs site (docs/mkdocs.yml, pages in docs/pages/) builds with `mkdocs build --strict`: every
page in the nav, every link and anchor between pages found. The README's links land on files that
exist, its table on pages of the site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "docs" / "mkdocs.yml"
PAGES = ROOT / "docs" / "pages"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    # not -q: mkdocs counts warnings for --strict only when it logs them
    command = ["build", "--strict", "-f", str(CONFIG), "-d", str(tmp_path / "site")]
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's banner, not a finding
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def readme_links() -> list[str]:
    """The README's relative link targets (web addresses and anchors left out)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    return [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_the_readme_links_to_files_that_exist() -> None:
    links = readme_links()
    missing = [t for t in links if not (ROOT / t.split("#", 1)[0]).is_file()]
    assert not missing, missing


def test_the_readme_table_points_into_the_site() -> None:
    pages = [t.split("#", 1)[0] for t in readme_links() if t.startswith("docs/")]
    assert len(pages) >= 20, pages
    outside = [p for p in pages if not (p.startswith("docs/pages/") and p.endswith(".md"))]
    assert not outside, outside
    # every section of the site is reached from the README
    sections = {Path(p).relative_to("docs/pages").parts[0] for p in pages}
    on_disk = {p.name for p in PAGES.iterdir() if p.is_dir() and any(p.glob("*.md"))}
    assert sections == on_disk, (sections, on_disk)
