"""The npm manifest (package.json) is installed whole: a `node_modules/` that has anvil but not a
package added to the manifest later (x402's TypeScript client) runs the install step again, and
a node_modules that has everything runs nothing. Offline: npm is kept off PATH, so an install
attempt is seen by its error."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from app.dev.errors import DevChainError
from app.dev.npm import anvil_binary, npm_packages

MANIFEST = {"@foundry-rs/anvil": "1.7.1", "@x402/fetch": "2.27.0"}


def checkout(root: Path, installed: dict[str, str]) -> Path:
    """A project root with the manifest and `installed` packages (name -> version) in its
    node_modules, anvil's binary among them (the real one, linked)."""
    anvil = anvil_binary()
    root.mkdir()
    (root / "package.json").write_text(json.dumps({"private": True, "dependencies": MANIFEST}))
    for name, version in installed.items():
        package = root / "node_modules" / name
        package.mkdir(parents=True)
        (package / "package.json").write_text(json.dumps({"name": name, "version": version}))
    (root / "node_modules" / "@foundry-rs" / "anvil" / anvil.name).symlink_to(anvil)
    return root


@pytest.fixture
def no_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))


def test_a_package_missing_beside_anvil_runs_the_install(tmp_path: Path, no_npm: None) -> None:
    root = checkout(tmp_path / "repo", {"@foundry-rs/anvil": "1.7.1"})
    with pytest.raises(DevChainError, match="`npm` is not on PATH"):
        npm_packages(root)


def test_an_older_version_counts_as_missing(tmp_path: Path, no_npm: None) -> None:
    root = checkout(tmp_path / "repo", {"@foundry-rs/anvil": "1.7.1", "@x402/fetch": "2.26.0"})
    with pytest.raises(DevChainError, match="`npm` is not on PATH"):
        npm_packages(root)


def test_anvil_still_runs_when_the_install_of_the_others_fails(
    tmp_path: Path, no_npm: None, caplog: pytest.LogCaptureFixture
) -> None:
    root = checkout(tmp_path / "repo", {"@foundry-rs/anvil": "1.7.1"})
    with caplog.at_level(logging.WARNING, logger="app.dev.npm"):
        assert anvil_binary(root) == root / "node_modules" / "@foundry-rs" / "anvil" / "anvil"
    assert "`npm` is not on PATH" in caplog.text


def test_a_complete_node_modules_installs_nothing(tmp_path: Path, no_npm: None) -> None:
    root = checkout(tmp_path / "repo", MANIFEST)
    assert npm_packages(root) == root
    assert anvil_binary(root).parent == root / "node_modules" / "@foundry-rs" / "anvil"
