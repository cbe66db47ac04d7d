"""judge_answers with the OpenAI provider: the real SDK through respx, warm cache = zero calls,
spot-check with a second prompt version, trials."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from tests.support import write_run
from tests.unit.judges.judge_helpers import CORRECT, GROUNDED, OPENAI_MODEL, make_record, openai_reply

RUN_ID = "20250101T000000Z-def456"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    records = [make_record(f"q{i}", case_index=i) for i in range(4)]
    return write_run(tmp_path / "results", RUN_ID, records)


def _reply(scores: dict[str, int] | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
        data = dict(GROUNDED if kind == "groundedness" else CORRECT)
        if scores and kind in scores:
            data["score"] = scores[kind]
        return httpx.Response(200, json=openai_reply(json.dumps(data), prompt_tokens=1000, completion_tokens=100))

    return handler


def _run(results: Path, tmp_path: Path, *args: str) -> dict:
    res = CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
                                   "--cache-path", str(tmp_path / "cache.sqlite"), "--quiet", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_second_run_with_warm_cache_makes_zero_calls(openai_router, openai_key, results, tmp_path):
    route = openai_router["chat"]
    route.side_effect = _reply()
    first = _run(results, tmp_path)
    assert route.call_count == 4 * 2
    # by hand: 8 calls × (1000 × $2.50 + 100 × $10.00) per 1M tokens
    assert first["judge_stats"]["cost_usd"] == pytest.approx(8 * (1000 * 2.50 + 100 * 10.00) / 1_000_000)
    metrics = json.loads((results / RUN_ID / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["cost"]["judge_total_usd"] == pytest.approx(first["judge_stats"]["cost_usd"])
    assert metrics["aggregate_metrics"]["correctness_avg"] == CORRECT["score"]
    assert metrics["aggregate_metrics"]["n"]["correctness_avg"] == 4
    cfg = json.loads((results / RUN_ID / "config.json").read_text())
    assert cfg["judge"]["model"] == OPENAI_MODEL and cfg["judge"]["pinned"] is True and cfg["judge"]["heuristic"] is False
    assert "sk-test" not in (results / RUN_ID / "config.json").read_text()

    route.reset()
    second = _run(results, tmp_path)
    assert route.call_count == 0
    assert second["judge_stats"]["cache_hits"] == 8 and second["judge_stats"]["cost_usd"] == 0
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    assert rec["groundedness"]["cached"] is True and rec["cost"]["cached_calls"] == 2


def test_spot_check_with_a_second_prompt_version(openai_router, openai_key, results, tmp_path):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        alt = "Reply as JSON with keys" in body["messages"][-1]["content"]
        return _reply({"groundedness": 2, "correctness": 4} if alt else None)(request)

    openai_router["chat"].side_effect = handler
    out = _run(results, tmp_path, "--spot-check", "3", "--spot-check-prompt-version", "v1-alt", "--seed", "1")
    rel = out["judge_reliability"]
    assert rel["spot_check_n"] == 3 and rel["n_pairs"] == 6 and rel["seed"] == 1
    # by hand: groundedness 5 vs 2 disagrees on all 3 cases, correctness 4 vs 4 on none -> 3/6
    assert rel["disagreement_rate"] == pytest.approx(3 / 6)
    assert rel["by_judge"]["groundedness"]["disagreement_rate"] == 1
    assert rel["second_judge"]["prompt_set"] == "v1-alt"
    metrics = json.loads((results / RUN_ID / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["judge_reliability"]["spot_check_n"] == 3


def test_trials_report_spread_and_standard_error(openai_router, openai_key, results, tmp_path):
    openai_router["chat"].side_effect = _reply()
    out = _run(results, tmp_path, "--judge-trials", "2", "--ids", "q0,q1")
    t = out["judge_stats"]["trials"]
    assert t["n_trials"] == 2
    # by hand: the mock answers the same score every trial -> no spread
    assert t["groundedness"]["n"] == 2 and t["groundedness"]["mean_case_spread"] == 0
    assert t["groundedness"]["se_judge_noise"] == 0


def test_rejected_key_exits_2_and_leaves_results_alone(openai_router, openai_key, results, tmp_path):
    openai_router["chat"].return_value = httpx.Response(401, json={"error": {"message": "Incorrect API key provided"}})
    before = (results / RUN_ID / "results.jsonl").read_text()
    res = CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
                                   "--cache-path", str(tmp_path / "cache.sqlite")])
    assert res.exit_code == 2
    assert "openai refused the judge request (HTTP 401" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert (results / RUN_ID / "results.jsonl").read_text() == before


def _files(results: Path) -> dict[str, str]:
    return {name: (results / RUN_ID / name).read_text() for name in ("results.jsonl", "metrics.json", "config.json")}


def test_a_judge_failing_every_call_exits_1_and_leaves_the_run_alone(openai_router, openai_key, results, tmp_path):
    # regression: issue item 6, a re-judge in which every call failed exited 0
    route = openai_router["chat"]
    route.side_effect = _reply()
    _run(results, tmp_path)  # good verdicts first
    before = _files(results)

    route.reset()
    route.side_effect = None
    route.return_value = httpx.Response(200, json=openai_reply("I think the answer is fine."))
    res = CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
                                   "--cache-path", str(tmp_path / "cache.sqlite"), "--refresh-cache", "--quiet", "--json"])
    assert res.exit_code == 1
    # by hand: 4 cases × (groundedness + correctness), each a reply and a repair reply
    assert route.call_count == 4 * 2 * 2
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("evalkit: the judge failed all 8 judgments of this run (parse_failure 8); first: ")
    assert last.endswith("results.jsonl, metrics.json and config.json were left as they were")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["all_failed"] is True and out["judge_stats"]["judgments"] == {"ok": 0, "failed": 8}
    assert _files(results) == before  # the earlier verdicts survive an instrument failure


def test_a_judge_failing_some_calls_exits_0_and_counts_them(openai_router, openai_key, results, tmp_path):
    def handler(request: httpx.Request) -> httpx.Response:
        kind = json.loads(request.content)["response_format"]["json_schema"]["name"]
        if kind == "correctness_verdict":
            return httpx.Response(200, json=openai_reply("not json"))
        return _reply()(request)

    openai_router["chat"].side_effect = handler
    out = _run(results, tmp_path)
    assert out["all_failed"] is False and out["judge_stats"]["judgments"] == {"ok": 4, "failed": 4}
    assert out["judge_stats"]["n_judge_errors"] == 4


def test_judge_samples_are_cached_apart_and_their_spread_reported(openai_router, openai_key, results, tmp_path):
    # issue 42 item 3: `--judge-samples N` (the same option as --judge-trials) asks N times;
    # the mock's groundedness is 5, 3, 4, 5, 3, 4, ... in call order (temperature-0 judges still vary)
    route = openai_router["chat"]
    calls = {"g": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body["response_format"]["json_schema"]["name"].startswith("groundedness"):
            calls["g"] += 1
            return _reply({"groundedness": (5, 3, 4)[(calls["g"] - 1) % 3]})(request)
        return _reply()(request)

    route.side_effect = handler
    out = _run(results, tmp_path, "--judge-samples", "3", "--ids", "q0")
    assert route.call_count == 3 * 2
    g = out["judge_stats"]["trials"]["groundedness"]
    # by hand: one case, samples {5, 3, 4} in some order: spread 2, std 1, se_judge_noise = sqrt(1/3) / 1
    assert g["n"] == 1 and g["mean"] == pytest.approx(4.0) and g["mean_case_spread"] == 2
    assert g["mean_case_std"] == pytest.approx(1.0) and g["se_judge_noise"] == pytest.approx((1 / 3) ** 0.5)
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    assert sorted(rec["groundedness"]["trials"]["scores"]) == [3, 4, 5] and rec["groundedness"]["score"] == pytest.approx(4.0)
    # each sample has its own cache entry: the same command again asks nothing, and gets the same three
    route.reset()
    again = _run(results, tmp_path, "--judge-samples", "3", "--ids", "q0")
    assert route.call_count == 0 and again["judge_stats"]["trials"]["groundedness"] == g
