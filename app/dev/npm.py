"""The anvil binary and the other packages of the project's npm manifest: found in
`node_modules/` (a checkout's, or for an installed Engram a per-user directory holding the
manifest shipped in the package), installed there by `npm install` once when missing; nothing is
downloaded from anywhere else."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import platformdirs

from app.dev.errors import DevChainError
from app.infra.project_files import from_checkout, shipped

log = logging.getLogger(__name__)

ANVIL_NPM_PACKAGE = "@foundry-rs/anvil"
NPM_MANIFEST = ("package.json", "package-lock.json")
NPM_INSTALL_TIMEOUT_S = 600.0

# npm's platform packages for the anvil binary: (sys.platform, machine) -> package suffix.
_PLATFORM_PACKAGES = {
    ("linux", "x86_64"): "linux-amd64",
    ("linux", "amd64"): "linux-amd64",
    ("linux", "aarch64"): "linux-arm64",
    ("linux", "arm64"): "linux-arm64",
    ("darwin", "x86_64"): "darwin-amd64",
    ("darwin", "arm64"): "darwin-arm64",
    ("win32", "amd64"): "win32-amd64",
    ("win32", "x86_64"): "win32-amd64",
}

_install_lock = threading.Lock()
_npm_install_attempted: set[Path] = set()  # project roots, so: once per process


def _binary_name() -> str:
    return "anvil.exe" if sys.platform == "win32" else "anvil"


def _anvil_candidates(root: Path) -> list[Path]:
    scope = root / "node_modules" / "@foundry-rs"
    candidates: list[Path] = []
    suffix = _PLATFORM_PACKAGES.get((sys.platform, platform.machine().lower()))
    if suffix is not None:
        # What npm installs: the optional dependency matching this platform ships the binary.
        candidates.append(scope / f"anvil-{suffix}" / "bin" / _binary_name())
    # Where the package's postinstall script writes the binary when optional dependencies were
    # skipped (it fetches the same platform package from the npm registry).
    candidates.append(scope / "anvil" / _binary_name())
    return candidates


def _find_anvil(root: Path) -> Path | None:
    for candidate in _anvil_candidates(root):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def devtools_root() -> Path:
    """Where the npm manifest (package.json, package-lock.json) is and anvil gets installed.

    A checkout's own root; for an installed Engram (a wheel), `devtools/` in the per-user data
    directory (ENGRAM_DATA_DIR's parent rule, as for the embedded PostgreSQL) with the manifest
    copied from the package: npm never writes into site-packages.
    """
    if from_checkout():
        return shipped("package.json").parent
    override = os.environ.get("ENGRAM_DATA_DIR")
    parent = Path(override).expanduser() if override else platformdirs.user_data_path("engram")
    root = parent / "devtools"
    root.mkdir(parents=True, exist_ok=True)
    for name in NPM_MANIFEST:
        source, copy = shipped(name), root / name
        if not copy.is_file() or copy.read_bytes() != source.read_bytes():
            shutil.copyfile(source, copy)
    return root


def anvil_binary(project_root: Path | None = None) -> Path:
    """Path of the anvil binary from the project's `node_modules/`.

    If it is missing, or another package of the manifest is (a `node_modules/` installed before
    the package was added), runs the project's own install step (`npm install --no-audit
    --no-fund` in the project root, which reads `package.json`/`package-lock.json`) once per
    process. Raises DevChainError with a clear message when anvil is missing and npm is missing
    or the install fails (typically: offline); with anvil there, a failed install only warns.
    """
    project_root = project_root or devtools_root()
    with _install_lock, _installing(project_root):
        found = _find_anvil(project_root)
        if found is not None and not _missing_packages(project_root):
            return found
        if project_root not in _npm_install_attempted:
            _npm_install_attempted.add(project_root)
            try:
                _npm_install(project_root)
            except DevChainError as exc:
                if found is None:
                    raise
                log.warning("npm packages missing beside anvil: %s", exc)
            found = _find_anvil(project_root)
        if found is not None:
            return found
    looked = "\n  ".join(str(p) for p in _anvil_candidates(project_root))
    raise DevChainError(
        f"anvil binary not found for {sys.platform}/{platform.machine()} although `npm install` "
        f"was run in {project_root} (once per process; see the first error); looked at:\n  "
        f"{looked}"
    )


def npm_packages(project_root: Path | None = None) -> Path:
    """The directory whose `node_modules/` holds every package of the npm manifest at its pinned
    version (anvil, and x402's TypeScript client that tests/payments/test_npm_client.py runs),
    after the project's install step when one is missing. Raises DevChainError as anvil_binary
    does."""
    project_root = project_root or devtools_root()
    with _install_lock, _installing(project_root):
        missing = _missing_packages(project_root)
        if missing and project_root not in _npm_install_attempted:
            _npm_install_attempted.add(project_root)
            _npm_install(project_root)
            missing = _missing_packages(project_root)
    if missing:
        raise DevChainError(
            f"npm packages {', '.join(missing)} are not in {project_root / 'node_modules'} "
            "although `npm install` was run there (once per process; see the first error)"
        )
    return project_root


def _missing_packages(root: Path) -> list[str]:
    """The manifest's dependencies (`name@version`) not installed at their pinned version: an
    existing `node_modules/` gets a package added to the manifest after it was installed."""
    try:
        manifest = json.loads((root / "package.json").read_text())
    except (OSError, ValueError):
        return []  # no manifest: nothing to check (_npm_install says it is missing)
    missing = []
    for name, version in (manifest.get("dependencies") or {}).items():
        try:
            installed = json.loads((root / "node_modules" / name / "package.json").read_text())
        except (OSError, ValueError):
            installed = {}
        if installed.get("version") != version:
            missing.append(f"{name}@{version}")
    return missing


@contextlib.contextmanager
def _installing(root: Path) -> Iterator[None]:
    """One process at a time looks for anvil or installs it under `root`: the suite's workers
    (and several `engram serve --dev-chain`) start at once on a fresh checkout, and running the
    binary while another process's npm is still writing it fails (ETXTBSY)."""
    with (root / ".engram-npm-install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _npm_install(root: Path) -> None:
    if not (root / "package.json").is_file():
        raise DevChainError(
            f"{root / 'package.json'} is missing: cannot install {ANVIL_NPM_PACKAGE}"
        )
    npm = shutil.which("npm")
    if npm is None:
        raise DevChainError(
            f"anvil (npm package {ANVIL_NPM_PACKAGE}) is not installed and `npm` is not on PATH. "
            f"Install Node.js >= 20 with npm, then run `npm install` in {root}."
        )
    cmd = [npm, "install", "--no-audit", "--no-fund"]
    log.info("installing %s: %s (in %s)", ANVIL_NPM_PACKAGE, " ".join(cmd), root)
    # Output goes to a file, not a pipe (a pipe that fills up would block npm).
    with tempfile.TemporaryFile("w+") as out:
        try:
            proc = subprocess.run(
                cmd,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=NPM_INSTALL_TIMEOUT_S,
                text=True,
            )
        except subprocess.TimeoutExpired:
            raise DevChainError(
                f"`npm install` in {root} did not finish in {NPM_INSTALL_TIMEOUT_S:.0f} s "
                "(is the npm registry reachable?)"
            ) from None
        out.seek(0)
        output = out.read()
    if proc.returncode != 0:
        hint = ""
        lowered = output.lower()
        if any(s in lowered for s in ("enotfound", "eai_again", "econnrefused", "etimedout")):
            hint = " The npm registry is unreachable (offline?)."
        raise DevChainError(
            f"`npm install` in {root} failed (exit {proc.returncode}).{hint} "
            f"anvil comes from the npm package {ANVIL_NPM_PACKAGE}; run `npm install` there "
            f"once while online.\n--- npm output ---\n{output[-4000:]}"
        )
