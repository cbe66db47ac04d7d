"""run_eval --trials N end to end (issue 13, item 3): each case asked N times, per-trial
values, mean ± sample std and flake rates in metrics.json, resume by (case, trial), and
compare_runs pairing cases on their trial mean. Expected values are computed by hand
below from the bot's fixed plan."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pytest

from tests.support import run_eval_api, write_eval_set

pytestmark = pytest.mark.integration

# The bot and its cases are in docs/examples/, where docs/running.md's trials example runs them too:
# the n-th ask of a question (n = 1, 2, 3) follows the bot's PLAN; with concurrency 1 the n-th
# ask is trial n (trial-major order: every case once, then again).
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
BOT = (EXAMPLES / "flaky_bot.py").read_text(encoding="utf-8")
CASES = [json.loads(line) for line in (EXAMPLES / "flaky_cases.jsonl").read_text(encoding="utf-8").splitlines()]


def _setup(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "bot.py").write_text(BOT)
    return write_eval_set(tmp_path / "es.jsonl", CASES), f"python:{tmp_path / 'bot.py'}:ask"


def _run(tmp_path: Path, run_id: str, **kw):
    es, target = _setup(tmp_path)
    settings = dict(eval_set=es, target=target, k=[1], retrieval_only=True, results_dir=tmp_path / "results",
                    run_id=run_id, concurrency=1, no_probe=True, quiet=True, max_error_rate=1.0, retries=0)
    return run_eval_api(**{**settings, **kw})


def _records(run_dir: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]


def test_three_trials_by_hand(tmp_path: Path) -> None:
    result = _run(tmp_path, "t3", trials=3)
    records = _records(result.run_dir)
    # Trial-major order, one record per (case, trial).
    assert [(r["trial"], r["test_case_id"]) for r in records] == [
        (t, q) for t in (1, 2, 3) for q in ("qa", "qb", "qc", "qd", "qe")
    ]
    assert result.n_cases == 15

    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    block = metrics["trials"]
    assert block["n_trials"] == 3 and block["n_cases"] == 5 and block["n_records"] == 15 and block["complete"]
    recall = block["metrics"]["recall_at_k_avg"]
    # Labeled answerable cases qa qb qc qe; a target error scores 0 in metrics.json (as in any run):
    # trial 1: qa qb qe hit = 3/4; trial 2: qa only (qb misses, qe fails) = 1/4; trial 3: 3/4.
    assert recall["per_trial"] == [0.75, 0.25, 0.75]
    assert recall["mean"] == pytest.approx(7 / 12)
    # Sample std of (3/4, 1/4, 3/4): deviations 1/6, -1/3, 1/6; (1/36 + 4/36 + 1/36) / 2 = 1/12.
    assert recall["std"] == pytest.approx(math.sqrt(1 / 12))
    assert recall["min"] == 0.25 and recall["max"] == 0.75
    # The pooled cell (every answer a row) is the mean of the per-trial means here: no case misses a trial.
    assert metrics["aggregate_metrics"]["recall_at_k_avg"] == pytest.approx(7 / 12)

    # Flakes: on recall@1 only qb changes (qe's failed trial is not a scored outcome: excluded).
    flaky_recall = block["metrics"]["recall_any@1"]
    assert (flaky_recall["n_flaky"], flaky_recall["n_cases_compared"]) == (1, 4)
    assert flaky_recall["flake_rate"] == 0.25
    # The error rate per trial: 0, 1/5, 0; qe is its flaky case.
    assert block["metrics"]["error_rate"]["per_trial"] == [0.0, 0.2, 0.0]
    assert block["metrics"]["error_rate"]["n_flaky"] == 1
    # qd abstains in trials 1 and 2, answers in 3.
    assert block["metrics"]["abstention_accuracy"]["per_trial"] == [1.0, 1.0, 0.0]
    assert block["metrics"]["abstention_accuracy"]["n_flaky"] == 1
    assert block["n_flaky_cases"] == 3 and block["flaky_case_ids"] == ["qb", "qd", "qe"]
    assert block["flake_rate"] == pytest.approx(3 / 5)

    summary = (result.run_dir / "summary.md").read_text()
    assert "## Trials" in summary and "0.583 ± 0.289" in summary and "qb, qd, qe" in summary
    assert result.to_json()["trials"]["n_trials"] == 3

    config = json.loads((result.run_dir / "config.json").read_text())
    assert config["hashed"]["trials"] == 3


def test_single_trial_runs_are_unchanged(tmp_path: Path) -> None:
    result = _run(tmp_path, "t1")
    records = _records(result.run_dir)
    assert all("trial" not in r for r in records)
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert "trials" not in metrics and result.trials is None
    config = json.loads((result.run_dir / "config.json").read_text())
    assert "trials" not in config["hashed"]


def test_resume_keys_records_by_case_and_trial(tmp_path: Path) -> None:
    result = _run(tmp_path, "tr", trials=3)
    path = result.run_dir / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:8]))  # killed after trial 2's third case
    resumed = run_eval_api(resume="tr", results_dir=tmp_path / "results", quiet=True, no_probe=True, max_error_rate=1.0)
    records = _records(resumed.run_dir)
    keys = [(r["trial"], r["test_case_id"]) for r in records]
    assert sorted(keys) == sorted((t, q) for t in (1, 2, 3) for q in ("qa", "qb", "qc", "qd", "qe"))
    assert len(keys) == len(set(keys)) == 15
    assert resumed.skipped == 8
    block = json.loads((resumed.run_dir / "metrics.json").read_text())["trials"]
    assert block["complete"] and block["n_records"] == 15


def test_resume_with_other_trials_is_refused(tmp_path: Path) -> None:
    from evalkit.errors import BadConfig

    _run(tmp_path, "tx", trials=2)
    with pytest.raises(BadConfig, match="trials"):
        run_eval_api(resume="tx", trials=3, results_dir=tmp_path / "results", quiet=True, no_probe=True)


def test_compare_pairs_cases_on_their_trial_mean(tmp_path: Path) -> None:
    from evalkit import compare_runs

    _run(tmp_path, "t3", trials=3)
    # A second, single-trial run of a bot that always hits: every case's recall is 1.
    always = BOT.replace('"qb": ["hit", "miss", "hit"]', '"qb": ["hit", "hit", "hit"]').replace(
        '"qc": ["miss", "miss", "miss"]', '"qc": ["hit", "hit", "hit"]').replace('"qe": ["hit", "error", "hit"]', '"qe": ["hit", "hit", "hit"]')
    other = tmp_path / "other"
    other.mkdir()
    (other / "bot.py").write_text(always)
    _run(tmp_path, "base", target=f"python:{other / 'bot.py'}:ask")
    cmp = compare_runs("t3", "base", results_dir=str(tmp_path / "results"), ignore_invariants=True)
    row = next(d for d in cmp.deltas if d.metric == "recall_any" and d.scope == "overall" and d.k == 1)
    # The deltas' a and b are metrics.json's cells: the pooled mean over all 12 answers.
    assert row.a == pytest.approx(7 / 12) and row.b == 1.0
    # The paired test runs on per-case trial means: qa 1, qb 2/3, qc 0, qe 1 (its failed
    # trial excluded, not 0), against 1 each.
    assert row.n == 4
    assert row.paired_delta == pytest.approx(1 - (1 + 2 / 3 + 0 + 1) / 4)


def test_rescoring_scripts_recompute_the_trials_block(tmp_path: Path) -> None:
    from evalkit import score_abstention, score_retrieval

    result = _run(tmp_path, "rs", trials=3, k=[2, 1])
    before = json.loads((result.run_dir / "metrics.json").read_text())["trials"]
    assert "recall_any@1" in before["metrics"] and "recall_any@2" in before["metrics"]
    # Re-scored at K = 1 only: the per-trial values are recomputed, @2 is gone, not left stale.
    score_retrieval("rs", ks=[1], primary_k=1, results_dir=str(tmp_path / "results"))
    after = json.loads((result.run_dir / "metrics.json").read_text())["trials"]
    assert "recall_any@2" not in after["metrics"]
    assert after["metrics"]["recall_any@1"]["per_trial"] == before["metrics"]["recall_any@1"]["per_trial"] == [0.75, 0.25, 0.75]
    assert after["metrics"]["recall_at_k_avg"]["per_trial"] == [0.75, 0.25, 0.75]
    score_abstention("rs", results_dir=str(tmp_path / "results"))
    again = json.loads((result.run_dir / "metrics.json").read_text())["trials"]
    assert again["metrics"]["abstention_accuracy"]["per_trial"] == [1.0, 1.0, 0.0]


def test_rescoring_keeps_answer_quality(tmp_path: Path) -> None:
    # score_retrieval replaces only the retrieval keys: the answer-quality judge's means stay.
    from evalkit import score_retrieval

    result = _run(tmp_path, "aq", retrieval_only=None, answer_quality=True)
    before = json.loads((result.run_dir / "metrics.json").read_text())["aggregate_metrics"]
    assert before["n"]["answer_quality_avg"] > 0
    score_retrieval("aq", results_dir=str(tmp_path / "results"))
    after = json.loads((result.run_dir / "metrics.json").read_text())["aggregate_metrics"]
    for key in ("answer_quality_avg", "answer_relevance_avg", "groundedness_avg", "has_citations_rate"):
        assert after[key] == before[key] and after["n"][key] == before["n"][key], key
