"""Build steps beyond pyproject.toml:

- ship the files Engram reads at run time that live beside the code in a checkout (the Alembic
  migrations, the dev chain's npm manifest, the agent integrations `engram setup` configures)
  inside the `app` package, so a plain `pip install .` (a wheel) runs `engram serve`,
  `--dev-chain` and `engram setup` as a checkout does (app/infra/project_files.py finds them either way);
- build the console's scripts (app/console/web, from the npm registry: Chart.js, Cytoscape.js,
  esbuild) into app/console/static/dist, which the package data carries: a wheel holds them
  built, so a pip user needs no Node.js. Editable installs build them too (the README's first
  command), and `make console` rebuilds them after an edit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# What app/infra/project_files.py serves, copied to app/_bundled/ in the built package (keep in step).
SHIPPED_DIRS = ("alembic", "integrations")
SHIPPED_FILES = ("alembic.ini", "package.json", "package-lock.json")


CONSOLE_WEB = ROOT / "app" / "console" / "web"
CONSOLE_DIST = ROOT / "app" / "console" / "static" / "dist"
CONSOLE_SCRIPTS = ("signin.js", "memory.js", "usage.js", "team.js", "link.js")


def console_built() -> bool:
    """The console's scripts are built, and newer than every source and the lock file."""
    built = [CONSOLE_DIST / name for name in CONSOLE_SCRIPTS]
    if not all(p.is_file() for p in built):
        return False
    sources = [*CONSOLE_WEB.joinpath("src").rglob("*.js"), CONSOLE_WEB / "package-lock.json"]
    return min(p.stat().st_mtime for p in built) >= max(p.stat().st_mtime for p in sources)


def build_console(required: bool) -> None:
    """Build the console's scripts unless built. A wheel must carry them (`required`); an
    editable install without npm goes on without them (the console says so) rather than fail
    the whole install."""
    if console_built() or not CONSOLE_WEB.is_dir():
        return  # built already, or an sdist that carries the built scripts only
    npm = shutil.which("npm")
    if npm is None:
        message = (
            "engram: building the console's scripts needs npm (Node.js >= 20); install it and"
            " run `make console`, or install Engram from a wheel, which carries them built"
        )
        if required:
            sys.exit(message)
        print(message, file=sys.stderr)
        return
    for step in (["ci", "--no-audit", "--no-fund"], ["run", "build"]):
        subprocess.run([npm, *step], cwd=CONSOLE_WEB, check=True, stdout=subprocess.DEVNULL)


class BuildPyShipped(build_py):
    def run(self) -> None:
        build_console(required=not getattr(self, "editable_mode", False))
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout itself
        target = Path(self.build_lib) / "app" / "_bundled"
        target.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED_DIRS:
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(
                ROOT / name,
                target / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules"),
            )
        for name in SHIPPED_FILES:
            shutil.copy2(ROOT / name, target / name)


setup(cmdclass={"build_py": BuildPyShipped})
