"""Files Engram reads at run time that live beside the code in a checkout: the Alembic
migrations, the dev chain's npm manifest and the agent integrations (`engram setup`). Run from a
checkout (or an editable install) they are read there; a built package carries a copy in
app/_bundled/ (setup.py puts it there)."""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
BUNDLED = Path(__file__).resolve().parents[1] / "_bundled"


def from_checkout() -> bool:
    """Whether this code runs from a checkout of the project (not an installed package)."""
    return (CHECKOUT / "pyproject.toml").is_file()


def shipped(name: str) -> Path:
    """The path of a shipped file or directory (`alembic`, `integrations`, `package.json`...)."""
    path = (CHECKOUT if from_checkout() else BUNDLED) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: this Engram installation is incomplete")
    return path
