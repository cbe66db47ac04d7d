"""JudgeRunner: EVAL.md's scoring rules, settings resolution and config errors (heuristic judge)."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.errors import JudgeConfigError
from evalkit.judges import JudgeSettings, build_judge_runner, resolve_judge, spot_check_settings
from tests.unit.judges.judge_helpers import make_record


def _judge(record, context=None, **kw):
    runner = build_judge_runner(JudgeSettings(**kw))
    return asyncio.run(runner.judge_record(record, context)), runner


def test_default_is_the_heuristic_and_it_says_so():
    rec, runner = _judge(make_record())
    d = runner.describe()
    assert d["provider"] == "heuristic" and d["heuristic"] is True and d["version"] == "heuristic-v1"
    assert rec["groundedness"]["method"] == "heuristic" and rec["groundedness"]["model"] == "heuristic-v1"
    assert rec["config"]["judge_model"] == "heuristic-v1"
    assert runner.stats()["heuristic"] is True and runner.stats()["calls"] == 0


def test_answered_case_gets_both_scores_citations_and_judge_input():
    record = make_record()
    rec, runner = _judge(record)
    assert rec is not record and record["groundedness"] is None  # input not modified
    assert rec["groundedness"]["score"] == pytest.approx(5)  # supported and cited
    assert rec["groundedness"]["citations"]["has_citations"] is True
    assert rec["correctness"]["score"] is not None
    ji = rec["judge_input"]
    assert ji["question"] == record["question"] and ji["answer"] == record["answer"]
    assert ji["context_chunk_ids"] == ["c1", "c2"]
    assert ji["context_chunks_truncated"][0] == "The server listens on port 8080 by default."
    assert rec["latency"]["judge_ms"] is not None and rec["latency"]["total_ms"] == 10.0
    assert rec["cost"]["judge_cost_usd"] == 0 and rec["judge_errors"] == []
    assert runner.stats()["scores"]["groundedness"]["n"] == 1


def test_target_error_is_not_judged():
    rec, runner = _judge(make_record(answer="", error={"kind": "timeout", "status": None, "detail": "30s"}))
    assert rec["groundedness"] is None and rec["correctness"] is None and rec["judge_errors"] == []
    assert rec["latency"]["judge_ms"] is None
    assert runner.stats()["not_judged_target_error"] == 1


def test_empty_answer_scores_zero_by_rule():
    rec, _ = _judge(make_record(answer="", abstained=None, error={"kind": "empty_answer", "status": None, "detail": ""}))
    assert rec["groundedness"] == {"score": 0, "reasoning": "empty answer", "method": "rule"}
    assert rec["correctness"]["score"] == 0


def test_correct_abstention_is_not_judged():
    rec, runner = _judge(make_record(answer="I could not find this in the notes.", abstained=True, answerable=False))
    assert rec["groundedness"] is None and rec["correctness"] is None
    assert runner.stats()["not_judged_correct_abstention"] == 1


def test_abstention_on_answerable_case_is_a_correctness_failure():
    rec, _ = _judge(make_record(answer="I could not find this in the notes.", abstained=True, answerable=True))
    assert rec["correctness"] == {"score": 0, "reasoning": "abstained on an answerable question", "method": "rule"}
    assert rec["groundedness"] is None


def test_answer_to_unanswerable_case_gets_correctness_zero_and_judged_groundedness():
    rec, _ = _judge(make_record(answer="The server listens on port 8080 [1].", abstained=False, answerable=False))
    assert rec["correctness"]["method"] == "rule" and rec["correctness"]["score"] == 0
    assert rec["groundedness"]["method"] == "heuristic"


@pytest.mark.parametrize(
    ("answer", "answerable", "abstained", "hallucinated"),
    [
        pytest.param("I couldn't find that in your notes.", False, True, False, id="refusal-unanswerable"),
        pytest.param("The server listens on port 8080 [1].", False, False, True, id="answer-unanswerable"),
        pytest.param("The server listens on port 8080 [1].", True, False, None, id="answer-answerable"),
    ],
)
def test_abstention_fallback_when_the_target_gave_no_field(answer, answerable, abstained, hallucinated):
    rec, runner = _judge(make_record(answer=answer, abstained=None, answerable=answerable))
    a = rec["abstention"]
    assert a["abstained"] is abstained and a["hallucinated"] is hallucinated
    assert a["method"] == "heuristic"
    assert runner.stats()["abstention_classified"] == 1


def test_target_abstention_field_is_kept():
    rec, runner = _judge(make_record(answer="I couldn't find that.", abstained=False))
    assert rec["abstention"]["abstained"] is False and rec["abstention"]["method"] == "target"
    assert runner.stats()["abstention_classified"] == 0


def test_full_text_context_argument_wins_over_truncated_record_text():
    chunks = [{"chunk_id": "c1", "rel_path": "ops/server.md", "rank": 1, "text": "The server listens", "text_truncated": True}]
    rec, _ = _judge(make_record(chunks=chunks))
    assert rec["judge_input"]["context_was_truncated"] is True
    assert rec["groundedness"]["unsupported_claims"]  # "port 8080" is cut off
    full = [{**chunks[0], "text": "The server listens on port 8080.", "text_truncated": False}]
    rec, _ = _judge(make_record(chunks=chunks), context=full)
    assert rec["judge_input"]["context_was_truncated"] is False
    assert rec["groundedness"]["unsupported_claims"] == []


def test_claim_level_heuristic_stores_claims():
    rec, runner = _judge(make_record(answer="The server listens on port 8080. It is written in Rust."), claim_level=True)
    # by hand: 1 of 2 claims supported -> 5 × 1/2
    assert rec["groundedness"]["score"] == pytest.approx(5 * 1 / 2)
    assert len(rec["groundedness"]["claims"]) == 2 and rec["groundedness"]["claim_level"] is True
    assert runner.describe()["claim_level"] is True


def test_heuristic_ignores_trials():
    rec, runner = _judge(make_record(), trials=3)
    assert runner.trials == 1 and "trials" not in rec["groundedness"]


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("kw", "provider", "model", "base_url"),
    [
        pytest.param({}, "heuristic", "heuristic-v1", None, id="nothing"),
        pytest.param({"model": "gpt-4o-2024-08-06"}, "openai", "gpt-4o-2024-08-06", None, id="openai-by-name"),
        pytest.param({"model": "claude-3-5-sonnet-20241022"}, "anthropic", "claude-3-5-sonnet-20241022", None, id="claude"),
        pytest.param({"model": "local"}, "openai-compatible", "local", None, id="seed-local"),
        pytest.param({"model": "qwen2.5:14b@845dbda0ea48", "base_url": "http://127.0.0.1:11434/v1"}, "openai-compatible",
                     "qwen2.5:14b@845dbda0ea48", "http://127.0.0.1:11434/v1", id="ollama"),
        pytest.param({"provider": "anthropic"}, "anthropic", "claude-sonnet-4-5-20250929", None, id="provider-default-model"),
    ],
)
def test_resolve_judge(kw, provider, model, base_url):
    r = resolve_judge(JudgeSettings(**kw))
    assert (r.provider, r.model, r.base_url) == (provider, model, base_url)


def test_env_configures_the_judge(monkeypatch):
    monkeypatch.setenv("EVALKIT_JUDGE_MODEL", "gpt-4o-2024-08-06")
    assert resolve_judge(JudgeSettings()).provider == "openai"


def test_missing_key_message():
    with pytest.raises(JudgeConfigError) as e:
        build_judge_runner(JudgeSettings(provider="openai", model="gpt-4o-2024-08-06"))
    assert str(e.value) == "OPENAI_API_KEY is not set (needed by --judge-provider openai; put it in the environment or .env)"
    with pytest.raises(JudgeConfigError, match="ANTHROPIC_API_KEY is not set"):
        build_judge_runner(JudgeSettings(model="claude-3-5-sonnet-20241022"))


def test_unpinned_model_is_refused_before_the_key_is_looked_at():
    with pytest.raises(JudgeConfigError, match="'gpt-4o' is not pinned"):
        build_judge_runner(JudgeSettings(model="gpt-4o"))
    with pytest.raises(JudgeConfigError, match="'local' is not pinned"):
        build_judge_runner(JudgeSettings(model="local"))


def test_local_server_needs_no_key_and_defaults_to_llama_cpp(tmp_path):
    runner = build_judge_runner(JudgeSettings(model="local@build-b4567", cache_path=tmp_path / "c.sqlite"))
    d = runner.describe()
    assert d["provider"] == "openai-compatible" and d["base_url"] == "http://127.0.0.1:8080/v1"
    assert d["pinned"] is True and d["heuristic"] is False and d["prompt_version"]["groundedness"] == "groundedness-v1"
    asyncio.run(runner.aclose())


def test_unknown_provider_and_unguessable_model():
    with pytest.raises(JudgeConfigError, match="unknown judge provider 'gemini'"):
        build_judge_runner(JudgeSettings(provider="gemini"))
    with pytest.raises(JudgeConfigError, match="pass --judge-provider"):
        build_judge_runner(JudgeSettings(model="mistral-large-2411"))


def test_spot_check_settings():
    main = JudgeSettings(model="gpt-4o-2024-08-06", trials=3)
    s = spot_check_settings(main, model="claude-3-5-sonnet-20241022")
    assert (s.provider, s.model, s.trials) == ("anthropic", "claude-3-5-sonnet-20241022", 1)
    s = spot_check_settings(main, prompt_set="v1-alt")
    assert (s.model, s.prompt_set) == ("gpt-4o-2024-08-06", "v1-alt")
    with pytest.raises(JudgeConfigError, match="needs --spot-check-model"):
        spot_check_settings(main)
    with pytest.raises(JudgeConfigError, match="heuristic has no prompts"):
        spot_check_settings(JudgeSettings(), prompt_set="v1-alt")


def test_correctness_without_expected_facts_is_unscoreable_and_counted():
    # Issue 43: a wrong answer to a case without expected facts scored 4.0 of 5 (question
    # words + context support). Nothing says what is correct: null, the reason, a count.
    from evalkit.judges.runner import NO_EXPECTED_FACTS

    rec, runner = _judge(make_record(answer="The database runs PostgreSQL 16 [2].", key_facts=[]))
    assert rec["correctness"] == {"score": None, "reasoning": NO_EXPECTED_FACTS, "method": "unscoreable"}
    assert rec["groundedness"]["score"] is not None  # groundedness needs no expected facts
    stats = runner.stats()
    assert stats["correctness_unscoreable"] == 1 and "correctness" not in stats["scores"]
    # an expected answer is enough to score it
    record = make_record(answer="The database runs PostgreSQL 16 [2].", key_facts=[])
    record["case"]["expected_answer"] = "The server listens on port 8080."
    rec, runner = _judge(record)
    assert rec["correctness"]["score"] is not None and runner.stats()["correctness_unscoreable"] == 0


def test_an_llm_judge_is_not_asked_for_correctness_without_expected_facts(openai_router, openai_key, settings_for):
    from tests.unit.judges.judge_helpers import ANSWERED, CORRECT, GROUNDED, OPENAI_MODEL, by_kind

    handler = by_kind({"groundedness": GROUNDED, "correctness": CORRECT, "abstention": ANSWERED})
    openai_router["chat"].side_effect = handler
    runner = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL))
    rec = asyncio.run(runner.judge_record(make_record(key_facts=[])))
    asked = [(c.get("response_format") or {}).get("json_schema", {}).get("name") for c in handler.calls]
    assert "correctness_verdict" not in asked and "groundedness_verdict" in asked  # a guess is never asked for
    assert rec["correctness"]["method"] == "unscoreable" and rec["correctness"]["score"] is None
