"""Build step beyond pyproject.toml: ship the files Engram reads at run time that live beside the
code in a checkout (the Alembic migrations, the dev chain's npm manifest) inside the `app`
package, so a plain `pip install .` (a wheel) runs `engram serve` and `--dev-chain` as a
checkout does. app/shipped.py finds them either way."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# What app/shipped.py serves, copied to app/_bundled/ in the built package (keep in step).
SHIPPED_DIRS = ("alembic",)
SHIPPED_FILES = ("alembic.ini", "package.json", "package-lock.json")


class BuildPyShipped(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout itself
        target = Path(self.build_lib) / "app" / "_bundled"
        target.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED_DIRS:
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(
                ROOT / name, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        for name in SHIPPED_FILES:
            shutil.copy2(ROOT / name, target / name)


setup(cmdclass={"build_py": BuildPyShipped})
