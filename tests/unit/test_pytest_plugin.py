"""evalkit's pytest plugin (issue 42 item 5): a project's own test suite asserts a case's or a
run's metrics through evalkit's scoring, and a miss fails that suite's test."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from evalkit.pytest_plugin import assert_metrics, evalkit_case
from tests.unit.test_compare import make_run, rec

ROOT = Path(__file__).resolve().parents[2]
CASE = {"id": "port", "question": "Which port does the server use?", "answerable": True,
        "gold_supports": [{"rel_path": "notes/server.md", "heading_path": "# Server"}]}
HIT = [{"rel_path": "notes/other.md", "heading_path": "# Other", "rank": 1},
       {"rel_path": "notes/server.md", "heading_path": "# Server", "rank": 2}]


def test_a_case_is_scored_as_run_eval_scores_it():
    from evalkit.metrics.retrieval import score_case_retrieval

    record = evalkit_case(CASE, HIT, answer="Set the port to 8080 [1].", ks=(1, 5))
    assert record["retrieval_metrics"] == score_case_retrieval(CASE, HIT, [], None, "off", [1, 5])
    assert_metrics(record, {"recall_any@5": ">= 1", "mrr@5": "== 0.5", "recall_any@1": "< 0.5"})
    with pytest.raises(AssertionError, match=r"mrr@5 = 0.5, expected >= 0.8; rubric/x: not measured"):
        assert_metrics(record, {"mrr@5": 0.8, "rubric/x": ">= 1"})
    with pytest.raises(ValueError, match="OP NUMBER"):
        assert_metrics(record, {"mrr@5": "about 0.5"})


def test_a_run_is_read_as_threshold_reads_it(tmp_path: Path):
    folder = make_run(tmp_path, "a", [rec(f"q{i}", rank=1 if i < 8 else None) for i in range(10)])
    assert_metrics(folder, {"recall_at_k_avg": ">= 0.8", "recall_any@5": "== 0.8", "mrr_avg": "<= 0.8"})
    with pytest.raises(AssertionError, match="recall_at_k_avg = 0.8, expected > 0.8"):
        assert_metrics(folder / "metrics.json", {"recall_at_k_avg": "> 0.8"})


def test_the_entry_point_is_declared():
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert doc["project"]["entry-points"]["pytest11"] == {"evalkit": "evalkit.pytest_plugin"}


def test_a_project_suite_uses_the_fixtures_and_a_miss_fails_it(tmp_path: Path):
    (tmp_path / "helpfulness.toml").write_text(
        'name = "helpfulness"\nscale = 5\ncriteria = [{ text = "cites", pattern = "\\\\[\\\\d+\\\\]" }]\n', encoding="utf-8")
    (tmp_path / "test_project.py").write_text(f'''
CASE = {CASE!r}
HIT = {HIT!r}

def test_passes(evalkit_case, assert_metrics):
    record = evalkit_case(CASE, HIT, answer="Port 8080 [1].", rubrics=["helpfulness.toml"])
    assert_metrics(record, {{"recall_any@5": ">= 1", "rubric/helpfulness": ">= 5"}})

def test_fails(evalkit_case, assert_metrics):
    record = evalkit_case(CASE, HIT, answer="Port 8080.", rubrics=["helpfulness.toml"])
    assert_metrics(record, {{"rubric/helpfulness": ">= 2.5"}})
''', encoding="utf-8")
    # Autoload off: -p loads the plugin whether or not the installed entry point would too.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "evalkit.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "addopts=", "test_project.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed, 1 passed" in out.stdout
    assert "rubric/helpfulness = 0, expected >= 2.5" in out.stdout
