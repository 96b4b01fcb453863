"""The official `memoclaw` SDK pointed at a served Engram, with nothing of this machine's own
MemoClaw setup leaking in."""

from __future__ import annotations

from pathlib import Path


def sdk_kwargs(base_url: str, tmp_path: Path) -> dict[str, object]:
    """Constructor arguments for `MemoClaw` and `AsyncMemoClaw`, besides the private key."""
    return {
        "base_url": base_url,
        # No retries: a retried POST could store twice and hide the first failure.
        "max_retries": 0,
        # A missing file: a ~/.memoclaw/config.json on this machine must not leak in.
        "config_path": tmp_path / "no-memoclaw-config.json",
    }
