"""The judge-reliability block across re-judging, and seed 000's 20% disagreement flag
(issue 43 item 6): judge_answers without --spot-check keeps the earlier block (marked
carried over) instead of writing null; a disagreement rate above 20% is a metrics.json
warning and a terminal line."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from evalkit.judges.reliability import DISAGREEMENT_ALERT, disagreement_warning
from tests.support import write_run
from tests.unit.judges.judge_helpers import (
    ANSWERED,
    CORRECT,
    GROUNDED,
    OPENAI_MODEL,
    make_record,
    openai_reply,
)

RUN_ID = "20250101T000000Z-rk0001"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    records = [make_record(f"q{i}", case_index=i, abstained=None, answer="The port is 8080 [1].") for i in range(4)]
    return write_run(tmp_path / "results", RUN_ID, records)


def _handler(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
    text = body["messages"][-1]["content"]
    if kind == "abstention":
        data = ANSWERED
    elif kind == "groundedness":
        # the second judge (v1-alt's wording) gives 2 where the main judge gives 5: > 1 point apart
        data = {**GROUNDED, "score": 2} if "checking an assistant's answer for faithfulness" in text else GROUNDED
    else:
        data = CORRECT
    return httpx.Response(200, json=openai_reply(json.dumps(data)))


def _judge(results: Path, tmp_path: Path, *extra: str):
    return CliRunner().invoke(app, [
        "--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
        "--cache-path", str(tmp_path / "cache.sqlite"), "--json", *extra,
    ])


def _metrics(results: Path) -> dict:
    return json.loads((results / RUN_ID / "metrics.json").read_text())


def test_rejudging_without_a_spot_check_keeps_the_block_and_the_flag(openai_router, openai_key, results, tmp_path):
    openai_router["chat"].side_effect = _handler
    res = _judge(results, tmp_path, "--spot-check", "4", "--spot-check-prompt-version", "v1-alt", "--seed", "1")
    assert res.exit_code == 0, res.output
    measured = _metrics(results)
    block = measured["aggregate_metrics"]["judge_reliability"]
    # by hand: 4 cases x (groundedness, correctness, abstention) = 12 pairs, groundedness 5 vs 2
    # on all four -> 4 of 12 = 0.333 > 0.2
    assert (block["n_pairs"], block["n_disagreements"]) == (12, 4) and "carried_over" not in block
    flags = [w for w in measured["warnings"] if w["kind"] == "judge_disagreement"]
    assert len(flags) == 1 and (flags[0]["n"], flags[0]["of"]) == (4, 12) and flags[0]["ids"] == ["q0", "q1", "q2", "q3"]
    assert "disagree on 33% of the spot-checked verdicts" in res.stderr  # the terminal says it too

    res = _judge(results, tmp_path)  # re-judge, no --spot-check
    assert res.exit_code == 0, res.output
    kept = _metrics(results)
    assert kept["aggregate_metrics"]["judge_reliability"] == {**block, "carried_over": True}
    assert json.loads(res.stdout.strip().splitlines()[-1])["judge_reliability"]["carried_over"] is True
    flags = [w for w in kept["warnings"] if w["kind"] == "judge_disagreement"]
    assert len(flags) == 1 and "an earlier judging session" in flags[0]["message"]  # made again, once
    assert "an earlier judging session" in res.stderr


@pytest.mark.parametrize(
    ("rate", "flagged"),
    [(DISAGREEMENT_ALERT, False), (0.15, False), (0.21, True), (1.0, True), (None, False)],
    ids=["exactly-20%", "below", "above", "all", "unmeasured"],
)
def test_the_flag_is_strictly_above_the_seeds_20_percent(rate, flagged):
    block = {"disagreement_rate": rate, "n_pairs": 100, "n_disagreements": None if rate is None else round(rate * 100),
             "disagreeing_case_ids": [f"c{i}" for i in range(30)], "second_judge": {"model": "m2"}}
    warning = disagreement_warning(block)
    assert (warning is not None) is flagged
    if flagged:
        assert warning["kind"] == "judge_disagreement" and warning["severity"] == "warning"
        assert len(warning["ids"]) == 20 and "m2" in warning["message"]
