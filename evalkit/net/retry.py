"""One bounded retry policy for every HTTP call evalkit makes (targets, LLM judges).

Retries connection errors, timeouts, 408, 429 and 5xx (not 501) with exponential
backoff plus jitter, and honours a server's Retry-After (seconds, HTTP date, or
OpenAI's `retry-after-ms`), capped. Never retries forever: `attempts` counts the
first try. Tests make waits free with `RetryPolicy.no_wait()` or record them with
an injected `sleep`, instead of patching modules.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import tenacity

RETRYABLE_STATUSES = frozenset({408, 429})


def retryable_status(status: int) -> bool:
    """True for statuses worth another try: 408, 429 and 5xx except 501 Not Implemented."""
    return status in RETRYABLE_STATUSES or (status >= 500 and status != 501)


def is_retryable_http_error(exc: BaseException) -> bool:
    """The default retry predicate for httpx calls.

    Retries `httpx.HTTPStatusError` with a retryable status, timeouts (connect, read,
    write, pool) and transport errors (refused, reset, server disconnected). Does not
    retry mistakes on our side (`UnsupportedProtocol`, `LocalProtocolError`).
    """
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return retryable_status(exc.response.status_code)
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return False
    from evalkit.net.limits import ResponseTooLarge

    if isinstance(exc, ResponseTooLarge):
        return False  # the same request gets the same answer
    return isinstance(exc, httpx.TransportError)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header value: delta-seconds or an HTTP date.

    Returns None when the value is absent or unreadable; never a negative number.
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


def retry_after_seconds(exc: BaseException | None) -> float | None:
    """Retry-After carried by an exception's `.response` (httpx and the LLM SDKs), if any."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
    except (TypeError, ValueError):
        pass
    try:
        return parse_retry_after(headers.get("retry-after"))
    except AttributeError:
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter that honours Retry-After.

    Attributes:
        attempts: total tries including the first (>= 1). `retries=3` means attempts=4.
        initial_wait: backoff before the second try, doubled each time, seconds.
        max_wait: cap on one backoff wait, seconds.
        jitter: up to this many random seconds added to each backoff wait, so that
            concurrent clients do not retry in lockstep.
        max_retry_after: cap on a server-requested Retry-After wait, seconds.
        wait: a tenacity wait strategy replacing the backoff (Retry-After still wins).
        sleep: the async sleep used between tries (tests inject a recorder).
        breaker: an `evalkit.net.breaker.CircuitBreaker`; once it is open no further try is
            made (the last error is raised). The caller reports each try's outcome to it.
    """

    attempts: int = 4
    initial_wait: float = 0.5
    max_wait: float = 20.0
    jitter: float = 0.5
    max_retry_after: float = 60.0
    wait: Any = None
    sleep: Callable[[float], Awaitable[object]] | None = None
    # Told before every wait (seconds, "Retry-After" or "backoff"), so a progress line can
    # say that the run is waiting rather than stuck.
    on_wait: Callable[[float, str], None] | None = None
    breaker: Any = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")

    @classmethod
    def from_retries(cls, retries: int, **kwargs: Any) -> RetryPolicy:
        """Policy for `--retries N`: N retries after the first try (N=0: one try)."""
        return cls(attempts=max(0, int(retries)) + 1, **kwargs)

    @classmethod
    def no_wait(cls, attempts: int = 4) -> RetryPolicy:
        """Zero waits of any kind (backoff and Retry-After): for tests."""
        return cls(attempts=attempts, wait=tenacity.wait_none(), max_retry_after=0.0)

    def with_attempts(self, attempts: int) -> RetryPolicy:
        """The same policy with another bound."""
        return replace(self, attempts=attempts)

    def wait_seconds(self, retry_state: tenacity.RetryCallState) -> float:
        """Seconds before the next try: Retry-After when the server gave one, else backoff."""
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        server = retry_after_seconds(exc)
        if server is not None:
            return min(server, self.max_retry_after)
        if self.wait is not None:
            return float(self.wait(retry_state))
        # Jitter is deliberately unseeded: it only spreads retries, it never reaches results.
        n = retry_state.attempt_number
        return min(self.max_wait, self.initial_wait * 2 ** (n - 1)) + random.uniform(0, self.jitter)

    def retrying(
        self, retry_on: Callable[[BaseException], bool] = is_retryable_http_error
    ) -> tenacity.AsyncRetrying:
        """A tenacity loop for `async for attempt in policy.retrying(): with attempt: ...`.

        The last exception is re-raised unchanged when the tries run out, and a
        non-retryable exception is raised at once.
        """
        sleep = self.sleep or asyncio.sleep
        wait = self.wait_seconds
        if self.on_wait is not None:
            on_wait, why = self.on_wait, {"reason": "backoff"}

            def wait(retry_state: tenacity.RetryCallState) -> float:
                exc = retry_state.outcome.exception() if retry_state.outcome else None
                why["reason"] = "Retry-After" if retry_after_seconds(exc) is not None else "backoff"
                return self.wait_seconds(retry_state)

            async def sleep(seconds: float, _base: Any = sleep) -> None:  # noqa: F811
                on_wait(seconds, why["reason"])
                await _base(seconds)

        stop: Any = tenacity.stop_after_attempt(self.attempts)
        if self.breaker is not None:
            breaker = self.breaker
            stop = stop | (lambda _state: breaker.open)
        return tenacity.AsyncRetrying(
            sleep=sleep,
            stop=stop,
            wait=wait,
            retry=tenacity.retry_if_exception(retry_on),
            reraise=True,
        )
