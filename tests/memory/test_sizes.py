"""The size memo that picks recall's and dedup's plans (app/memory/sizes.py)."""

from __future__ import annotations

from app.memory.sizes import RecentSizes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Counter:
    def __init__(self, value: int) -> None:
        self.value = value
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        return self.value


async def test_a_count_is_read_once_while_recent_then_again() -> None:
    clock, counter = Clock(), Counter(40)
    sizes = RecentSizes(max_age=5.0, clock=clock)
    assert await sizes.count("w", counter) == 40
    counter.value = 41
    clock.now += 5.0
    assert await sizes.count("w", counter) == 40  # still recent: the plan it picks is the same
    assert counter.calls == 1
    clock.now += 0.1
    assert await sizes.count("w", counter) == 41
    assert counter.calls == 2


async def test_each_filter_has_its_own_count_and_the_memo_is_bounded() -> None:
    sizes = RecentSizes(max_filters=2, clock=Clock())
    a, b, c = Counter(1), Counter(2), Counter(3)
    assert [await sizes.count(k, n) for k, n in (("a", a), ("b", b), ("c", c))] == [1, 2, 3]
    await sizes.count("a", a)  # the oldest was dropped: counted again
    assert (a.calls, b.calls, c.calls) == (2, 1, 1)
