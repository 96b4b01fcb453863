"""Jobs an instance runs on a timer, off the request path (each instance runs its own; the jobs
are safe to run concurrently from several)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("engram.periodic")


async def every(
    seconds: float, job: Callable[[], Awaitable[object]], name: str, first_after: float = 0.0
) -> None:
    """Run `job` after `first_after` seconds, then every `seconds`, until cancelled; a failed
    run is logged and the next one goes ahead (a database restart must not stop the timer)."""
    await asyncio.sleep(first_after)
    while True:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("periodic job %s failed", name)
        await asyncio.sleep(seconds)
