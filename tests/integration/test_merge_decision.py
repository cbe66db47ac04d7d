"""The merge decision on the bundled eval set, as a new user meets it (issue 36): the bundled
run against an exact copy of itself passes as identical, from both doors (compare_runs and
run_eval --baseline), and a real retrieval change the 59 cases cannot settle is "not enough
evidence" (exit 4), never a failure, with the same words from both doors.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def project(tmp_path: Path) -> dict[str, str]:
    es = tmp_path / "eval_set.jsonl"  # a copy: gating locks the eval set in an eval_sets.lock beside it
    shutil.copy(ROOT / "eval_set.jsonl", es)
    return {"es": str(es), "results": str(tmp_path / "results"), "vault": str(ROOT / "sample_vault")}


def _run(p: dict[str, str], run_id: str, *extra: str):
    return CliRunner().invoke(app, ["run", "--eval-set", p["es"], "--vault", p["vault"], "--results-dir", p["results"],
                                    "--run-id", run_id, "--quiet", *extra])


def _compare(p: dict[str, str], a: str, b: str, *extra: str):
    return CliRunner().invoke(app, ["compare", a, b, "--results-dir", p["results"], "--resamples", "500", *extra])


def test_the_bundled_run_against_a_copy_of_itself_passes_as_identical(project) -> None:
    assert _run(project, "base").exit_code == 0
    shutil.copytree(Path(project["results"]) / "base", Path(project["results"]) / "copy")
    out = _compare(project, "base", "copy", "--format", "json")
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body["decision"]["outcome"] == "pass" and body["verdict"]["verdict"] == "identical"
    assert body["decision"]["headline"].startswith("PASS: identical — no paired case changed on any of the ")
    # every metric the runs computed is in the verdict, abstention on its 8 cases included
    assert {"recall_frac", "ndcg", "precision", "abstention_accuracy"} <= {m["metric"] for m in body["verdict"]["metrics"]}
    # the other door: the same run again, gated against the first, says the same
    again = _run(project, "again", "--baseline", "base")
    assert again.exit_code == 0, again.output
    gate = json.loads((Path(project["results"]) / "again" / "metrics.json").read_text())["gate"]
    assert (gate["mode"], gate["outcome"]) == ("verdict", "pass") and gate["headline"].startswith("PASS: identical")


def test_a_change_the_bundled_set_cannot_settle_is_not_enough_evidence(project) -> None:
    # BM25's b and k1 moved: a few cases gain or lose a hit. 51 answerable cases cannot show a
    # rate within 0.05 once any case changed (the interval's floor is ±0.053 there), so the
    # decision is exit 4, not a pass and not a failure, and it says how many cases would do.
    assert _run(project, "base").exit_code == 0
    changed = _run(project, "bm25", "--param", "bm25_b=0.3", "--param", "bm25_k1=2.0", "--baseline", "base")
    assert changed.exit_code == 4, changed.output
    assert "not enough evidence to decide the merge" in changed.stderr
    out = _compare(project, "base", "bm25", "--format", "json")
    assert out.exit_code == 4
    decision = json.loads(out.stdout)["decision"]
    assert decision["headline"].startswith("NOT ENOUGH EVIDENCE: inconclusive — ")
    assert "this set cannot judge a 0.05 margin; add about " in decision["headline"]
    gate = json.loads((Path(project["results"]) / "bm25" / "metrics.json").read_text())["gate"]
    assert gate["headline"] == decision["headline"]  # one decision, the same words from both doors
    for action, code in (("pass", 0), ("fail", 1)):
        assert _compare(project, "base", "bm25", "--on-inconclusive", action, "--format", "json").exit_code == code
