"""When and on what code a bench script measured: the stamp each one saves beside its figures,
so bench/report.py can tell figures of one session from older ones."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=PROJECT, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def stamp(command: list[str]) -> dict[str, Any]:
    """The time, the commit (and whether the tree had uncommitted changes) and the command."""
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "--short", "HEAD") or "unknown",
        # bench/results is what the scripts write: its changes are not changes to the code
        "uncommitted_changes": bool(
            _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
        ),
        "command": " ".join(["bench/" + Path(command[0]).name, *command[1:]]),
    }


def save(path: Path, figures: dict[str, Any]) -> None:
    """Write `figures` to `path` as JSON, stamped with this run's provenance."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**figures, "provenance": stamp(sys.argv)}, indent=2))
    print(f"saved {path}")
