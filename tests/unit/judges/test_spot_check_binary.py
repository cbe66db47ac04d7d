"""The reliability spot-check counts a different binary classification as a disagreement
(issue 30 item 5): seed 000's "score difference > 1 point or different binary
classification". The abstention classifier's `abstained` (where a classifier, not the
target, decided it) and the conflict judge's `acknowledged` are re-decided by the second
judge and compared.

regression: issue 30 item 5 — only groundedness and correctness scores were compared, so
two judges that classified an answer differently as an abstention agreed.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from evalkit.judges.reliability import reliability_summary
from tests.support import write_run
from tests.unit.judges.judge_helpers import ANSWERED, CORRECT, GROUNDED, OPENAI_MODEL, make_record, openai_reply

RUN_ID = "20250101T000000Z-sp0001"
HEDGE = "The notes do not say much; the port is probably 8080 [1]."


def test_binary_pairs_pool_with_score_pairs_by_hand() -> None:
    s = reliability_summary(
        {"groundedness": [(5, 3), (4, 4)], "correctness": [(2, 3)]},
        {"abstention": [(False, True), (False, False)], "conflict": [(True, True)]},
    )
    # by hand: score pairs disagree 1 of 3 (5 vs 3), binary pairs 1 of 3 (False vs True) -> 2 of 6
    assert (s["n_pairs"], s["n_disagreements"]) == (6, 2)
    assert s["disagreement_rate"] == pytest.approx(2 / 6)
    assert s["by_judge"]["abstention"] == {"disagreement_rate": 0.5, "n": 2, "n_disagree": 1}
    assert s["by_judge"]["conflict"] == {"disagreement_rate": 0.0, "n": 1, "n_disagree": 0}
    # kappa stays over the score pairs only, as without binary pairs
    assert s["weighted_kappa"] == reliability_summary({"groundedness": [(5, 3), (4, 4)], "correctness": [(2, 3)]})["weighted_kappa"]


def test_no_binary_pairs_keeps_the_old_numbers() -> None:
    s = reliability_summary({"groundedness": [(5, 3), (4, 4)], "correctness": [(2, 3)]})
    assert (s["n_pairs"], s["n_disagreements"], s["disagreement_rate"]) == (3, 1, pytest.approx(1 / 3))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    # abstained=None: the target says nothing, so the abstention classifier decides
    records = [make_record(f"q{i}", case_index=i, abstained=None, answer=HEDGE if i == 0 else "The port is 8080 [1].")
               for i in range(4)]
    return write_run(tmp_path / "results", RUN_ID, records)


def _handler(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
    text = body["messages"][-1]["content"]
    alt = "Is this reply a refusal" in text  # abstention-v1-alt: the second judge
    if kind == "abstention":
        # the second judge takes the hedged answer for a refusal; the main judge does not
        data = {"abstained": True, "confidence": 0.6} if alt and "do not say much" in text else ANSWERED
    else:
        data = GROUNDED if kind == "groundedness" else CORRECT
    return httpx.Response(200, json=openai_reply(json.dumps(data)))


def test_a_different_abstention_classification_is_a_disagreement(openai_router, openai_key, results, tmp_path):
    openai_router["chat"].side_effect = _handler
    res = CliRunner().invoke(app, [
        "--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
        "--cache-path", str(tmp_path / "cache.sqlite"), "--json",
        "--spot-check", "4", "--spot-check-prompt-version", "v1-alt", "--seed", "1",
    ])
    assert res.exit_code == 0, res.output
    rel = json.loads(res.stdout.strip().splitlines()[-1])["judge_reliability"]
    # by hand: 4 cases x (groundedness, correctness, abstention) = 12 pairs; the scores agree
    # (same replies), the abstention decision differs on q0 only -> 1 of 12
    assert (rel["spot_check_n"], rel["n_pairs"], rel["n_disagreements"]) == (4, 12, 1)
    assert rel["disagreement_rate"] == pytest.approx(1 / 12)
    assert rel["by_judge"]["abstention"] == {"disagreement_rate": 0.25, "n": 4, "n_disagree": 1}
    assert rel["by_judge"]["groundedness"]["disagreement_rate"] == 0
    assert rel["disagreeing_case_ids"] == ["q0"]
    # said in the terminal table too (stderr), and kept in metrics.json
    assert "abstention decided otherwise" in res.stderr and "1 of 4" in res.stderr
    metrics = json.loads((results / RUN_ID / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["judge_reliability"]["disagreeing_case_ids"] == ["q0"]


def test_the_targets_own_abstained_is_not_spot_checked(openai_router, openai_key, tmp_path):
    run = tmp_path / "results" / RUN_ID
    run.mkdir(parents=True)
    records = [make_record(f"q{i}", case_index=i, abstained=False) for i in range(2)]  # method "target"
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "config.json").write_text(json.dumps({"run_id": RUN_ID, "settings": {"k": [5]}}))
    openai_router["chat"].side_effect = _handler
    res = CliRunner().invoke(app, [
        "--run-id", RUN_ID, "--results-dir", str(tmp_path / "results"), "--judge-model", OPENAI_MODEL,
        "--cache-path", str(tmp_path / "cache.sqlite"), "--quiet", "--json",
        "--spot-check", "2", "--spot-check-prompt-version", "v1-alt",
    ])
    assert res.exit_code == 0, res.output
    rel = json.loads(res.stdout.strip().splitlines()[-1])["judge_reliability"]
    assert "abstention" not in rel["by_judge"] and rel["n_pairs"] == 4
