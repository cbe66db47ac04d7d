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


class AdvancingTime(FakeTime):
    """A clock that sleeping advances: the limiter's waits show on it, as real waits would."""

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_throttle_wait_is_not_the_chatbots_latency() -> None:
    """Issue 43: at --rps 2 a chatbot answering in 17 ms measured 500 ms a case, the wait for
    its slot. The runner times an ask with `timed_ask` (the session's timer), which leaves the
    limiter's waits out."""
    from evalkit.run.session import timed_ask
    from evalkit.schema import AskRequest
    from evalkit.targets import CallableTarget

    t = AdvancingTime()

    async def bot(request: dict) -> dict:
        t.now += 0.017  # the chatbot's own 17 ms
        return {"answer": "a", "references": [], "abstained": False}

    target = CallableTarget(bot, rps=2)
    target._limiter = RateLimiter(2, clock=t.clock, sleep=t.sleep)  # the same limiter on the fake clock

    async def go() -> list[float]:
        return [(await timed_ask(target, AskRequest(question="q"), f"c{i}", clock=t.clock))[1] for i in range(3)]

    latencies = asyncio.run(go())
    # by hand: interval 1/2; the 2nd and 3rd asks wait 1/2 - 0.017 for their slots, which
    # were counted before (17, 500, 500 ms); the chatbot's own time is 17 ms each
    assert t.sleeps == [pytest.approx(0.5 - 0.017)] * 2
    assert latencies == [pytest.approx(17.0)] * 3


def test_an_ask_timer_counts_only_waits_inside_it() -> None:
    from evalkit.net.ratelimit import AskTimer

    t = AdvancingTime()
    limiter = RateLimiter(1, clock=t.clock, sleep=t.sleep)

    async def go() -> AskTimer:
        await limiter.acquire()
        await limiter.acquire()  # a judge's wait, say: outside any ask, counted nowhere
        with AskTimer(t.clock) as timer:
            await limiter.acquire()  # waits 1 s
            t.now += 0.25  # the call
        await limiter.acquire()  # after the ask: not its wait
        return timer

    timer = asyncio.run(go())
    assert t.sleeps == [1.0, 1.0, 0.75]
    assert timer.throttled_s == 1.0
    assert timer.ms == pytest.approx(250.0)
