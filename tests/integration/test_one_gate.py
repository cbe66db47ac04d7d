"""One gate (issue 25 item 4): run_eval's --baseline gate and compare_runs give the same verdict
and exit code on the same pair of runs, including pairs at different K.

Before: `run_eval --k 5 --baseline base` (base measured K 5 and 10) passed, while
`compare_runs base <that run>` refused the pair (K differs, exit 2); and against a baseline
measured only at K 5, `run_eval --k 10 --baseline` passed having compared neither recall nor MRR.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from tests.support import run_eval_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def project(tmp_path: Path) -> dict[str, str]:
    es = tmp_path / "eval_set.jsonl"  # a copy: gating locks the eval set in an eval_sets.lock beside it
    shutil.copy(ROOT / "eval_set.jsonl", es)
    return {"es": str(es), "results": str(tmp_path / "results"), "vault": str(ROOT / "sample_vault")}


def _run(p: dict[str, str], run_id: str, *extra: str):
    return run_eval_cli("run", *extra, app=app, eval_set=p["es"], vault=p["vault"], results_dir=p["results"],
                        run_id=run_id, quiet=True)


def _compare(p: dict[str, str], a: str, b: str, *extra: str):
    return CliRunner().invoke(app, ["compare", a, b, "--results-dir", p["results"], "--format", "json", *extra])


def _gate(p: dict[str, str], run_id: str) -> dict:
    return json.loads((Path(p["results"]) / run_id / "metrics.json").read_text())["gate"]


def test_a_baseline_at_k_5_and_10_gates_a_k_5_run_the_same_way(project) -> None:
    assert _run(project, "base", "--k", "5", "--k", "10").exit_code == 0
    new = _run(project, "new", "--k", "5", "--baseline", "base")
    cmp = _compare(project, "base", "new")
    assert new.exit_code == cmp.exit_code == 0, (new.output, cmp.output)
    gate, out = _gate(project, "new"), json.loads(cmp.stdout)
    assert gate["passed"] is out["gate"]["passed"] is True
    assert gate["k"] == out["gate"]["k"] == "5"
    assert {"recall_any@5", "mrr@5"} <= set(gate["compared"]) and {"recall_any@5", "mrr@5"} <= set(out["gate"]["compared"])
    assert gate["headline"] == out["decision"]["headline"]  # one decision, the same words from both doors
    # the answers saw 10 chunks in one run and 5 in the other: not compared, and both say why
    why = "K differs: the target was asked for 10 vs 5 chunks"
    assert {s["metric"]: s["reason"] for s in gate["skipped"]}["groundedness_avg"] == why
    assert {s["metric"]: s["reason"] for s in out["gate"]["skipped"]}["groundedness_avg"] == why


def test_a_gate_that_could_not_compare_recall_fails_in_both_doors(project) -> None:
    assert _run(project, "base", "--k", "5").exit_code == 0
    new = _run(project, "new", "--k", "10", "--baseline", "base")
    cmp = _compare(project, "base", "new")
    assert new.exit_code == cmp.exit_code == 1, (new.output, cmp.output)
    gate, out = _gate(project, "new"), json.loads(cmp.stdout)
    assert gate["passed"] is out["gate"]["passed"] is False
    assert "recall_at_k_avg" not in gate["compared"] and "recall_at_k_avg" not in out["gate"]["compared"]
    # told: both pass on what they could compare
    new = _run(project, "new2", "--k", "10", "--baseline", "base", "--allow-missing-metrics")
    cmp = _compare(project, "base", "new2", "--allow-missing-metrics")
    assert new.exit_code == cmp.exit_code, (new.output, cmp.output)
    assert _gate(project, "new2")["passed"] is json.loads(cmp.stdout)["gate"]["passed"]


# ---------------------------------------------------------------- the merge decision (issue 36)
# The bundled eval set as a new user meets it: the run against an exact copy of itself passes
# as identical from both doors, and a change its 66 cases cannot settle is "not enough
# evidence" (exit 4), never a failure, with the same words from both doors.


def test_the_bundled_run_against_a_copy_of_itself_passes_as_identical(project) -> None:
    assert _run(project, "base").exit_code == 0
    shutil.copytree(Path(project["results"]) / "base", Path(project["results"]) / "copy")
    out = _compare(project, "base", "copy")
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body["decision"]["outcome"] == "pass" and body["verdict"]["verdict"] == "identical"
    assert body["decision"]["headline"].startswith("PASS: identical — no paired case changed on any of the ")
    # every metric the runs computed is in the verdict, abstention on its 8 cases included
    assert {"recall_frac", "ndcg", "precision", "abstention_accuracy"} <= {m["metric"] for m in body["verdict"]["metrics"]}
    # the other door: the same run again, gated against the first, says the same
    again = _run(project, "again", "--baseline", "base")
    assert again.exit_code == 0, again.output
    gate = _gate(project, "again")
    assert (gate["mode"], gate["outcome"]) == ("verdict", "pass") and gate["headline"].startswith("PASS: identical")


def test_a_change_the_bundled_set_cannot_settle_is_not_enough_evidence(project) -> None:
    # BM25's k1 moved: a few cases gain or lose a hit, Recall@5 -0.017 with an interval that
    # reaches past both 0 and the -0.05 margin (measured), so the decision is exit 4, not a pass
    # and not a failure, and it says how many more cases (and, the set holding conversations,
    # how many conversations) would settle it.
    assert _run(project, "base").exit_code == 0
    changed = _run(project, "bm25", "--param", "bm25_k1=2.0", "--baseline", "base")
    assert changed.exit_code == 4, changed.output
    assert "not enough evidence to decide the merge" in changed.stderr
    out = _compare(project, "base", "bm25")
    assert out.exit_code == 4
    decision = json.loads(out.stdout)["decision"]
    assert decision["headline"].startswith("NOT ENOUGH EVIDENCE: inconclusive — ")
    assert "more paired cases (about " in decision["headline"]
    assert " conversations, a single question counting as one) would settle" in decision["headline"]
    gate = _gate(project, "bm25")
    assert gate["headline"] == decision["headline"]  # one decision, the same words from both doors
    for action, code in (("pass", 0), ("fail", 1)):
        assert _compare(project, "base", "bm25", "--on-inconclusive", action).exit_code == code
