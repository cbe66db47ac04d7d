"""The shared retry helpers: which errors retry, Retry-After parsing, bounded attempts."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import httpx
import pytest

from evalkit.net.retry import (
    RetryPolicy,
    is_retryable_http_error,
    parse_retry_after,
    retry_after_seconds,
    retryable_status,
)

REQ = httpx.Request("POST", "http://api.test/x")


def status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    resp = httpx.Response(status, headers=headers, request=REQ)
    return httpx.HTTPStatusError(f"HTTP {status}", request=REQ, response=resp)


@pytest.mark.parametrize(
    ("status", "expected"),
    [(200, False), (400, False), (401, False), (404, False), (408, True), (429, True),
     (500, True), (501, False), (502, True), (503, True), (504, True)],
)
def test_retryable_status(status: int, expected: bool) -> None:
    assert retryable_status(status) is expected


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.ConnectError("refused", request=REQ), True),
        (httpx.ConnectTimeout("slow", request=REQ), True),
        (httpx.ReadTimeout("slow", request=REQ), True),
        (httpx.PoolTimeout("full", request=REQ), True),
        (httpx.RemoteProtocolError("gone", request=REQ), True),
        (httpx.ReadError("reset", request=REQ), True),
        (httpx.UnsupportedProtocol("ftp", request=REQ), False),
        (httpx.LocalProtocolError("bad header", request=REQ), False),
        (status_error(503), True),
        (status_error(429), True),
        (status_error(404), False),
        (ValueError("not http"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_is_retryable_http_error(exc: BaseException, expected: bool) -> None:
    assert is_retryable_http_error(exc) is expected


NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2", 2.0),
        (" 1.5 ", 1.5),
        ("-3", 0.0),
        ("Thu, 02 Jan 2025 03:04:35 GMT", 30.0),  # by hand: 03:04:35 - 03:04:05
        ("Thu, 02 Jan 2025 03:00:00 GMT", 0.0),  # in the past: no wait
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_retry_after_ms_wins_and_is_in_milliseconds() -> None:
    exc = status_error(429, {"retry-after-ms": "250", "retry-after": "9"})
    assert retry_after_seconds(exc) == 250 / 1000


def test_retry_after_absent() -> None:
    assert retry_after_seconds(status_error(503)) is None
    assert retry_after_seconds(ValueError("x")) is None


def test_policy_from_retries_and_bounds() -> None:
    assert RetryPolicy.from_retries(3).attempts == 4
    assert RetryPolicy.from_retries(0).attempts == 1
    assert RetryPolicy.from_retries(-2).attempts == 1
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)


def test_retrying_stops_after_attempts_and_reraises_the_last_error() -> None:
    calls = 0

    async def go() -> None:
        nonlocal calls
        async for attempt in RetryPolicy.no_wait(3).retrying():
            with attempt:
                calls += 1
                raise status_error(503)

    with pytest.raises(httpx.HTTPStatusError):
        asyncio.run(go())
    assert calls == 3


def test_retrying_does_not_retry_other_errors() -> None:
    calls = 0

    async def go() -> None:
        nonlocal calls
        async for attempt in RetryPolicy.no_wait(3).retrying():
            with attempt:
                calls += 1
                raise KeyError("bug")

    with pytest.raises(KeyError):
        asyncio.run(go())
    assert calls == 1


def test_custom_predicate_for_other_clients() -> None:
    class Flaky(Exception):
        pass

    calls = 0

    async def go() -> str:
        nonlocal calls
        async for attempt in RetryPolicy.no_wait(5).retrying(retry_on=lambda e: isinstance(e, Flaky)):
            with attempt:
                calls += 1
                if calls < 3:
                    raise Flaky()
                return "ok"
        return "unreachable"

    assert asyncio.run(go()) == "ok"
    assert calls == 3


def test_no_wait_ignores_retry_after() -> None:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    policy = RetryPolicy(attempts=2, wait=RetryPolicy.no_wait().wait, max_retry_after=0.0, sleep=sleep)

    async def go() -> None:
        async for attempt in policy.retrying():
            with attempt:
                if not waits and attempt.retry_state.attempt_number == 1:
                    raise status_error(429, {"retry-after": "30"})

    asyncio.run(go())
    assert waits == [0.0]
