"""Core memories: a wallet's pinned (always-loaded) memories, listed, pinned and unpinned."""
