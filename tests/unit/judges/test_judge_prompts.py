"""Prompt templates and the strict schema sent for structured output."""

from __future__ import annotations

from evalkit.judges import JudgeItem
from evalkit.judges.base import ClaimsOutput, CorrectnessOutput, strict_json_schema
from evalkit.judges.prompts import PROMPT_SETS, render_prompt

ITEM = JudgeItem(question="Q?", answer="A [1].", context=({"rel_path": "a.md", "heading_path": "# H", "text": "ctx"},),
                 expected_key_facts=("fact one", "fact two"))


def test_every_prompt_set_has_every_kind_and_a_version():
    for name, kinds in PROMPT_SETS.items():
        assert set(kinds) == {"groundedness", "correctness", "claims", "abstention", "answer_quality", "conflict", "context_relevance"}
        for kind in kinds:
            p = render_prompt(kind, ITEM, prompt_set=name)
            assert p.prompt_version == f"{kind}-{name}" and p.temperature == 0.0 and len(p.prompt_hash) == 64


def test_correctness_prompt_carries_the_expected_key_facts():
    text = render_prompt("correctness", ITEM).messages[0]["content"]
    assert "- fact one\n- fact two" in text
    assert "Question: Q?" in text and "[1] a.md > # H\nctx" in text
    assert "Expected key facts" not in render_prompt("correctness", JudgeItem(question="Q?", answer="A")).messages[0]["content"]


def test_alt_prompt_differs_but_keeps_the_rubric():
    a = render_prompt("groundedness", ITEM).messages[0]["content"]
    b = render_prompt("groundedness", ITEM, prompt_set="v1-alt").messages[0]["content"]
    assert a != b and "0 to 5" in b


def test_strict_schema_closes_every_object():
    s = strict_json_schema(ClaimsOutput)
    assert s["additionalProperties"] is False and set(s["required"]) == {"reasoning", "claims"}
    claim = s["$defs"]["ClaimJudgement"]
    assert claim["additionalProperties"] is False and set(claim["required"]) == {"claim", "supported", "evidence", "cited"}
    c = strict_json_schema(CorrectnessOutput)
    assert "maximum" not in c["properties"]["score"]  # range checked by pydantic on our side
