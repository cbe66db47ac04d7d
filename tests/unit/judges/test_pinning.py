"""The pinned-judge-model rule: accept / refuse table."""

from __future__ import annotations

import pytest

from evalkit.errors import JudgeConfigError
from evalkit.judges.pinning import check_pinned, is_pinned, split_pin


@pytest.mark.parametrize(
    ("provider", "model", "pinned"),
    [
        pytest.param("openai", "gpt-4o-2024-08-06", True, id="openai-dated"),
        pytest.param("openai", "gpt-4o-mini-2024-07-18", True, id="openai-mini-dated"),
        pytest.param("openai", "o3-mini-2025-01-31", True, id="openai-o3-dated"),
        pytest.param("openai", "gpt-4-0613", True, id="openai-mmdd"),
        pytest.param("openai", "ft:gpt-4o-2024-08-06:acme::abc123", True, id="openai-finetune"),
        pytest.param("openai", "gpt-4o", False, id="openai-alias"),
        pytest.param("openai", "gpt-4.1", False, id="openai-4.1-alias"),
        pytest.param("openai", "gpt-4o-mini", False, id="openai-mini-alias"),
        pytest.param("openai", "chatgpt-4o-latest", False, id="openai-latest"),
        pytest.param("anthropic", "claude-3-5-sonnet-20241022", True, id="anthropic-dated"),
        pytest.param("anthropic", "claude-sonnet-4-5-20250929", True, id="anthropic-4-5-dated"),
        pytest.param("anthropic", "claude-3-5-sonnet-v2@20241022", True, id="anthropic-vertex"),
        pytest.param("anthropic", "claude-sonnet-latest", False, id="anthropic-latest"),
        pytest.param("anthropic", "claude-3-5-sonnet-latest", False, id="anthropic-3-5-latest"),
        pytest.param("anthropic", "claude-sonnet-4-5", False, id="anthropic-alias"),
        pytest.param("openai-compatible", "qwen2.5:14b@sha256:845dbda0ea48ed749caafd9e6037047aa19acfcfd82e704d7ca97d631a0b697e", True, id="ollama-sha256"),
        pytest.param("openai-compatible", "llama3.1:8b@46e0c10c039e", True, id="ollama-id"),
        pytest.param("openai-compatible", "local@build-b4567", True, id="llamacpp-build"),
        pytest.param("openai-compatible", "qwen2.5-14b-instruct-q4_k_m@3F2A9C1D4E5B", True, id="hex-upper"),
        pytest.param("openai-compatible", "local", False, id="local-bare"),
        pytest.param("openai-compatible", "qwen2.5:14b", False, id="ollama-tag"),
        pytest.param("openai-compatible", "qwen2.5:14b@latest", False, id="ollama-at-latest"),
        pytest.param("openai-compatible", "local@abc123", False, id="hex-too-short"),
        pytest.param("openai-compatible", "local@123456789012", False, id="digits-only"),
        pytest.param("openai-compatible", "gpt-4o-2024-08-06", True, id="compat-dated"),
    ],
)
def test_pinning_table(provider, model, pinned):
    assert is_pinned(provider, model) is pinned


def test_refusal_message_names_the_model_and_the_fix():
    with pytest.raises(JudgeConfigError) as e:
        check_pinned("openai", "gpt-4o")
    msg = str(e.value)
    assert "'gpt-4o' is not pinned" in msg and "gpt-4o-2024-08-06" in msg and "--allow-unpinned" in msg
    assert len(msg.splitlines()) == 1


def test_allow_unpinned_lets_an_alias_through():
    check_pinned("anthropic", "claude-sonnet-latest", allow_unpinned=True)


def test_split_pin():
    assert split_pin("qwen2.5:14b@845dbda0ea48") == ("qwen2.5:14b", "845dbda0ea48")
    assert split_pin("local") == ("local", None)
