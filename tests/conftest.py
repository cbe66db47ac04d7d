"""Suite-wide hygiene: no real keys, no proxies, no network by accident."""

from __future__ import annotations

import pytest

_SCRUB_PREFIXES = ("OPENAI_", "ANTHROPIC_", "EVAL_API_URL", "EVAL_API_KEY", "EMBEDDINGS_", "ANSWER_", "EVALKIT_JUDGE")
_SCRUB_PROXY = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(_SCRUB_PREFIXES) or name in _SCRUB_PROXY:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
