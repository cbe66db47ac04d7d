"""A run that waits says so: retry waits reach the progress line with their reason."""

from __future__ import annotations

import asyncio
import io

import httpx
from rich.console import Console

from evalkit.net.retry import RetryPolicy
from evalkit.report.run import RunProgress


def _429(retry_after: str) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:9/api/v1/ask")
    response = httpx.Response(429, headers={"Retry-After": retry_after}, request=request)
    return httpx.HTTPStatusError("HTTP 429", request=request, response=response)


def test_each_wait_is_told_with_its_reason_and_capped():
    told, slept = [], []

    async def sleep(s: float) -> None:
        slept.append(s)

    policy = RetryPolicy(attempts=3, max_retry_after=1.5, jitter=0.0, sleep=sleep, on_wait=lambda s, why: told.append((s, why)))
    errors = iter([_429("30"), httpx.ConnectError("refused")])

    async def go() -> None:
        async for attempt in policy.retrying():
            with attempt:
                err = next(errors, None)
                if err is not None:
                    raise err

    asyncio.run(go())
    # by hand: Retry-After 30 capped at 1.5; then backoff initial_wait 0.5 * 2**(2-1) = 1.0, no jitter
    assert told == [(1.5, "Retry-After"), (1.0, "backoff")]
    assert slept == [1.5, 1.0]


def test_the_progress_line_shows_the_wait():
    out = io.StringIO()
    progress = RunProgress(Console(file=out, force_terminal=True, width=120))
    progress.start(run_id="r1", run_dir=None, total=3, done=0, resumed=False)  # type: ignore[arg-type]
    progress.waiting(12, "Retry-After")
    progress._progress.refresh()  # type: ignore[union-attr]
    progress.close()
    assert "waiting 12s (Retry-After)" in out.getvalue() or "waiting 11s (Retry-After)" in out.getvalue()
