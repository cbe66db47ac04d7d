"""One truth per number after a re-scoring (issue 25 item 2).

score_retrieval with moved labels used to rewrite metrics.json only: compare_runs, which pairs
the per-case values of results.jsonl, then said "recall unchanged" while its own gate, reading
metrics.json, said recall fell by 0.41. And a later judge_answers re-aggregated results.jsonl
at the run's own K, undoing a re-scoring at another K. Now the per-case values are rewritten
with metrics.json, and every reader agrees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit import run_eval, score_retrieval
from evalkit.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "personal/No such note.md"


def _per_case(run: Path, k: int, metric: str = "recall_any") -> dict[str, float | None]:
    out = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["test_case_id"]] = ((rec["retrieval_metrics"].get("at_k") or {}).get(str(k)) or {}).get(metric)
    return out


def _mean(values: dict[str, float | None]) -> float:
    scored = [v for v in values.values() if v is not None]
    return sum(scored) / len(scored)


@pytest.fixture()
def two_runs(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    for run_id in ("A", "B"):
        run_eval(str(ROOT / "eval_set.jsonl"), run_id=run_id, results_dir=str(results), retrieval_only=True,
                 vault=str(ROOT / "sample_vault"), quiet=True)
    return results


def _moved_labels(tmp_path: Path) -> tuple[Path, set[str]]:
    """A copy of the eval set whose every other case points its gold at a note that does not exist."""
    moved, ids = [], set()
    for i, line in enumerate((ROOT / "eval_set.jsonl").read_text().splitlines()):
        case = json.loads(line)
        # a conversation's line moves the gold of each of its turns (cases `id#n`)
        parts = [(f"{case['id']}#{n}", t) for n, t in enumerate(case["turns"], start=1)] if "turns" in case else [(case["id"], case)]
        for cid, part in parts:
            if i % 2 == 0 and part.get("gold_supports"):
                ids.add(cid)
                for support in part["gold_supports"]:
                    support["rel_path"] = NOWHERE
        moved.append(json.dumps(case))
    path = tmp_path / "moved.jsonl"
    path.write_text("\n".join(moved) + "\n")
    return path, ids


def test_moved_labels_give_one_recall_in_every_output(two_runs: Path, tmp_path: Path) -> None:
    moved, moved_ids = _moved_labels(tmp_path)
    before = _per_case(two_runs / "B", 5)
    scoring = score_retrieval("B", eval_set=str(moved), results_dir=two_runs)
    assert scoring.results_rewritten

    # By hand: a support in a note that does not exist matches no chunk, so every moved case now
    # misses; the others keep the recall they had. (Unanswerable cases stay unscored: None.)
    expected = {cid: (0.0 if cid in moved_ids and v is not None else v) for cid, v in before.items()}
    assert _per_case(two_runs / "B", 5) == expected
    want = _mean(expected)
    assert want < _mean(before) - 0.3  # the labels really moved the number

    metrics = json.loads((two_runs / "B" / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["recall_at_k_avg"] == pytest.approx(want, abs=1e-12)
    assert metrics["retrieval_scoring"]["results_rewritten"] is True
    # results.json (the whole report) shows the same per-case values and the labels scored
    report = json.loads((two_runs / "B" / "results.json").read_text())
    rows = {row["test_case_id"]: row for row in report["cases"]}
    assert {cid: row["retrieval_metrics"]["at_k"]["5"]["recall_any"] for cid, row in rows.items()} == expected
    records = [json.loads(line) for line in (two_runs / "B" / "results.jsonl").read_text().splitlines()]
    assert all(s["rel_path"] == NOWHERE for r in records if r["test_case_id"] in moved_ids for s in r["case"]["gold_supports"])

    # compare_runs names the label change (issue 36 item 5) ...
    res = CliRunner().invoke(app, ["compare", "A", "B", "--results-dir", str(two_runs), "--format", "json"])
    assert res.exit_code == 2 and "gold labels differ" in res.stderr, res.output
    # ... and, the change accepted, the delta row and the gate read one number
    res = CliRunner().invoke(app, ["compare", "A", "B", "--results-dir", str(two_runs), "--format", "json",
                                   "--allow-label-change", "--gate", "threshold"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    (row,) = [r for r in out["deltas"] if r["metric"] == "recall_any" and r["scope"] == "overall" and r["k"] == 5]
    assert row["b"] == pytest.approx(want, abs=1e-12) and row["change"] == "worse"
    (detail,) = [d for d in out["gate"]["regression_details"] if d["metric"] == "recall_at_k_avg"]
    assert detail["new"] == pytest.approx(row["b"], abs=1e-12)
    assert detail["baseline"] == pytest.approx(row["a"], abs=1e-12)

    # a later judging keeps the re-scored retrieval numbers
    res = CliRunner().invoke(app, ["judge", "--run-id", "B", "--results-dir", str(two_runs),
                                   "--judge-provider", "heuristic", "--no-cache", "--quiet"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((two_runs / "B" / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["recall_at_k_avg"] == pytest.approx(want, abs=1e-12)
    assert _per_case(two_runs / "B", 5) == expected


def test_a_rescoring_at_another_k_survives_a_later_judging(two_runs: Path) -> None:
    scoring = score_retrieval("B", ks=[3], primary_k=3, results_dir=two_runs)
    assert scoring.results_rewritten
    at3 = _per_case(two_runs / "B", 3)
    assert all(v is None for v in _per_case(two_runs / "B", 5).values())  # the records hold K=3 only now
    metrics = json.loads((two_runs / "B" / "metrics.json").read_text())
    assert metrics["ks"] == [3] and metrics["aggregate_metrics"]["k"] == 3
    assert metrics["aggregate_metrics"]["recall_at_k_avg"] == pytest.approx(_mean(at3), abs=1e-12)

    res = CliRunner().invoke(app, ["judge", "--run-id", "B", "--results-dir", str(two_runs),
                                   "--judge-provider", "heuristic", "--no-cache", "--quiet"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((two_runs / "B" / "metrics.json").read_text())
    assert metrics["ks"] == [3] and metrics["aggregate_metrics"]["k"] == 3
    assert metrics["aggregate_metrics"]["recall_at_k_avg"] == pytest.approx(_mean(at3), abs=1e-12)


def test_a_rescoring_that_changes_nothing_leaves_results_jsonl_alone(two_runs: Path) -> None:
    before = (two_runs / "B" / "results.jsonl").read_bytes()
    scoring = score_retrieval("B", results_dir=two_runs)
    assert not scoring.results_rewritten
    assert (two_runs / "B" / "results.jsonl").read_bytes() == before
    # the same labels given as a file are the same dataset_version: nothing to rewrite either
    scoring = score_retrieval("B", eval_set=str(ROOT / "eval_set.jsonl"), results_dir=two_runs)
    assert not scoring.results_rewritten
    assert (two_runs / "B" / "results.jsonl").read_bytes() == before
    # back and forth: K 3, then the run's own K again, gives the run's per-case values back
    score_retrieval("B", ks=[3], primary_k=3, results_dir=two_runs)
    assert score_retrieval("B", ks=[5], primary_k=5, results_dir=two_runs).results_rewritten
    assert _per_case(two_runs / "B", 5) == _per_case(two_runs / "A", 5)


def test_score_abstention_with_new_labels_rewrites_what_it_rescored(two_runs: Path, tmp_path: Path) -> None:
    from evalkit import score_abstention

    moved, moved_ids = _moved_labels(tmp_path)
    res = score_abstention("B", eval_set=str(moved), results_dir=two_runs)
    assert res.results_rewritten
    per_case = _per_case(two_runs / "B", 5)
    assert all(per_case[cid] in (0.0, None) for cid in moved_ids)  # by hand: gold in a missing note
    metrics = json.loads((two_runs / "B" / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["recall_at_k_avg"] == pytest.approx(_mean(per_case), abs=1e-12)
    assert metrics["retrieval_scoring"]["per_case"]["dataset_version"] == res.eval_set.version
    # compare pairs the same per-case values the gate reads from metrics.json
    assert metrics["dataset_version"] == res.eval_set.version  # the labels scored (issue 36 item 5)
    out = json.loads(CliRunner().invoke(app, ["compare", "A", "B", "--results-dir", str(two_runs),
                                              "--format", "json", "--allow-label-change"]).stdout)
    (row,) = [r for r in out["deltas"] if r["metric"] == "recall_any" and r["scope"] == "overall" and r["k"] == 5]
    assert row["b"] == pytest.approx(metrics["aggregate_metrics"]["recall_at_k_avg"], abs=1e-12)
    # scoring again with the run's own labels puts every per-case value back
    assert score_retrieval("B", results_dir=two_runs).results_rewritten
    assert _per_case(two_runs / "B", 5) == _per_case(two_runs / "A", 5)


def test_a_rescoring_judges_the_run_time_gate_and_floors_again(two_runs: Path, tmp_path: Path) -> None:
    # C gated against A at run time (same chatbot, same labels: passed) and held a recall floor
    # (passed); score_retrieval with moved labels then drops C's recall by about 0.4 (above).
    results = two_runs
    # a copy of the eval set: gating against A locks the file it names (eval_sets.lock beside it)
    own = tmp_path / "eval_set.jsonl"
    own.write_bytes((ROOT / "eval_set.jsonl").read_bytes())
    run_eval(str(own), run_id="C", results_dir=str(results), retrieval_only=True,
             vault=str(ROOT / "sample_vault"), quiet=True, baseline="A", thresholds=["recall_at_k_avg=0.5"])
    before = json.loads((results / "C" / "metrics.json").read_text())
    assert before["gate"]["passed"] is True and before["thresholds"]["passed"] is True

    moved, _ = _moved_labels(tmp_path)
    score_retrieval("C", eval_set=str(moved), results_dir=results)
    after = json.loads((results / "C" / "metrics.json").read_text())
    recall = after["aggregate_metrics"]["recall_at_k_avg"]
    assert recall < 0.5  # so the floor now fails, and so does the gate (a drop far past 0.05)
    assert after["thresholds"]["passed"] is False
    assert after["gate"]["passed"] is False
    # C now holds A's cases with other labels (issue 36 item 5): the stored gate names that too
    assert any(f.startswith("invariant broken: gold labels differ") for f in after["gate"]["failures"])
    # the same verdict compare_runs gives on the pair, the label change accepted
    res = CliRunner().invoke(app, ["compare", "A", "C", "--results-dir", str(results), "--format", "json",
                                   "--allow-label-change"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["gate"]["passed"] is False
    # summary.md, derived from metrics.json, says it too
    assert "FAIL" in (results / "C" / "summary.md").read_text().upper()


def test_a_rescoring_whose_baseline_is_gone_drops_the_stale_gate(two_runs: Path, tmp_path: Path) -> None:
    import shutil

    own = tmp_path / "eval_set.jsonl"
    own.write_bytes((ROOT / "eval_set.jsonl").read_bytes())
    run_eval(str(own), run_id="C", results_dir=str(two_runs), retrieval_only=True,
             vault=str(ROOT / "sample_vault"), quiet=True, baseline="A")
    shutil.rmtree(two_runs / "A")
    moved, _ = _moved_labels(tmp_path)
    score_retrieval("C", eval_set=str(moved), results_dir=two_runs)
    after = json.loads((two_runs / "C" / "metrics.json").read_text())
    assert "gate" not in after
    assert [w["kind"] for w in after["warnings"]].count("gate_not_rechecked") == 1
