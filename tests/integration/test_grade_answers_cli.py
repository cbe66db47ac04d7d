"""label_eval.py --grade-answers with piped input, and judge_answers reporting
judge-vs-human agreement in metrics.json (issue 11, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.label_eval import app as label_app
from evalkit.judges.grades import GRADES_FILE
from evalkit.metrics.ppi import ppi_mean_ci
from tests.integration.test_judge_answers_cli import RUN_ID, _invoke, _record, run_dir  # noqa: F401 - fixture
from tests.support import write_run

pytestmark = pytest.mark.integration


@pytest.fixture
def graded_run(tmp_path: Path) -> Path:
    """Six answered cases and one target error, with groundedness/correctness from an LLM judge."""
    records = [_record(i, f"q{i}", f"Answer {i} on port 8080.") for i in range(6)]
    records.append(_record(6, "q6", "", error={"kind": "timeout", "status": None, "detail": "30s"}))
    for r in records[:6]:
        r["groundedness"] = {"score": 4.0, "method": "llm"}
        r["correctness"] = {"score": 3.0, "method": "llm"}
    return write_run(tmp_path / "results", "r1", records, config=None)


def _grade(results: Path, stdin: str, *extra: str):
    return CliRunner().invoke(label_app, ["--grade-answers", "--run-id", "r1", "--results-dir", str(results),
                                          "--sample", "3", "--seed", "0", *extra], input=stdin)


def _shown(output: str) -> list[str]:
    return [ln.split(": ", 1)[1].rstrip(" =") for ln in output.splitlines() if ln.startswith("=== case ")]


def test_piped_session_junk_skip_quit_then_resume(graded_run: Path):
    # case 1: junk "7" is re-asked, then 4 / junk "x" re-asked / 3; case 2: blank = skip; case 3: q.
    res = _grade(graded_run, "7\n4\nx\n3\n\nq\n", "--grader", "ana")
    assert res.exit_code == 0, res.output
    first = _shown(res.output)
    assert len(first) == 3 and "q6" not in first
    assert res.output.count("groundedness 0-5 (blank = skip, q = quit): ") == 4
    assert res.output.count("correctness 0-5: ") == 2
    assert res.output.count("expected a whole number 0-5") == 2
    assert "Which port does the server use?" in res.output and "server.md > # H" in res.output
    assert "key facts: port 8080" in res.output
    assert "1 graded, 1 skipped, 1 left" in res.output

    lines = [json.loads(ln) for ln in (graded_run / "r1" / GRADES_FILE).read_text().splitlines()]
    assert [(g["test_case_id"], g["groundedness"], g["correctness"], g["grader"]) for g in lines] == [(first[0], 4, 3, "ana")]
    # by hand: one pair each; groundedness |4 - 4.0| = 0, correctness |3 - 3.0| = 0
    assert "groundedness kappa —, MAE 0.00, n 1; correctness kappa —, MAE 0.00, n 1" in res.output

    # another grader is given the whole sample: graders are kept apart (issue 42)
    res = _grade(graded_run, "q\n", "--grader", "bob")
    assert _shown(res.output) == first[:1]
    # the same seed resumes the same sample: the skipped case and the one quit on
    res = _grade(graded_run, "5\n2\n1\n1\n", "--grader", "ana")
    assert res.exit_code == 0, res.output
    assert _shown(res.output) == first[1:]
    lines = [json.loads(ln) for ln in (graded_run / "r1" / GRADES_FILE).read_text().splitlines()]
    assert [(g["test_case_id"], g["groundedness"], g["correctness"]) for g in lines] == [
        (first[0], 4, 3), (first[1], 5, 2), (first[2], 1, 1)]
    # by hand: groundedness |4-4| + |5-4| + |1-4| = 4 -> MAE 4/3; correctness |3-3| + |2-3| + |1-3| = 3 -> 1
    assert "groundedness kappa 0.00, MAE 1.33, n 3; correctness kappa 0.00, MAE 1.00, n 3" in res.output

    res = _grade(graded_run, "", "--grader", "ana")
    assert res.exit_code == 0 and "every case of the sample" in res.output and _shown(res.output) == []


def test_end_of_input_quits_without_writing(graded_run: Path):
    res = _grade(graded_run, "4\n")  # EOF at the correctness prompt
    assert res.exit_code == 0, res.output
    assert not (graded_run / "r1" / GRADES_FILE).exists()


def test_grade_answers_needs_a_run_id_and_one_mode(graded_run: Path):
    res = CliRunner().invoke(label_app, ["--grade-answers", "--results-dir", str(graded_run)])
    assert res.exit_code == 2 and "--run-id" in res.output
    res = CliRunner().invoke(label_app, ["--grade-answers", "--review-auto", "--run-id", "r1", "--results-dir", str(graded_run)])
    assert res.exit_code == 2 and "give one mode" in res.output
    res = CliRunner().invoke(label_app, ["--grade-answers", "--run-id", "nope", "--results-dir", str(graded_run)])
    assert res.exit_code == 2 and "no run 'nope'" in res.output


def test_judge_answers_writes_judge_agreement_when_grades_exist(run_dir: Path):  # noqa: F811
    grades_file = run_dir / RUN_ID / GRADES_FILE
    # q1, q2 are answered and judged; q4 is a target error (no judge score)
    grades_file.write_text("".join(json.dumps({"test_case_id": cid, "groundedness": g, "correctness": c}) + "\n"
                                   for cid, g, c in (("q1", 5, 4), ("q2", 1, 0), ("q4", 0, 0))))
    res = _invoke(run_dir, "--allow-truncated-context", "--vault", str(run_dir.parent / "vault"))
    assert res.exit_code == 0, res.output
    assert "Judge vs human grades" in res.stdout

    metrics = json.loads((run_dir / RUN_ID / "metrics.json").read_text())
    agree = metrics["aggregate_metrics"]["judge_agreement"]
    recs = {r["test_case_id"]: r for r in map(json.loads, (run_dir / RUN_ID / "results.jsonl").read_text().splitlines())}
    for kind, human in (("groundedness", {"q1": 5, "q2": 1}), ("correctness", {"q1": 4, "q2": 0})):
        a = agree[kind]
        assert a["n"] == 2 and a["n_without_judge_score"] == 1
        # by hand: MAE = (|h_q1 - j_q1| + |h_q2 - j_q2|) / 2 on the judge's stored scores
        judge = {cid: recs[cid][kind]["score"] for cid in human}
        assert a["mae"] == pytest.approx(sum(abs(human[c] - judge[c]) for c in human) / 2)

        # issue 42: the corrected mean beside the raw one, over the cases the run's mean is over
        b = metrics["aggregate_metrics"]["judge_ppi"][kind]
        scored = {cid: r[kind]["score"] for cid, r in recs.items() if (r.get(kind) or {}).get("score") is not None}
        assert b["judge"]["mean"] == pytest.approx(metrics["aggregate_metrics"][f"{kind}_avg"])
        assert b["judge"]["n"] == len(scored) and b["n_labeled"] == 2 == b["humans"]["n"]
        rest = [v for cid, v in scored.items() if cid not in human]
        want = (ppi_mean_ci(list(human.values()), [scored[c] for c in human], rest)["estimate"] if rest
                else sum(human.values()) / 2)
        assert b["estimate"] == pytest.approx(want)
    assert metrics["aggregate_metrics"]["judge_ppi"]["method"] == "ppi++"
    assert "## Judge means corrected by human grades" in (run_dir / RUN_ID / "summary.md").read_text()
    assert "(PPI++)" in res.stdout and "corrected by human" in res.stdout

    # the grades removed, a re-judge drops the stale agreement
    grades_file.unlink()
    assert _invoke(run_dir, "--quiet", "--allow-truncated-context").exit_code == 0
    metrics = json.loads((run_dir / RUN_ID / "metrics.json").read_text())
    assert "judge_agreement" not in metrics["aggregate_metrics"] and "judge_ppi" not in metrics["aggregate_metrics"]


def test_plan_width_says_how_many_grades_and_which_cases(tmp_path: Path):
    from evalkit.judges import grades as grades_mod
    from evalkit.store.runs import RunDir

    records = [_record(i, f"q{i}", f"Answer {i}.") for i in range(40)]
    for i, r in enumerate(records):
        r["groundedness"] = {"score": float(i % 6), "method": "llm"}
        r["correctness"] = {"score": float((i * 7) % 6), "method": "llm"}
    results = write_run(tmp_path / "results", "r1", records, config=None)
    run = RunDir.open(results, "r1")
    for i in range(0, 20, 2):  # ten graded, the humans a point below the judge
        grades_mod.append_grade(run, {"test_case_id": f"q{i}", "groundedness": max(0, i % 6 - 1),
                                      "correctness": max(0, (i * 7) % 6 - 1), "grader": "ana"}, record=records[i])
    plan = grades_mod.plan_grading(run, 0.8, seed=3)
    res = CliRunner().invoke(label_app, ["--grade-answers", "--run-id", "r1", "--results-dir", str(results),
                                         "--plan-width", "0.8", "--seed", "3"])
    assert res.exit_code == 0, res.output
    g = plan["groundedness"]
    assert f"{g['n_needed']} graded ({g['n_more']} more) would bring it to 0.8" in res.output
    assert plan["n_more"] == max(g["n_more"], plan["correctness"]["n_more"])
    # next: ungraded cases only, as many as the plan asks, the same for the same seed
    assert len(plan["next"]) == plan["n_more"] and not {f"q{i}" for i in range(0, 20, 2)} & set(plan["next"])
    assert "grade next: " + ", ".join(plan["next"]) in res.output
    assert grades_mod.plan_grading(run, 0.8, seed=3)["next"] == plan["next"]
    assert not (results / "r1" / GRADES_FILE).read_text().count("\n") - 10  # nothing graded
