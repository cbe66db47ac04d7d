"""Judge test fixtures: respx routers on the real provider endpoints, recorded retry waits.

The real openai / anthropic SDK clients make every call; respx answers at the httpx layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx

from evalkit.judges import JudgeSettings
from evalkit.net.retry import RetryPolicy
from tests.unit.judges.judge_helpers import ANTHROPIC_URL, OPENAI_URL


class SleepRecorder:
    """An async sleep that records the wait and returns at once (tests never sleep)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def retry_policy(sleeps: SleepRecorder) -> RetryPolicy:
    # Backoff waits are zero; a server's Retry-After still wins and is recorded.
    import tenacity

    return RetryPolicy(attempts=4, wait=tenacity.wait_none(), sleep=sleeps)


@pytest.fixture
def openai_router() -> Iterator[respx.Router]:
    """respx on the real Chat Completions endpoint; set `router["chat"]`'s response per test."""
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        router.post(OPENAI_URL, name="chat")
        yield router


@pytest.fixture
def anthropic_router() -> Iterator[respx.Router]:
    """respx on the real Messages endpoint; set `router["messages"]`'s response per test."""
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        router.post(ANTHROPIC_URL, name="messages")
        yield router


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    return "sk-test-not-real"


@pytest.fixture
def anthropic_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-real")
    return "sk-ant-test-not-real"


@pytest.fixture
def settings_for(tmp_path: Path, retry_policy: RetryPolicy):
    """JudgeSettings with a cache in tmp_path and recorded retry waits."""

    def make(**kw: Any) -> JudgeSettings:
        kw.setdefault("cache_path", tmp_path / "cache" / "judge_cache.sqlite")
        kw.setdefault("retry_policy", retry_policy)
        return JudgeSettings(**kw)

    return make


