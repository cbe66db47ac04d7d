"""A client-side request-rate limit shared by targets and judges (`--rps`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token

from evalkit.errors import BadConfig


class RateLimiter:
    """Spaces calls at least 1/rps seconds apart, across every coroutine that shares it.

    Each `acquire()` reserves the next free slot and sleeps until it comes, so the
    reservation order is the call order and no burst is ever allowed: at most one
    start per interval, whatever the concurrency. A cancelled waiter leaves its slot
    unused (the limiter errs on the slow side).

    Args:
        rps: requests per second, > 0.
        clock: monotonic clock in seconds (injectable for tests).
        sleep: async sleep (injectable for tests).

    Raises:
        BadConfig: rps is not a positive number.
    """

    def __init__(
        self,
        rps: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ):
        if not isinstance(rps, int | float) or isinstance(rps, bool) or not rps > 0:
            raise BadConfig(f"--rps must be a positive number, got {rps!r}")
        self.rps = float(rps)
        self._interval = 1.0 / self.rps
        self._clock = clock
        self._sleep = sleep
        self._next = float("-inf")

    async def acquire(self) -> None:
        """Wait for this caller's slot. No lock needed: the reservation has no await in it."""
        now = self._clock()
        slot = max(now, self._next)
        self._next = slot + self._interval
        if slot > now:
            timer = _ASK_TIMER.get()
            if timer is None:
                await self._sleep(slot - now)
                return
            # Measured on the ask timer's own clock, so that it subtracts exactly.
            t0 = timer.clock()
            try:
                await self._sleep(slot - now)
            finally:
                timer.throttled_s += timer.clock() - t0

    async def __aenter__(self) -> RateLimiter:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class AskTimer:
    """Times one ask of the target without its waits for `--rps` slots (issue 43).

    A throttle is the harness's own doing, not the chatbot's: at `--rps 2` a 17 ms answer
    waited up to 500 ms for its slot, and that wait showed as the case's latency. Every
    RateLimiter wait inside `with AskTimer() as t:` (the target's tries, retries included,
    in this task) is added to `t.throttled_s`, and `t.ms` is the wall time less those waits.

    Args:
        clock: the timer's clock in seconds (injectable for tests); the waits are read on it too.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.throttled_s = 0.0
        self._start = self._stop = 0.0
        self._token: Token[AskTimer | None] | None = None

    def __enter__(self) -> AskTimer:
        self._token = _ASK_TIMER.set(self)
        self._start = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = self.clock()
        if self._token is not None:
            _ASK_TIMER.reset(self._token)
            self._token = None

    @property
    def ms(self) -> float:
        """The ask's latency in milliseconds, throttle waits left out (never below 0)."""
        return max(0.0, (self._stop - self._start - self.throttled_s) * 1000)


# The ask being timed in this task, if any: a judge's or stats call outside one is not counted.
_ASK_TIMER: ContextVar[AskTimer | None] = ContextVar("evalkit_ask_timer", default=None)
