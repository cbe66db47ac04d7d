"""A circuit breaker for a target that fails every request.

Retries are for a server that fails now and then. Against one that answers 500 to
everything they only add waiting: 59 cases x 4 tries with backoff took 65 s before the
run could say what it already knew after the first few. The breaker counts failed tries
(5xx, 408, timeouts, broken connections; not 429, which is a live server asking to slow
down) until the target answers once. After `threshold` such tries in a row with no answer
at all it opens: retries stop (`RetryPolicy.retrying`) and the runner asks no further case.
One answer disarms it for good, so a flaky but working server keeps every retry.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BREAKER_THRESHOLD", "CircuitBreaker", "describe_failure"]

# Failed tries in a row before any answer; the probe's failure counts as one. At the
# default concurrency (4) and --retries 3 that is the probe, the first tries of four cases
# and most of their first retries: about a second. A server failing one request in three
# fails 8 in a row before its first answer with probability (1/3)^8, about 1 in 6,500.
BREAKER_THRESHOLD = 8


def describe_failure(exc: BaseException) -> str:
    """A failed try in a few words: "HTTP 500", "timeout", "connection error"."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return "connection error" if isinstance(exc, httpx.TransportError) else type(exc).__name__


@dataclass
class CircuitBreaker:
    """Open after `threshold` failed tries in a row while the target has never answered.

    Attributes:
        threshold: failed tries in a row that open it (>= 1).
        failures: failed tries counted so far (stops counting once anything answered).
        answered: the target answered a try (any status that is not a failure): disarmed.
        last: the last failure in a few words ("HTTP 500"), for the message.
    """

    threshold: int = BREAKER_THRESHOLD
    failures: int = 0
    answered: bool = False
    last: str | None = None

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ValueError(f"threshold must be >= 1, got {self.threshold}")

    @property
    def open(self) -> bool:
        return not self.answered and self.failures >= self.threshold

    def success(self) -> None:
        """A try got an answer: the target is up, the breaker never opens in this session."""
        self.answered = True

    def failure(self, what: str) -> None:
        """A try failed in a way that says the target is down (see `counts`)."""
        if not self.answered:
            self.failures += 1
            self.last = what

    def observe(self, exc: BaseException) -> None:
        """Count a try's exception when it is a failure of the server (`counts`)."""
        if counts(exc):
            self.failure(describe_failure(exc))


def counts(exc: BaseException) -> bool:
    """Whether a try's exception says the server is failing: what the retry policy retries,
    except 429 (the server is up and asks to slow down)."""
    import httpx

    from evalkit.net.retry import is_retryable_http_error

    if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code == 429:
        return False
    return is_retryable_http_error(exc)
