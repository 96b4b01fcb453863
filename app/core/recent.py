"""What a process learnt recently, by key, for a while: the memo behind the free tier's calls left
(app/free_tier/service.py) and the sizes that pick recall's plans (app/memory/sizes.py). Each user
says why a value some seconds old is good enough for what it decides."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class RecentValues(Generic[K, V]):
    """Values by key, each trusted for `max_age` seconds; the `max_keys` last learnt are kept."""

    max_age: float
    max_keys: int
    clock: Callable[[], float] = time.monotonic
    _seen: OrderedDict[K, tuple[float, V]] = field(default_factory=OrderedDict)

    def recent(self, key: K) -> V | None:
        """The value learnt for `key` no more than `max_age` ago, else None."""
        seen = self._seen.get(key)
        if seen is None or self.clock() - seen[0] > self.max_age:
            return None
        return seen[1]

    def learnt(self, key: K, value: V) -> None:
        self._seen[key] = (self.clock(), value)
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)
