"""A client-side request-rate limit shared by targets and judges (`--rps`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

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
            await self._sleep(slot - now)

    async def __aenter__(self) -> RateLimiter:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None
