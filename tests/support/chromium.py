"""Debian's Chromium for browser tests: installed from the project's own test run when missing
(`apt-get install chromium`), started headless with the network cut off except loopback."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# How long the page's scripts may run (virtual time) before the DOM is dumped.
RENDER_BUDGET_MS = 15_000
DUMP_TIMEOUT_S = 120
APT_TIMEOUT_S = 900
INSTALL_LOCK = Path(tempfile.gettempdir()) / "engram-chromium-install.lock"

# The flags that work on this kind of machine (no sandbox as root, no background traffic), plus
# the network cut: every host name fails to resolve and every non-loopback request goes to a
# closed proxy port (Chromium never proxies loopback), so only the served page is reachable.
OFFLINE_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
    "--proxy-server=http://127.0.0.1:9",
)


def chromium() -> Path:
    """Path of Debian's chromium, installing the package first if it is missing (one install
    at a time: the suite's workers may all ask at once, and dpkg takes one at a time)."""
    found = shutil.which("chromium")
    if found:
        return Path(found)
    with open(INSTALL_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _installed()


def _installed() -> Path:
    found = shutil.which("chromium")
    if found:
        return Path(found)  # another worker installed it while this one waited
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.fail("chromium is not installed and apt-get is not available to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "--no-install-recommends", "chromium"]
    if subprocess.run(install, env=env, capture_output=True, timeout=APT_TIMEOUT_S).returncode:
        subprocess.run([apt, "update"], env=env, capture_output=True, timeout=APT_TIMEOUT_S)
        done = subprocess.run(install, env=env, capture_output=True, timeout=APT_TIMEOUT_S)
        if done.returncode:
            pytest.fail(f"apt-get install chromium failed:\n{done.stderr.decode()[-2000:]}")
    found = shutil.which("chromium")
    if not found:
        pytest.fail("apt-get installed chromium, yet it is not on PATH")
    return Path(found)


def dump_dom_offline(url: str) -> str:
    """The DOM of `url` after its scripts ran, rendered in headless Chromium with no network."""
    with tempfile.TemporaryDirectory(prefix="engram-chromium-") as profile:
        done = subprocess.run(
            [
                str(chromium()),
                *OFFLINE_FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={RENDER_BUDGET_MS}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            timeout=DUMP_TIMEOUT_S,
        )
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    return done.stdout.decode()
