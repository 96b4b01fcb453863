"""The real Redis that tests of shared state use (ENGRAM_TEST_REDIS_URL; by default database 15
of the one on 127.0.0.1:6379, away from anything else kept there)."""

from __future__ import annotations

import os

REDIS_URL = os.environ.get("ENGRAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
