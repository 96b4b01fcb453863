"""The code stays lint-clean, formatted and strictly typed: CI runs these through pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PATHS = ["app", "tests", "alembic", "bench"]


@pytest.mark.parametrize(
    "command",
    [
        [str(BIN / "ruff"), "check", *PATHS],
        [str(BIN / "ruff"), "format", "--check", *PATHS],
        [str(BIN / "mypy")],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_tool_passes(command: list[str]) -> None:
    done = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
