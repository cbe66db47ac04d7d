"""Seed 002's answer-quality judge (issue 13, item 7b): relevance / groundedness /
completeness against the case's expected_topics, 0-1 each, score = their mean; offline
heuristic and OpenAI (real SDK through respx), cached and pinned like the other judges,
EVAL.md's rules, and the aggregate."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from evalkit.judges import JudgeSettings, build_judge_runner
from evalkit.judges.base import JudgeItem
from evalkit.judges.heuristic import HeuristicJudge
from evalkit.judges.prompts import render_prompt
from evalkit.metrics.aggregate import aggregate_records
from tests.support import write_run
from tests.unit.judges.judge_helpers import CORRECT, GROUNDED, OPENAI_MODEL, make_record, openai_reply

RUN_ID = "20250101T000000Z-aq0001"
QUALITY = {"relevance": 0.9, "groundedness": 0.6, "completeness": 0.5, "reasoning": "covers OAuth, not JWT",
           "topics_covered": ["OAuth"], "topics_missing": ["JWT"]}


def _record(i: int = 0, **kw) -> dict:
    rec = make_record(f"q{i}", case_index=i, **kw)
    rec["case"]["expected_topics"] = ["port 8080", "PostgreSQL"]
    return rec


def test_heuristic_dimensions_by_hand():
    item = JudgeItem(
        question="Which port does the server listen on?",
        answer="The server listens on port 8080 [1].",
        context=({"text": "The server listens on port 8080 by default."},),
        expected_topics=("port 8080", "PostgreSQL 16"),
    )
    v = asyncio.run(HeuristicJudge().judge("answer_quality", item)).verdict
    # by hand: the question's content words {port, server, listen} (stop words dropped,
    # "listens" stemmed) are all in the answer.
    assert v["relevance"] == 1.0
    assert v["groundedness"] == 1.0  # its one claim is in the chunk
    # "port 8080": 2 of 2 words in the answer (>= 60 %); "PostgreSQL 16": 0 of 2.
    assert v["topics_covered"] == ["port 8080"] and v["topics_missing"] == ["PostgreSQL 16"]
    assert v["completeness"] == 0.5
    assert v["score"] == pytest.approx((1.0 + 1.0 + 0.5) / 3)


def test_heuristic_without_topics_has_no_completeness():
    item = JudgeItem(question="Which port?", answer="Port 8080 [1].", context=({"text": "port 8080"},))
    v = asyncio.run(HeuristicJudge().judge("answer_quality", item)).verdict
    assert v["completeness"] is None
    assert v["score"] == pytest.approx((v["relevance"] + v["groundedness"]) / 2)


def test_prompt_names_the_topics_or_na():
    item = JudgeItem(question="Auth?", answer="OAuth.", expected_topics=("OAuth", "JWT"))
    text = render_prompt("answer_quality", item).messages[0]["content"]
    assert "Expected topics to cover: OAuth, JWT" in text and "RELEVANCE" in text
    text = render_prompt("answer_quality", JudgeItem(question="Auth?", answer="OAuth.")).messages[0]["content"]
    assert "Expected topics to cover: N/A" in text
    assert render_prompt("answer_quality", item).prompt_version == "answer_quality-v1"


def test_rules_abstention_empty_unanswerable_and_error():
    runner = build_judge_runner(JudgeSettings(answer_quality=True))

    def judge(rec):
        return asyncio.run(runner.judge_record(rec))

    rec = judge(_record(answer="I could not find this.", abstained=True))
    assert rec["answer_quality"] == {"score": 0.0, "relevance": 0.0, "groundedness": 0.0, "completeness": 0.0,
                                     "reasoning": "abstained on an answerable question", "method": "rule"}
    assert judge(_record(answer="", abstained=None, error={"kind": "empty_answer", "status": None, "detail": ""}))[
        "answer_quality"]["score"] == 0.0
    # The heuristic measures completeness only against topics: without them the rule leaves it out too.
    bare = make_record(answer="I could not find this.", abstained=True)
    assert judge(bare)["answer_quality"]["completeness"] is None
    assert judge(_record(answerable=False))["answer_quality"] is None  # answered an unanswerable case: abstention metrics
    assert judge(_record(error={"kind": "timeout", "status": None, "detail": ""}))["answer_quality"] is None
    # Without the option the key is absent, and re-judging without it drops a stale one.
    plain = asyncio.run(build_judge_runner(JudgeSettings()).judge_record(judge(_record())))
    assert "answer_quality" not in plain
    d = runner.describe()
    assert d["answer_quality"] is True and d["prompt_version"]["answer_quality"] == "heuristic-v1"
    assert "answer_quality" not in build_judge_runner(JudgeSettings()).describe()["prompt_version"]


def test_aggregate_means_and_n():
    recs = [
        {"case": {"answerable": True}, "answer_quality": {"score": 0.6, "relevance": 0.9, "groundedness": 0.6, "completeness": 0.3}},
        {"case": {"answerable": True}, "answer_quality": {"score": 0.0, "relevance": 0.0, "groundedness": 0.0,
                                                          "completeness": 0.0, "method": "rule"}},
        # A judge failure is excluded, never 0.
        {"case": {"answerable": True}, "answer_quality": None,
         "judge_errors": [{"judge": "answer_quality", "reason": "parse_error"}]},
        {"case": {"answerable": True}},  # not judged for quality
    ]
    agg = aggregate_records(recs, ks=[5])["aggregate_metrics"]
    # by hand: (0.6 + 0) / 2, (0.9 + 0) / 2, (0.6 + 0) / 2, (0.3 + 0) / 2
    assert agg["answer_quality_avg"] == pytest.approx(0.3) and agg["n"]["answer_quality_avg"] == 2
    assert agg["answer_relevance_avg"] == pytest.approx(0.45)
    assert agg["answer_groundedness_avg"] == pytest.approx(0.3)
    assert agg["answer_completeness_avg"] == pytest.approx(0.15)
    assert agg["judge_errors_by_judge"] == {"answer_quality": 1}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    records = [_record(i) for i in range(3)]
    return write_run(tmp_path / "results", RUN_ID, records)


def _handler(quality):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
        seen.append((kind, body["messages"][-1]["content"]))
        data = {"groundedness": GROUNDED, "correctness": CORRECT, "answer_quality": quality}[kind]
        return httpx.Response(200, json=openai_reply(json.dumps(data) if isinstance(data, dict) else data))

    handler.seen = seen  # type: ignore[attr-defined]
    return handler


def _judge_cli(results: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
                                    "--cache-path", str(tmp_path / "cache.sqlite"), "--quiet", "--json", *args])


def test_openai_answer_quality_scored_cached_and_pinned(openai_router, openai_key, results, tmp_path):
    route = openai_router["chat"]
    handler = _handler(QUALITY)
    route.side_effect = handler
    res = _judge_cli(results, tmp_path, "--answer-quality")
    assert res.exit_code == 0, res.output
    assert route.call_count == 3 * 3  # groundedness, correctness, answer quality per case
    prompts = [text for kind, text in handler.seen if kind == "answer_quality"]
    assert len(prompts) == 3 and "Expected topics to cover: port 8080, PostgreSQL" in prompts[0]
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    aq = rec["answer_quality"]
    # score = seed 002's (relevance + groundedness + completeness) / 3 = (0.9 + 0.6 + 0.5) / 3
    assert aq["score"] == pytest.approx(2 / 3)
    assert aq["topics_missing"] == ["JWT"] and aq["prompt_version"] == "answer_quality-v1" and aq["model"] == OPENAI_MODEL
    metrics = json.loads((results / RUN_ID / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["answer_quality_avg"] == pytest.approx(2 / 3)
    assert metrics["aggregate_metrics"]["n"]["answer_quality_avg"] == 3
    cfg = json.loads((results / RUN_ID / "config.json").read_text())
    assert cfg["judge"]["prompt_version"]["answer_quality"] == "answer_quality-v1"

    route.reset()
    again = _judge_cli(results, tmp_path, "--answer-quality")
    assert again.exit_code == 0 and route.call_count == 0  # every verdict from the cache


def test_openai_junk_is_retried_then_a_judge_error(openai_router, openai_key, results, tmp_path):
    route = openai_router["chat"]
    route.side_effect = _handler({"relevance": 7, "groundedness": "high"})  # out of range, twice (with the repair)
    res = _judge_cli(results, tmp_path, "--answer-quality")
    assert res.exit_code == 0, res.output
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    assert rec["answer_quality"] is None
    assert [e["judge"] for e in rec["judge_errors"]] == ["answer_quality"]
    metrics = json.loads((results / RUN_ID / "metrics.json").read_text())
    agg = metrics["aggregate_metrics"]
    assert agg["answer_quality_avg"] is None and agg["n"]["answer_quality_avg"] == 0
    assert agg["judge_errors_by_judge"] == {"answer_quality": 3}
    assert agg["correctness_avg"] == CORRECT["score"]  # the other judges are untouched
