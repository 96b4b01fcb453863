"""A plain `pip install '.[dev]'` (a wheel, not editable, with the dev extra) into a fresh
virtualenv runs `engram serve --dev-chain` from a fresh database, and x402's reference client pays
it: the migrations and the dev chain's npm manifest ship inside the package (setup.py,
app/infra/project_files.py), and so do the console's pages and built scripts.

Kept cheap: the fresh venv borrows the test venv's dependencies through a .pth line, so pip finds
every requirement (the dev extra's too) already satisfied and builds and installs Engram alone;
anvil comes from npm's cache after the first run.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import httpx

from tests.support.db import create_database
from tests.support.server import engram_env, start_serve, stop_serve

ROOT = Path(__file__).resolve().parents[2]
# What a checkout holds besides the source: never part of what is built.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "build", "*.egg-info", "__pycache__", ".*_cache",
    ".engram-data", "bench",
)  # fmt: skip
INSTALL_TIMEOUT_S = 600


def _fresh_venv_with_wheel(tmp_path: Path) -> Path:
    """A new virtualenv where Engram is installed, with its dev extra, from a wheel built from
    a copy of the checkout; its dependencies are the test venv's. Returns its bin directory."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "engram_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{source}[dev]"],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # the code that runs is the installed wheel's, not the checkout's
    where = subprocess.run(
        [str(python), "-c", "import app, app.infra.project_files as s; print(app.__file__, s.from_checkout())"],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    ).stdout.split()  # fmt: skip
    assert where[0].startswith(site) and where[1] == "False", where
    return venv / "bin"


async def _fresh_database(database_url: str) -> str:
    return await create_database(database_url, f"engram_wheel_{uuid.uuid4().hex[:12]}")


def test_wheel_install_serves_the_dev_chain_and_takes_a_payment(
    tmp_path: Path, database_url: str
) -> None:
    bin_dir = _fresh_venv_with_wheel(tmp_path)
    data = tmp_path / "data"
    log = tmp_path / "serve.log"
    fresh_db = asyncio.run(_fresh_database(database_url))  # the migrations run from the wheel
    proc, url = start_serve(
        data, log, "--dev-chain", engram=bin_dir / "engram", ENGRAM_DATABASE_URL=fresh_db
    )
    try:
        out = tmp_path / "agent.log"
        with out.open("w") as sink:
            done = subprocess.run(
                [str(bin_dir / "python"), "-m", "app.dev.paying_agent", "--url", url],
                stdout=sink, stderr=subprocess.STDOUT, timeout=120, env=engram_env(data),
                cwd=tmp_path,
            )  # fmt: skip
        text = out.read_text()
        assert done.returncode == 0, text
        assert "402 on /v1/store" in text, text
        assert re.search(r"paid store: memory [0-9a-f-]{36} stored; tx 0x[0-9a-f]{64}", text), text
        # the console ships built: its pages and scripts come from the wheel, no Node.js needed
        assert httpx.get(f"{url}/console/signin", timeout=30).status_code == 200
        for script in ("signin.js", "memory.js", "usage.js", "team.js", "link.js"):
            r = httpx.get(f"{url}/console/static/dist/{script}", timeout=30)
            assert r.status_code == 200 and b"document" in r.content, script
    finally:
        stop_serve(proc, data, log)
    # anvil was installed for the user, beside the data, from the manifest in the package
    assert (data / "devtools" / "package.json").read_bytes() == (ROOT / "package.json").read_bytes()
    assert (data / "devtools" / "node_modules" / "@foundry-rs").is_dir()
