"""RateLimiter spacing on a fake clock (no real sleeping)."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.errors import BadConfig
from evalkit.net.ratelimit import RateLimiter


class FakeTime:
    """A clock that only moves when someone sleeps (or the test advances it)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def test_concurrent_callers_get_slots_one_interval_apart() -> None:
    t = FakeTime()
    limiter = RateLimiter(2, clock=t.clock, sleep=t.sleep)

    async def go() -> None:
        await asyncio.gather(*(limiter.acquire() for _ in range(4)))

    asyncio.run(go())
    # by hand: rps 2 -> interval 1/2; the first starts at once, the others wait 1/2, 2/2, 3/2
    assert t.sleeps == [1 / 2, 2 / 2, 3 / 2]


def test_time_spent_working_counts_towards_the_interval() -> None:
    t = FakeTime()
    limiter = RateLimiter(4, clock=t.clock, sleep=t.sleep)

    async def go() -> None:
        await limiter.acquire()
        t.now += 0.1  # the request itself took 0.1 s
        await limiter.acquire()

    asyncio.run(go())
    # by hand: interval 1/4; 0.1 s already passed -> wait 1/4 - 0.1
    assert t.sleeps == [pytest.approx(1 / 4 - 0.1)]


def test_idle_time_does_not_build_up_a_burst() -> None:
    t = FakeTime()
    limiter = RateLimiter(1, clock=t.clock, sleep=t.sleep)

    async def go() -> None:
        await limiter.acquire()
        t.now += 100.0
        await limiter.acquire()
        await limiter.acquire()

    asyncio.run(go())
    # by hand: after a long idle the next call goes at once, the one after waits a full 1/1
    assert t.sleeps == [1.0]


def test_context_manager_acquires() -> None:
    t = FakeTime()
    limiter = RateLimiter(10, clock=t.clock, sleep=t.sleep)

    async def go() -> None:
        async with limiter:
            pass
        async with limiter:
            pass

    asyncio.run(go())
    assert t.sleeps == [pytest.approx(1 / 10)]


@pytest.mark.parametrize("rps", [0, -1, float("nan"), True])
def test_non_positive_rps_is_bad_config(rps: float) -> None:
    with pytest.raises(BadConfig, match="--rps"):
        RateLimiter(rps)
