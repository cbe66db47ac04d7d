"""OpenAI and OpenAI-compatible judges through the real SDK client, answered by respx."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from evalkit.errors import JudgeConfigError
from evalkit.judges import JudgeItem, build_judge, build_judge_runner
from evalkit.judges.base import JudgeFailure, JudgeOutcome
from tests.unit.judges.judge_helpers import CORRECT, GROUNDED, OPENAI_MODEL, by_kind, make_record, openai_reply

ITEM = JudgeItem(
    question="Which port does the server listen on?",
    answer="The port is 8080 [1].",
    context=({"chunk_id": "c1", "rel_path": "ops/server.md", "heading_path": "# Server", "text": "The server listens on port 8080."},),
)


def _judge(settings_for, **kw):
    return build_judge(settings_for(provider="openai", model=OPENAI_MODEL, **kw))


def test_structured_output_is_requested_and_parsed(openai_router, openai_key, settings_for):
    route = openai_router["chat"]
    route.return_value = httpx.Response(200, json=openai_reply(json.dumps(GROUNDED)))
    judge = _judge(settings_for)

    out = asyncio.run(judge.judge("groundedness", ITEM))

    assert isinstance(out, JudgeOutcome)
    assert out.verdict["score"] == 5
    assert out.verdict["supported_claims"] == ["The port is 8080."]
    assert out.answered_model_id == OPENAI_MODEL
    assert out.system_fingerprint == "fp_test123"
    assert out.prompt_version == "groundedness-v1"
    body = json.loads(route.calls.last.request.content)
    assert body["model"] == OPENAI_MODEL
    assert body["temperature"] == 0
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    schema = rf["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"reasoning", "score", "unsupported_claims", "supported_claims"}
    # Field descriptions reach the schema the provider sees.
    assert "0-5" in schema["properties"]["score"]["description"]
    prompt = body["messages"][-1]["content"]
    assert "even if it's \"common knowledge\"" in prompt
    assert "Penalize \"confident tone\" on unsupported claims" in prompt
    assert "[1] ops/server.md > # Server" in prompt
    assert route.calls.last.request.headers["authorization"] == f"Bearer {openai_key}"


def test_junk_then_repair_then_success(openai_router, openai_key, settings_for):
    route = openai_router["chat"]
    route.side_effect = [
        httpx.Response(200, json=openai_reply("sure! the score is five")),
        httpx.Response(200, json=openai_reply(json.dumps(GROUNDED))),
    ]
    out = asyncio.run(_judge(settings_for).judge("groundedness", ITEM))

    assert isinstance(out, JudgeOutcome) and out.repaired and out.verdict["score"] == 5
    assert route.call_count == 2
    repair = json.loads(route.calls[1].request.content)["messages"]
    assert repair[-2] == {"role": "assistant", "content": "sure! the score is five"}
    assert "did not match the required JSON schema" in repair[-1]["content"]


def test_junk_twice_is_a_recorded_judge_error_and_the_run_goes_on(openai_router, openai_key, settings_for):
    replies = {
        "groundedness": httpx.Response(200, json=openai_reply('{"score": 9}')),  # out of range twice
        "correctness": CORRECT,
    }
    handler = by_kind(replies)
    openai_router["chat"].side_effect = handler
    runner = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL))

    rec = asyncio.run(runner.judge_record(make_record()))

    assert rec["groundedness"] is None  # never a silent 0
    assert rec["correctness"]["score"] == 4
    assert len(rec["judge_errors"]) == 1
    err = rec["judge_errors"][0]
    assert err["judge"] == "groundedness" and err["reason"] == "parse_failure"
    assert "score" in err["detail"]
    assert runner.stats()["n_judge_errors"] == 1
    assert len(handler.calls) == 3  # groundedness + its repair + correctness


def test_429_then_success_honours_retry_after(openai_router, openai_key, settings_for, sleeps):
    route = openai_router["chat"]
    route.side_effect = [
        httpx.Response(429, headers={"retry-after": "7"}, json={"error": {"message": "slow down", "type": "rate_limit"}}),
        httpx.Response(503, json={"error": {"message": "busy"}}),
        httpx.Response(200, json=openai_reply(json.dumps(GROUNDED))),
    ]
    out = asyncio.run(_judge(settings_for).judge("groundedness", ITEM))

    assert isinstance(out, JudgeOutcome)
    assert route.call_count == 3  # the SDK's own retries are off (max_retries=0)
    assert out.calls == 3
    assert sleeps.waits == [7.0, 0.0]  # Retry-After, then the (zeroed) backoff


def test_retries_are_bounded_then_a_provider_error_is_recorded(openai_router, openai_key, settings_for):
    route = openai_router["chat"]
    route.return_value = httpx.Response(500, json={"error": {"message": "down"}})
    out = asyncio.run(_judge(settings_for).judge("groundedness", ITEM))

    assert isinstance(out, JudgeFailure) and out.reason == "provider_error"
    assert route.call_count == 4  # RetryPolicy(attempts=4)


def test_bad_key_stops_the_run(openai_router, openai_key, settings_for):
    openai_router["chat"].return_value = httpx.Response(401, json={"error": {"message": "Incorrect API key"}})
    with pytest.raises(JudgeConfigError, match="refused the judge request"):
        asyncio.run(_judge(settings_for).judge("groundedness", ITEM))


def test_usage_tokens_become_cost_with_the_price_table(openai_router, openai_key, settings_for):
    openai_router["chat"].side_effect = by_kind({"groundedness": GROUNDED, "correctness": CORRECT})
    runner = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL))

    rec = asyncio.run(runner.judge_record(make_record()))

    # by hand: 2 calls × (100 prompt, 20 completion) tokens at gpt-4o $2.50 / $10.00 per 1M
    expected = 2 * (100 * 2.50 + 20 * 10.00) / 1_000_000
    assert rec["cost"]["judge_cost_usd"] == pytest.approx(expected)
    assert rec["cost"]["judge_tokens"] == 2 * (100 + 20)
    assert rec["cost"]["prompt_tokens"] == 200 and rec["cost"]["completion_tokens"] == 40
    assert rec["cost"]["cached_calls"] == 0
    assert runner.stats()["cost_usd"] == pytest.approx(expected)


def test_price_file_overrides_builtin(openai_router, openai_key, settings_for, tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"as_of": "2030-01-01", "models": {"gpt-4o": {"input": 1.0, "output": 2.0}}}))
    openai_router["chat"].return_value = httpx.Response(200, json=openai_reply(json.dumps(GROUNDED)))
    out = asyncio.run(_judge(settings_for, price_file=prices).judge("groundedness", ITEM))
    # by hand: 100 × $1 + 20 × $2 per 1M tokens
    assert out.cost_usd == pytest.approx((100 * 1.0 + 20 * 2.0) / 1_000_000)


def test_second_run_is_a_cache_hit_with_zero_http_calls(openai_router, openai_key, settings_for):
    route = openai_router["chat"]
    route.side_effect = by_kind({"groundedness": GROUNDED, "correctness": CORRECT})
    first = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL))
    rec1 = asyncio.run(first.judge_record(make_record()))
    asyncio.run(first.aclose())
    assert route.call_count == 2
    route.reset()

    second = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL))
    rec2 = asyncio.run(second.judge_record(make_record()))

    assert route.call_count == 0
    assert rec2["groundedness"]["score"] == rec1["groundedness"]["score"]
    assert rec2["groundedness"]["cached"] is True
    assert rec2["groundedness"]["answered_model_id"] == OPENAI_MODEL
    assert rec2["cost"]["judge_cost_usd"] == 0 and rec2["cost"]["cached_calls"] == 2
    stats = second.stats()
    assert stats["cache_hits"] == 2 and stats["cache_misses"] == 0 and stats["calls"] == 0


def test_no_cache_and_refresh_cache_call_again(openai_router, openai_key, settings_for):
    route = openai_router["chat"]
    route.return_value = httpx.Response(200, json=openai_reply(json.dumps(GROUNDED)))
    asyncio.run(_judge(settings_for).judge("groundedness", ITEM))
    asyncio.run(_judge(settings_for, use_cache=False).judge("groundedness", ITEM))
    assert route.call_count == 2
    refreshed = _judge(settings_for, refresh_cache=True)
    asyncio.run(refreshed.judge("groundedness", ITEM))
    assert route.call_count == 3
    assert refreshed.stats().cache_misses == 1


def test_changed_context_is_a_cache_miss(openai_router, openai_key, settings_for):
    route = openai_router["chat"]
    route.return_value = httpx.Response(200, json=openai_reply(json.dumps(GROUNDED)))
    asyncio.run(_judge(settings_for).judge("groundedness", ITEM))
    other = JudgeItem(question=ITEM.question, answer=ITEM.answer, context=({"chunk_id": "c1", "text": "Port 9090."},))
    asyncio.run(_judge(settings_for).judge("groundedness", other))
    assert route.call_count == 2


def test_openai_compatible_uses_json_mode_and_strips_the_pin(settings_for):
    import respx

    with respx.mock(assert_all_mocked=True) as router:
        route = router.post("http://127.0.0.1:11434/v1/chat/completions")
        route.return_value = httpx.Response(
            200, json=openai_reply("```json\n" + json.dumps(GROUNDED) + "\n```", model="qwen2.5:14b", fingerprint=None)
        )
        judge = build_judge(
            settings_for(provider="openai-compatible", model="qwen2.5:14b@845dbda0ea48", base_url="http://127.0.0.1:11434/v1")
        )
        out = asyncio.run(judge.judge("groundedness", ITEM))

    assert isinstance(out, JudgeOutcome) and out.verdict["score"] == 5
    body = json.loads(route.calls.last.request.content)
    assert body["response_format"] == {"type": "json_object"}
    assert body["model"] == "qwen2.5:14b"
    assert "JSON schema" in body["messages"][0]["content"]
    assert route.calls.last.request.headers["authorization"] == "Bearer none"
    assert out.model == "qwen2.5:14b@845dbda0ea48" and out.answered_model_id == "qwen2.5:14b"
    assert out.cost_usd == 0  # a local server is free unless the price file says otherwise


def test_llm_abstention_fallback_sets_method_judge(openai_router, openai_key, settings_for):
    handler = by_kind({"abstention": {"abstained": True, "confidence": 0.95}, "groundedness": GROUNDED, "correctness": CORRECT})
    openai_router["chat"].side_effect = handler
    runner = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL))

    rec = asyncio.run(runner.judge_record(make_record(answer="I could not find that in the notes.", abstained=None, answerable=False)))

    assert rec["abstention"]["abstained"] is True
    assert rec["abstention"]["method"] == "judge"
    assert rec["abstention"]["confidence"] == 0.95
    assert rec["abstention"]["hallucinated"] is False
    # A correct abstention is not judged by the answer judges.
    assert rec["groundedness"] is None and rec["correctness"] is None
    assert len(handler.calls) == 1
    assert "Does this answer indicate the system cannot answer the question?" in handler.calls[0]["messages"][-1]["content"]


def test_trials_use_a_trial_index_in_the_cache_key(openai_router, openai_key, settings_for):
    route = openai_router["chat"]
    scores = iter([5, 3, 4, 4, 4, 4])

    def reply(request):
        body = json.loads(request.content)
        name = body["response_format"]["json_schema"]["name"]
        data = dict(GROUNDED) if name == "groundedness_verdict" else dict(CORRECT)
        data["score"] = next(scores)
        return httpx.Response(200, json=openai_reply(json.dumps(data)))

    route.side_effect = reply
    runner = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL, trials=3, concurrency=1))
    rec = asyncio.run(runner.judge_record(make_record()))
    assert route.call_count == 6
    g, c = rec["groundedness"]["trials"], rec["correctness"]["trials"]
    assert sorted(g["scores"] + c["scores"]) == [3, 4, 4, 4, 4, 5]
    assert g["n"] == 3 and c["n"] == 3
    # by hand: the case score is the mean of its three trials
    assert rec["groundedness"]["score"] == pytest.approx(sum(g["scores"]) / 3)
    assert g["spread"] == max(g["scores"]) - min(g["scores"])
    stats = runner.stats()["trials"]
    assert stats["n_trials"] == 3 and stats["groundedness"]["n"] == 1

    route.reset()
    again = build_judge_runner(settings_for(provider="openai", model=OPENAI_MODEL, trials=3))
    rec2 = asyncio.run(again.judge_record(make_record()))
    assert route.call_count == 0
    assert rec2["groundedness"]["trials"]["scores"] == g["scores"]
