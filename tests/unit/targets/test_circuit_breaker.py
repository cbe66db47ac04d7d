"""The circuit breaker (issue 28): an HttpTarget whose every try fails stops retrying once the
breaker opens; 429s do not count; one answer disarms it (MockTransport, no sockets)."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from evalkit.errors import TargetError
from evalkit.net.breaker import CircuitBreaker
from evalkit.net.retry import RetryPolicy
from tests.unit.targets.test_http_target import Server, ask, make_target, ok


def _target(server: Server, breaker: CircuitBreaker, attempts: int = 4):
    return make_target(server, retry_policy=replace(RetryPolicy.no_wait(attempts), breaker=breaker))


def test_tries_stop_when_the_breaker_opens() -> None:
    breaker = CircuitBreaker(threshold=6)
    server = Server(httpx.Response(500, text="boom"))
    target = _target(server, breaker)
    with pytest.raises(TargetError) as e:
        ask(target)  # 4 tries: 4 failures, still closed
    assert "4 tries" in e.value.detail and not breaker.open
    with pytest.raises(TargetError) as e:
        ask(target)  # the 2nd try is the 6th failure: no 3rd try
    assert (e.value.kind, e.value.status) == ("http_error", 500) and "2 tries" in e.value.detail
    assert len(server.requests) == 4 + 2
    assert breaker.open and breaker.failures == 6 and breaker.last == "HTTP 500"


def test_one_answer_disarms_it_for_good() -> None:
    breaker = CircuitBreaker(threshold=2)
    server = Server(httpx.Response(503), ok(), *[httpx.Response(500)] * 8)
    target = _target(server, breaker)
    assert ask(target).attempts == 2  # a failure, then an answer
    with pytest.raises(TargetError):
        ask(target)
    with pytest.raises(TargetError):
        ask(target)
    assert len(server.requests) == 2 + 4 + 4  # every retry still made
    assert breaker.answered and breaker.failures == 1 and not breaker.open


def test_429_and_4xx_do_not_open_it() -> None:
    breaker = CircuitBreaker(threshold=1)
    server = Server(httpx.Response(429, headers={"Retry-After": "0"}), httpx.Response(429), ok())
    assert ask(_target(server, breaker)).attempts == 3
    assert breaker.failures == 0 and breaker.answered
    fresh = CircuitBreaker(threshold=1)
    with pytest.raises(TargetError) as e:
        ask(_target(Server(httpx.Response(404)), fresh))
    assert e.value.status == 404 and fresh.answered and not fresh.open  # a 404 is an answer: the server is up


def test_timeouts_and_refused_connections_count() -> None:
    breaker = CircuitBreaker(threshold=3)
    server = Server(httpx.ReadTimeout("slow"), httpx.ConnectError("refused"), httpx.ConnectError("refused"), ok())
    with pytest.raises(TargetError) as e:
        ask(_target(server, breaker))
    assert e.value.kind == "connect" and len(server.requests) == 3
    assert breaker.open and breaker.last == "connection error"


def test_a_threshold_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold must be >= 1"):
        CircuitBreaker(threshold=0)
