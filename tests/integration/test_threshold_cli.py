"""`run_eval.py --threshold` end to end (issue 13): the in-process reference chatbot over
sample_vault, no network; a failed threshold exits 1 and names the metric."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import run_eval_script

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess:
    return run_eval_script(*extra, eval_set="eval_set.jsonl", results_dir=tmp_path, run_id=run_id, limit=6,
                           retrieval_only=True, quiet=True, env={"COLUMNS": "200", "TERM": "dumb"})


@pytest.fixture(autouse=True)
def _needs_sample_data():
    if not (ROOT / "eval_set.jsonl").is_file() or not any((ROOT / "sample_vault").rglob("*.md")):
        pytest.skip("needs eval_set.jsonl and sample_vault/")


def test_a_threshold_above_the_scores_exits_1_and_names_the_metric(tmp_path):
    out = _run(tmp_path, "x", "--threshold", "0.99")
    assert out.returncode == 1, out.stderr
    assert "evalkit: threshold check failed:" in out.stderr
    # MRR of the reference chatbot is well below 0.99 on any 6 cases with gold
    assert "mrr_avg" in out.stderr and "is below the threshold 0.99" in out.stderr
    metrics = json.loads((tmp_path / "x" / "metrics.json").read_text())
    assert metrics["thresholds"]["passed"] is False
    assert any(c["metric"] == "mrr_avg" and not c["passed"] for c in metrics["thresholds"]["checked"])
    assert "## Thresholds" in (tmp_path / "x" / "summary.md").read_text()


def test_a_low_threshold_passes_and_a_budget_is_reported(tmp_path):
    out = _run(tmp_path, "y", "--threshold", "0.1", "--latency-budget-ms", "60000", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["success"] is True and result["thresholds"]["passed"] is True
    agg = result["aggregate_metrics"]
    # every in-process answer takes far less than a minute
    assert agg["latency_budget_score_avg"] == 1.0 and agg["within_budget_rate"] == 1.0
    assert "latency_budget_score_avg" in [c["metric"] for c in result["thresholds"]["checked"]]


def test_an_unknown_metric_is_bad_input(tmp_path):
    out = _run(tmp_path, "z", "--threshold", "mrr_average=0.7")
    assert out.returncode == 2
    assert "did you mean 'mrr_avg'" in out.stderr
    assert not (tmp_path / "z").exists()  # nothing was run or written
