"""The dev tools (app/dev, the `dev` extra) stay off the production path: the app loads without
them, and `engram serve --dev-chain` without the extra says which extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.server import engram_env

# `import vyper` fails as in an install without the extra: a None entry in sys.modules makes
# Python's import raise ModuleNotFoundError for it.
WITHOUT_VYPER = "import sys; sys.modules['vyper'] = None; "


def run_python(code: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=engram_env(data_dir), capture_output=True, text=True,
        timeout=120, cwd=data_dir,
    )  # fmt: skip


def test_dev_chain_without_the_dev_extra_names_the_extra(tmp_path: Path) -> None:
    done = run_python(
        WITHOUT_VYPER + "from app.cli import main; main(['serve', '--dev-chain'])", tmp_path
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "engram serve --dev-chain: the dev chain needs the dev extra (vyper is not installed): "
        "pip install 'engram-x402[dev]' (in a checkout: pip install -e '.[dev]')"
    ], done.stderr
    # checked first: no embedded database was started for it
    assert not (tmp_path / "pgdata").exists()


def test_the_app_loads_without_the_dev_tools(tmp_path: Path) -> None:
    done = run_python(
        WITHOUT_VYPER + "import app.asgi, app.cli; "
        "print(sorted(m for m in sys.modules if m == 'app.dev' or m.startswith('app.dev.')))",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_one_process_at_a_time_installs_or_looks_for_anvil(tmp_path: Path) -> None:
    """The suite's workers start at once on a fresh checkout: while one holds the install lock
    (npm may be writing the binary), another process waits for it instead of running a
    half-written anvil (ETXTBSY)."""
    from app.dev.npm import _installing

    probe = (
        "import fcntl, sys; f = open(sys.argv[1], 'w')\n"
        "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
        "except BlockingIOError:\n    print('held')\n"
    )
    lock = str(tmp_path / ".engram-npm-install.lock")
    with _installing(tmp_path):
        held = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True)
    free = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True)
    assert (held.stdout.strip(), free.stdout.strip()) == ("held", "free")
