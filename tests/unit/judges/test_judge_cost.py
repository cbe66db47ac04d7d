"""Price lookup and price files."""

from __future__ import annotations

import json

import pytest

from evalkit.errors import JudgeConfigError
from evalkit.judges.cost import PriceTable


def test_longest_prefix_lookup():
    t = PriceTable()
    assert t.lookup("openai", "gpt-4o-2024-08-06").input_per_mtok == 2.50
    assert t.lookup("openai", "gpt-4o-mini-2024-07-18").input_per_mtok == 0.15
    assert t.lookup("openai", "gpt-4o-2024-05-13").output_per_mtok == 15.00  # exact key beats the prefix
    assert t.lookup("anthropic", "claude-sonnet-4-5-20250929").output_per_mtok == 15.00
    assert t.lookup("anthropic", "claude-3-5-haiku-20241022").input_per_mtok == 0.80
    assert t.lookup("openai", "some-new-model-2030-01-01") is None
    assert t.lookup("openai-compatible", "qwen2.5:14b@845dbda0ea48").cost(1000, 1000) == 0


def test_price_is_per_million_tokens():
    p = PriceTable().lookup("openai", "gpt-4o-2024-08-06")
    # by hand: 1M prompt tokens at $2.50 + 500k completion tokens at $10.00
    assert p.cost(1_000_000, 500_000) == pytest.approx(2.50 + 0.5 * 10.00)


def test_price_file_bare_mapping_and_errors(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"qwen2.5:14b": {"input": 0.1, "output": 0.2}}))
    t = PriceTable.load(f)
    assert t.lookup("openai-compatible", "qwen2.5:14b@845dbda0ea48").input_per_mtok == 0.1
    f.write_text(json.dumps({"models": {"gpt-4o": {"input": -1, "output": 2}}}))
    with pytest.raises(JudgeConfigError, match="models.gpt-4o.input"):
        PriceTable.load(f)
    with pytest.raises(JudgeConfigError, match="not found"):
        PriceTable.load(tmp_path / "missing.json")
