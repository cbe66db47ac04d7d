"""Every judge accepts the reply shape seed 000 asks for, through the OpenAI-compatible path
(the real SDK, respx on llama.cpp's default URL), and caches it: the second ask makes no call.

regression: issue item 7, the correctness judge required key_facts_covered/key_facts_missing,
so a judge following the seed's prompt ({"score", "reasoning"}) failed every case, paid a
repair round, and left nothing in the cache.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import respx
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from evalkit.judges import JudgeItem, JudgeOutcome, JudgeSettings, build_judge
from tests.support import write_run
from tests.unit.judges.judge_helpers import make_record, openai_reply

LOCAL_URL = "http://127.0.0.1:8080/v1/chat/completions"  # --judge-model name@pin, no --judge-base-url
LOCAL_MODEL = "qwen2.5:14b@845dbda0ea48"
RUN_ID = "20250101T000000Z-5eed00"

# The seed's own reply shapes (000 §3.B and §3.C); the claim-level judge has no seed shape,
# so its minimum is what scoring needs: each claim and whether it is supported.
SEED_REPLIES = {
    "groundedness": {"score": 4, "reasoning": "the port is in chunk 1",
                     "unsupported_claims": [], "supported_claims": ["The port is 8080."]},
    "correctness": {"score": 3, "reasoning": "right port, no detail"},
    "abstention": {"abstained": False, "confidence": 0.8},
    "claims": {"claims": [{"claim": "The port is 8080.", "supported": True}]},
}
ITEM = JudgeItem(
    question="Which port does the server listen on?",
    answer="The port is 8080 [1].",
    context=({"chunk_id": "c1", "rel_path": "ops/server.md", "heading_path": "# Server",
              "text": "The server listens on port 8080 by default."},),
    expected_key_facts=("port 8080",),
)


def _kind_of(body: dict) -> str:
    text = body["messages"][-1]["content"]
    if "cannot answer the question" in text:
        return "abstention"
    if "correctly addresses" in text:
        return "correctness"
    return "claims" if "atomic factual claims" in text else "groundedness"


def _seed_replies(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    return httpx.Response(200, json=openai_reply(json.dumps(SEED_REPLIES[_kind_of(body)]), model=body["model"]))


@pytest.fixture
def local_router():
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        router.post(LOCAL_URL, name="chat").mock(side_effect=_seed_replies)
        yield router


async def _judge_once(settings: JudgeSettings, kind: str):
    judge = build_judge(settings)
    try:
        return await judge.judge(kind, ITEM)
    finally:
        await judge.aclose()


@pytest.mark.parametrize("kind", list(SEED_REPLIES))
def test_seed_minimal_reply_is_accepted_and_cached(kind, local_router, settings_for):
    settings = settings_for(provider="openai-compatible", model=LOCAL_MODEL)
    route = local_router["chat"]
    out = asyncio.run(_judge_once(settings, kind))
    assert isinstance(out, JudgeOutcome), out
    assert out.repaired is False and route.call_count == 1  # no repair round
    for key, value in SEED_REPLIES[kind].items():
        if key != "claims":
            assert out.verdict[key] == value
    if kind == "correctness":
        # not in the seed's reply: null ("not said"), not [] ("none covered")
        assert out.verdict["key_facts_covered"] is None and out.verdict["key_facts_missing"] is None
    if kind == "claims":
        assert out.verdict["claims"] == [{"claim": "The port is 8080.", "supported": True, "evidence": None, "cited": None}]
        assert out.verdict["reasoning"] == ""

    again = asyncio.run(_judge_once(settings, kind))
    assert isinstance(again, JudgeOutcome) and again.cached is True
    assert again.verdict == out.verdict
    assert route.call_count == 1  # the cache answered


def test_seed_reply_without_a_required_seed_key_still_fails(local_router, settings_for):
    # Optional means "beyond the seed": a reply missing the seed's own score is junk.
    local_router["chat"].mock(side_effect=None, return_value=httpx.Response(200, json=openai_reply(json.dumps({"reasoning": "ok"}))))
    out = asyncio.run(_judge_once(settings_for(provider="openai-compatible", model=LOCAL_MODEL), "correctness"))
    assert not isinstance(out, JudgeOutcome) and out.reason == "parse_failure"


def test_judge_answers_with_a_seed_following_local_judge(local_router, tmp_path: Path):
    run = tmp_path / "results" / RUN_ID
    write_run(tmp_path / "results", RUN_ID, [make_record(f"q{i}", case_index=i, key_facts=["port 8080"]) for i in range(3)])
    args = ["--run-id", RUN_ID, "--results-dir", str(tmp_path / "results"), "--judge-provider", "openai-compatible", "--judge-model", LOCAL_MODEL,
            "--cache-path", str(tmp_path / "cache.sqlite"), "--quiet", "--json"]

    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout.strip().splitlines()[-1])["judge_stats"]
    assert stats["n_judge_errors"] == 0 and stats["repairs"] == 0 and stats["calls"] == 3 * 2
    rec = json.loads((run / "results.jsonl").read_text().splitlines()[0])
    assert rec["correctness"]["score"] == 3 and rec["groundedness"]["score"] == 4 and rec["judge_errors"] == []

    local_router["chat"].reset()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert local_router["chat"].call_count == 0
    assert json.loads(res.stdout.strip().splitlines()[-1])["judge_stats"]["cache_hits"] == 3 * 2
