"""The OpenClaw plugin's own tests (node's test runner, integrations/openclaw/test/) against a
served Engram, run from pytest so that `.ci/run` covers them. Its npm dependencies are installed
from the plugin's package-lock.json (`npm ci`) when missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "integrations" / "openclaw"


def npm_ci() -> None:
    npm = shutil.which("npm")
    assert npm, "npm is needed for the OpenClaw plugin's tests (Node.js >= 20 with npm)"
    if (PLUGIN / "node_modules" / "@noble" / "curves").is_dir():
        return
    done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PLUGIN, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_openclaw_plugin_node_tests(engram_url: str) -> None:
    npm_ci()
    node = shutil.which("node")
    assert node
    done = subprocess.run(
        [node, "--test", "--test-reporter=tap", "test/"], cwd=PLUGIN, capture_output=True,
        text=True, timeout=300, check=False, env={**os.environ, "ENGRAM_TEST_URL": engram_url},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    passed = re.search(r"^# pass (\d+)$", done.stdout, re.MULTILINE)
    failed = re.search(r"^# fail (\d+)$", done.stdout, re.MULTILINE)
    assert passed and failed, output
    assert int(failed.group(1)) == 0 and int(passed.group(1)) >= 12, output
