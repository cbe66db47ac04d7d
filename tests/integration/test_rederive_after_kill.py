"""judge_answers killed (SIGKILL) after it committed metrics.json and before it wrote the
files derived from it: the next command that opens the run derives summary.md, results.json
and report.html again, so all agree with metrics.json, and leaves no temp file or mark
behind (issue 29 item 6: metrics.json said groundedness 4.215, summary.md "judge: none")."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app as judge_app
from evalkit.cli.report import app as report_app
from evalkit.derive.summary import render_run_summary
from evalkit.report.html.run import render_run_report, write_run_report
from evalkit.store.runs import DERIVE_PENDING, WRITER_LOCK, RunDir
from tests.support import run_eval_api

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "r"
JUDGE = ["--judge-provider", "heuristic", "--no-cache", "--quiet"]

# judge_answers.py with one function replaced by a SIGKILL of the process itself, so it dies
# at a known point; "replace:NAME" dies as the atomic writer renames its finished temp file
# over NAME, which leaves that temp file under the writer's own name.
DRIVER = """
import importlib, os, signal, sys

point, argv = sys.argv[1], sys.argv[2:]

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if point.startswith("replace:"):
    name, real = point.split(":", 1)[1], os.replace

    def replace(src, dst, *args, **kwargs):
        if os.path.basename(dst) == name:
            die()
        return real(src, dst, *args, **kwargs)

    os.replace = replace
else:
    module, attr = point.split(":")
    setattr(importlib.import_module(module), attr, die)

from evalkit.cli.judge_answers import app

sys.argv = ["judge_answers.py", *argv]
app()
"""

MID_COMMIT = "replace:metrics.json"
KILL_POINTS = [
    # the commit under way: the `.commit` marker written, results.jsonl renamed, metrics.json not
    pytest.param(MID_COMMIT, id="mid-commit"),
    # metrics.json, results.jsonl and config.json committed; no derived file written yet
    pytest.param("evalkit.derive:write_derived", id="before-any-derived-file"),
    # summary.md written, results.json and report.html not
    pytest.param("evalkit.derive.summary:write_results_json", id="after-summary"),
    # results.json's temp file written whole, killed before its rename: `.results.json.<x>.tmp`
    pytest.param("replace:results.json", id="inside-the-results-json-write"),
    # summary.md and results.json written, report.html not
    pytest.param("evalkit.derive.summary:write_report", id="before-the-report"),
]


@pytest.fixture(scope="module")
def retrieval_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A retrieval-only run of 5 cases with its summary.md, results.json and report.html
    (each saying no judge ran)."""
    results = tmp_path_factory.mktemp("pristine")
    run_eval_api(eval_set=ROOT / "eval_set.jsonl", run_id=RUN_ID, results_dir=results, retrieval_only=True,
                 vault=ROOT / "sample_vault", limit=5, quiet=True)
    write_run_report(RunDir(results / RUN_ID))
    return results / RUN_ID


def _judge_killed_at(point: str, results: Path) -> str:
    """Run judge_answers.py (heuristic) on the run, dying at `point`; its stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, point, "--run-id", RUN_ID, "--results-dir", str(results), *JUDGE],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc.stderr


def _page(html: str) -> str:
    """A report page without the moment it was made (`report made <time> by evalkit`)."""
    return re.sub(r"report made \S+ by evalkit", "report made - by evalkit", html)


def _judge_line(summary: str) -> str:
    return next(line for line in summary.splitlines() if line.startswith("- **judge**"))


def _assert_derived_agree(run: RunDir) -> None:
    """Every derived file is what the derive step renders from metrics.json as it is now."""
    metrics = json.loads(run.metrics_path.read_text())
    assert metrics["aggregate_metrics"]["judge"]["heuristic"] is True  # the judging was committed
    assert json.loads((run.path / "results.json").read_text())["metrics"] == metrics
    summary = (run.path / "summary.md").read_text()
    # Sorted: a judging renders from its metrics in memory, whose latency stages are not in
    # metrics.json's key order, so those rows' order may differ from a render from disk.
    assert sorted(summary.splitlines()) == sorted((render_run_summary(run) + "\n").splitlines())
    assert "heuristic" in _judge_line(summary)
    assert _page((run.path / "report.html").read_text()) == _page(render_run_report(run))


@pytest.mark.parametrize("point", KILL_POINTS)
def test_next_command_rederives_what_a_killed_judging_left_stale(retrieval_only: Path, tmp_path: Path, point: str):
    results = tmp_path / "results"
    shutil.copytree(retrieval_only, results / RUN_ID)
    assert "none" in _judge_line((results / RUN_ID / "summary.md").read_text())

    _judge_killed_at(point, results)
    run = RunDir(results / RUN_ID)
    left = sorted(p.name for p in run.path.iterdir() if p.name.startswith("."))
    # Killed: some derived file still says no judge ran, and the mark says they are behind.
    assert DERIVE_PENDING in left
    if point != MID_COMMIT:  # mid-commit, metrics.json is still the old one: RunDir.open finishes it
        fresh = {
            "results.json": json.loads((run.path / "results.json").read_text())["metrics"]
            == json.loads(run.metrics_path.read_text()),
            "report.html": _page((run.path / "report.html").read_text()) == _page(render_run_report(run)),
        }
        assert not all(fresh.values()), fresh
    if point == "replace:results.json":  # what recovery must remove: the writer's own temp name
        assert any(name.startswith(".results.json.") and name.endswith(".tmp") for name in left), left

    # Recovery: the next command that opens the run, here one that then stops on a bad --ids.
    res = CliRunner().invoke(judge_app, ["--run-id", RUN_ID, "--results-dir", str(results), "--ids", "no-such-case",
                                         *JUDGE])
    assert res.exit_code == 2, res.output
    _assert_derived_agree(run)
    names = sorted(p.name for p in run.path.iterdir())
    assert names == [WRITER_LOCK, "config.json", "metrics.json", "report.html", "results.json", "results.jsonl", "summary.md"]


def test_evalkit_report_recovers_too(retrieval_only: Path, tmp_path: Path):
    results = tmp_path / "results"
    shutil.copytree(retrieval_only, results / RUN_ID)
    _judge_killed_at("evalkit.derive:write_derived", results)
    res = CliRunner().invoke(report_app, ["--run-id", RUN_ID, "--results-dir", str(results)])
    assert res.exit_code == 0, res.output
    run = RunDir(results / RUN_ID)
    _assert_derived_agree(run)
    assert not (run.path / DERIVE_PENDING).exists()


def test_a_derive_that_completes_leaves_no_mark(retrieval_only: Path, tmp_path: Path):
    # The mark lives only between a metrics.json write and the derive step that follows it.
    results = tmp_path / "results"
    shutil.copytree(retrieval_only, results / RUN_ID)
    assert not (results / RUN_ID / DERIVE_PENDING).exists()
    res = CliRunner().invoke(judge_app, ["--run-id", RUN_ID, "--results-dir", str(results), *JUDGE])
    assert res.exit_code == 0, res.output
    run = RunDir(results / RUN_ID)
    _assert_derived_agree(run)
    assert sorted(p.name for p in run.path.iterdir() if p.name.startswith(".")) == [WRITER_LOCK]  # kept, empty
