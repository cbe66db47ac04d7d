"""Anthropic judge through the real SDK client (tool use), answered by respx."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from evalkit.judges import JudgeItem, build_judge, build_judge_runner
from evalkit.judges.base import JudgeFailure, JudgeOutcome
from tests.unit.judges.judge_helpers import ANTHROPIC_MODEL, CORRECT, GROUNDED, anthropic_tool_reply, make_record

ITEM = JudgeItem(
    question="Which port does the server listen on?",
    answer="The port is 8080 [1].",
    context=({"chunk_id": "c1", "rel_path": "ops/server.md", "text": "The server listens on port 8080."},),
)


def _judge(settings_for, **kw):
    return build_judge(settings_for(provider="anthropic", model=ANTHROPIC_MODEL, **kw))


def _by_tool(replies):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        name = body["tool_choice"]["name"]
        reply = replies[name.removesuffix("_verdict")]
        if isinstance(reply, httpx.Response):
            return reply
        return httpx.Response(200, json=anthropic_tool_reply(reply, name=name))

    return handler


def test_tool_use_is_requested_and_parsed(anthropic_router, anthropic_key, settings_for):
    route = anthropic_router["messages"]
    route.return_value = httpx.Response(200, json=anthropic_tool_reply(GROUNDED))

    out = asyncio.run(_judge(settings_for).judge("groundedness", ITEM))

    assert isinstance(out, JudgeOutcome) and out.verdict["score"] == 5
    assert out.answered_model_id == ANTHROPIC_MODEL
    body = json.loads(route.calls.last.request.content)
    assert body["model"] == ANTHROPIC_MODEL and body["temperature"] == 0
    assert body["tool_choice"] == {"type": "tool", "name": "groundedness_verdict"}
    schema = body["tools"][0]["input_schema"]
    assert schema["properties"]["score"]["maximum"] == 5
    assert "description" in schema["properties"]["unsupported_claims"]
    assert route.calls.last.request.headers["x-api-key"] == anthropic_key


def test_claims_schema_is_sent_without_refs(anthropic_router, anthropic_key, settings_for):
    route = anthropic_router["messages"]
    claims = {"reasoning": "one of two", "claims": [
        {"claim": "The port is 8080.", "supported": True, "evidence": [1], "cited": True},
        {"claim": "It uses TLS.", "supported": False, "evidence": [], "cited": False},
    ]}
    route.return_value = httpx.Response(200, json=anthropic_tool_reply(claims, name="claims_verdict"))
    runner = build_judge_runner(settings_for(provider="anthropic", model=ANTHROPIC_MODEL, claim_level=True))
    route.side_effect = _by_tool({"claims": claims, "correctness": CORRECT})

    rec = asyncio.run(runner.judge_record(make_record(answer="The port is 8080 [1]. It uses TLS.")))

    schema = json.loads(route.calls[0].request.content)["tools"][0]["input_schema"]
    assert "$defs" not in json.dumps(schema)
    g = rec["groundedness"]
    # by hand: 1 supported claim of 2 -> 5 × 1/2
    assert g["score"] == 5 * 1 / 2
    assert g["claim_level"] is True and g["prompt_version"] == "claims-v1"
    assert g["supported_claims"] == ["The port is 8080."] and g["unsupported_claims"] == ["It uses TLS."]
    assert [c["supported"] for c in g["claims"]] == [True, False]


def test_text_junk_then_repair_then_success(anthropic_router, anthropic_key, settings_for):
    route = anthropic_router["messages"]
    route.side_effect = [
        httpx.Response(200, json=anthropic_tool_reply(None, text="I think it is grounded.")),
        httpx.Response(200, json=anthropic_tool_reply(GROUNDED)),
    ]
    out = asyncio.run(_judge(settings_for).judge("groundedness", ITEM))

    assert isinstance(out, JudgeOutcome) and out.repaired
    msgs = json.loads(route.calls[1].request.content)["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == "I think it is grounded."


def test_bad_tool_input_twice_is_a_parse_failure(anthropic_router, anthropic_key, settings_for):
    route = anthropic_router["messages"]
    route.return_value = httpx.Response(200, json=anthropic_tool_reply({"score": "high"}))
    out = asyncio.run(_judge(settings_for).judge("groundedness", ITEM))
    assert isinstance(out, JudgeFailure) and out.reason == "parse_failure"
    assert route.call_count == 2
    # by hand: both failed calls were billed, 2 × (100 × $3 + 20 × $15) per 1M tokens
    assert out.cost_usd == pytest.approx(2 * (100 * 3.0 + 20 * 15.0) / 1_000_000)


def test_429_and_529_then_success(anthropic_router, anthropic_key, settings_for, sleeps):
    route = anthropic_router["messages"]
    err = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    route.side_effect = [
        httpx.Response(429, headers={"retry-after": "3"}, json=err),
        httpx.Response(529, json={"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}),
        httpx.Response(200, json=anthropic_tool_reply(GROUNDED)),
    ]
    out = asyncio.run(_judge(settings_for).judge("groundedness", ITEM))
    assert isinstance(out, JudgeOutcome)
    assert route.call_count == 3
    assert sleeps.waits == [3.0, 0.0]


def test_usage_cost_and_cache_hit(anthropic_router, anthropic_key, settings_for):
    route = anthropic_router["messages"]
    route.side_effect = _by_tool({"groundedness": GROUNDED, "correctness": CORRECT})
    rec = asyncio.run(build_judge_runner(settings_for(provider="anthropic", model=ANTHROPIC_MODEL)).judge_record(make_record()))
    # by hand: 2 calls × (100 input × $3 + 20 output × $15) per 1M tokens (claude-3-5-sonnet)
    assert rec["cost"]["judge_cost_usd"] == pytest.approx(2 * (100 * 3.0 + 20 * 15.0) / 1_000_000)
    assert route.call_count == 2
    route.reset()

    again = build_judge_runner(settings_for(provider="anthropic", model=ANTHROPIC_MODEL))
    rec2 = asyncio.run(again.judge_record(make_record()))
    assert route.call_count == 0
    assert rec2["correctness"]["score"] == CORRECT["score"] and rec2["cost"]["judge_cost_usd"] == 0
