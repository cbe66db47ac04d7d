"""compare_repro (evalkit/run/repro.py) on hand-built run folders: each kind of difference, named.

Issue 14 item 4: two runs of one config must agree record by record on the retrieved
chunks (ids, and scores within max(tolerance, 1e-10)) and on every per-case metric.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import RunSettings
from evalkit.errors import BadConfig
from evalkit.run.provenance import reproducibility_knobs
from evalkit.run.repro import Difference, compare_repro
from evalkit.store.runs import RunDir


def record(
    case_id: str,
    *,
    trial: int | None = None,
    chunks: tuple[tuple[str, float], ...] = (("c1", 1.0), ("c2", 0.5)),
    recall: float = 1.0,
    mrr: float = 1.0,
    error: str | None = None,
    latency_ms: float = 12.0,
    **extra: Any,
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "test_case_id": case_id,
        "case_index": int(case_id.removeprefix("q")),
        "retrieved_chunks": [
            {"chunk_id": cid, "rel_path": "n.md", "heading_path": "# N", "score_final": score, "rank": i}
            for i, (cid, score) in enumerate(chunks, 1)
        ],
        "retrieval_metrics": {
            "k": 5, "recall_at_k": recall, "mrr": mrr, "attribution_hit": True, "status": "scored",
            "at_k": {"5": {"recall_any": recall, "recall_all": None, "mrr": mrr}},
        },
        "latency": {"total_ms": latency_ms},
        "latency_budget": {"within": latency_ms < 10, "score": 1.0},
        "cost": {"judge_cost_usd": 0.0},
        "groundedness": None,
        "correctness": None,
        "abstention": {"abstained": False},
        "error": {"kind": error, "status": None, "detail": "x"} if error else None,
    }
    if trial is not None:
        rec["trial"] = trial
    rec.update(extra)
    return rec


def make_run(root: Path, run_id: str, records: list[dict[str, Any]]) -> RunDir:
    run = RunDir.create(root, run_id)
    run.rewrite_results(records)
    return run


def compare(tmp_path: Path, a: list[dict], b: list[dict], **kw: Any):
    return compare_repro(make_run(tmp_path, "a", a), make_run(tmp_path, "b", b), **kw)


def test_identical_runs_are_reproducible(tmp_path):
    recs = [record("q1"), record("q2", recall=0.0, mrr=0.0)]
    report = compare(tmp_path, recs, recs)
    assert report.reproducible and report.differences == [] and report.n_cases == 2
    assert report.verdict() == "repro: PASS — 2 cases, 0 differences (tolerance 0)"
    assert report.render_text().splitlines() == ["repro: run A a, run B b", report.verdict()]


def test_latency_cost_and_budget_are_not_compared(tmp_path):
    # latency_budget.within flips (5 < 10, 50 > 10): latency is not reproducible, so neither is it
    report = compare(tmp_path, [record("q1", latency_ms=5.0)], [record("q1", latency_ms=50.0)])
    assert report.reproducible


def test_a_changed_recall_is_a_metric_difference(tmp_path):
    report = compare(tmp_path, [record("q1"), record("q2")], [record("q1"), record("q2", recall=0.0)])
    assert not report.reproducible
    assert report.differences == [
        Difference("q2", 1, "metric", "retrieval_metrics.recall_at_k", 1.0, 0.0, -1.0),
        Difference("q2", 1, "metric", "retrieval_metrics.at_k.5.recall_any", 1.0, 0.0, -1.0),
    ]
    assert report.verdict() == "repro: FAIL — 1 of 2 cases differ (tolerance 0): q2"
    table = report.render_text()
    assert "metric retrieval_metrics.at_k.5.recall_any" in table and "-1" in table


def test_metric_tolerance(tmp_path):
    a, b = [record("q1", mrr=0.5)], [record("q1", mrr=0.5 + 1e-6)]
    assert {d.key for d in compare(tmp_path / "0", a, b).differences} == {
        "retrieval_metrics.mrr", "retrieval_metrics.at_k.5.mrr",
    }
    assert compare(tmp_path / "1", a, b, tolerance=1e-5).reproducible


def test_bools_compare_as_0_and_1_and_none_differs_from_a_number(tmp_path):
    a = [record("q1", abstention={"abstained": False}, groundedness={"score": None})]
    b = [record("q1", abstention={"abstained": True}, groundedness={"score": 4.0})]
    diffs = {d.key: d for d in compare(tmp_path, a, b).differences}
    assert diffs["abstention.abstained"] == Difference("q1", 1, "metric", "abstention.abstained", 0.0, 1.0, 1.0)
    # None vs a number is a difference, whatever the tolerance; it has no delta
    assert diffs["groundedness.score"] == Difference("q1", 1, "metric", "groundedness.score", None, 4.0, None)


def test_a_swapped_ranking_is_a_ranking_difference(tmp_path):
    a = [record("q1", chunks=(("c1", 1.0), ("c2", 1.0), ("c3", 0.5)))]
    b = [record("q1", chunks=(("c2", 1.0), ("c1", 1.0), ("c3", 0.5)))]  # the tie broken the other way
    report = compare(tmp_path, a, b)
    assert report.differences == [
        Difference("q1", 1, "ranking", "retrieved_chunks", ["c1", "c2", "c3"], ["c2", "c1", "c3"]),
    ]
    assert "rank 1: c1, c2, c3" in report.render_text() and "rank 1: c2, c1, c3" in report.render_text()


def test_chunks_without_id_are_named_by_path_and_heading(tmp_path):
    def rec(heading: str) -> dict:
        r = record("q1")
        r["retrieved_chunks"] = [{"chunk_id": None, "rel_path": "a.md", "heading_path": heading, "score_final": 1.0}]
        return r

    assert compare(tmp_path / "same", [rec("# A")], [rec("# A")]).reproducible
    (d,) = compare(tmp_path / "other", [rec("# A")], [rec("# B")]).differences
    assert (d.kind, d.a, d.b) == ("ranking", ["a.md## A"], ["a.md## B"])


@pytest.mark.parametrize(
    ("delta", "tolerance", "differs"),
    [
        pytest.param(1e-12, 0.0, False, id="float-noise-under-1e-10"),
        pytest.param(1e-6, 0.0, True, id="over-tolerance-0"),
        pytest.param(1e-6, 1e-5, False, id="under-tolerance"),
        pytest.param(1e-4, 1e-5, True, id="over-tolerance"),
    ],
)
def test_score_differences_and_tolerance(tmp_path, delta, tolerance, differs):
    a = [record("q1", chunks=(("c1", 1.0), ("c2", 0.5)))]
    b = [record("q1", chunks=(("c1", 1.0), ("c2", 0.5 + delta)))]
    report = compare(tmp_path, a, b, tolerance=tolerance)
    if differs:
        (d,) = report.differences
        assert (d.kind, d.key, d.a, d.b) == ("ranking", "retrieved_chunks.2.score_final", 0.5, 0.5 + delta)
        assert d.delta == pytest.approx(delta)
    else:
        assert report.reproducible


def test_a_missing_case_is_named_on_either_side(tmp_path):
    report = compare(tmp_path, [record("q1"), record("q2")], [record("q1"), record("q3")])
    assert report.differences == [
        Difference("q3", 1, "missing", "record", None, "present"),
        Difference("q2", 1, "missing", "record", "present", None),
    ]
    assert report.n_cases == 3
    assert report.verdict() == "repro: FAIL — 2 of 3 cases differ (tolerance 0): q3, q2"


def test_an_error_kind_change_is_one_error_difference(tmp_path):
    a = [record("q1"), record("q2", error="timeout")]
    b = [record("q1", error="timeout", recall=0.0), record("q2", error="http_error")]
    report = compare(tmp_path, a, b)
    # the error blanks the rest of the record: its metrics are not listed as well
    assert report.differences == [
        Difference("q1", 1, "error", "error.kind", None, "timeout"),
        Difference("q2", 1, "error", "error.kind", "timeout", "http_error"),
    ]


def test_the_same_error_twice_is_reproducible(tmp_path):
    recs = [record("q1", error="timeout", chunks=())]
    assert compare(tmp_path, recs, recs).reproducible


def test_trials_pair_by_case_and_trial(tmp_path):
    a = [record("q1", trial=1), record("q2", trial=1), record("q1", trial=2), record("q2", trial=2, recall=0.0)]
    # another file order, same records: pairs by (case, trial), not by line
    b = [a[3], a[1], a[2], a[0]]
    assert compare(tmp_path / "same", a, b).reproducible
    c = [a[0], a[1], record("q1", trial=2, recall=0.0), a[3]]
    report = compare(tmp_path / "diff", a, c)
    assert {(d.case_id, d.trial) for d in report.differences} == {("q1", 2)}
    assert report.n_cases == 4
    assert "q1 (trial 2)" in report.verdict() and "q1 (trial 2)" in report.render_text()


def test_a_record_without_trial_is_trial_1(tmp_path):
    assert compare(tmp_path, [record("q1")], [record("q1", trial=1)]).reproducible


def test_expectations_block_leaves_are_compared(tmp_path):
    # seed 004's per-record block: every numeric leaf, lists by position
    exp = {"must_include": {"hits": 2, "of": 2, "rate": 1.0}, "ordered": {"ok": True, "positions": [1, 3]}}
    changed = {"must_include": {"hits": 1, "of": 2, "rate": 0.5}, "ordered": {"ok": True, "positions": [1, 4]}}
    report = compare(tmp_path / "d", [record("q1", expectations=exp)], [record("q1", expectations=changed)])
    assert [(d.key, d.a, d.b) for d in report.differences] == [
        ("expectations.must_include.hits", 2.0, 1.0),
        ("expectations.must_include.rate", 1.0, 0.5),
        ("expectations.ordered.positions.1", 3.0, 4.0),
    ]
    # absent in one run and null in the other: nothing measured either way
    assert compare(tmp_path / "n", [record("q1")], [record("q1", expectations=None)]).reproducible


def test_render_text_limits_rows_and_json_lists_all(tmp_path):
    a = [record(f"q{i}") for i in range(1, 8)]
    b = [record(f"q{i}", recall=0.0) for i in range(1, 8)]
    report = compare(tmp_path, a, b)
    text = report.render_text(limit=3)
    assert "… and 11 more differences (--json lists them all)" in text  # 7 cases x 2 keys - 3 shown
    assert text.splitlines()[-1] == "repro: FAIL — 7 of 7 cases differ (tolerance 0): q1, q2, q3, q4, q5 and 2 more"
    payload = json.loads(json.dumps(report.to_json()))
    assert payload["reproducible"] is False and payload["n_differing_cases"] == 7 and len(payload["differences"]) == 14
    assert payload["differences"][0] == {
        "case_id": "q1", "trial": 1, "kind": "metric", "key": "retrieval_metrics.recall_at_k", "a": 1.0, "b": 0.0,
        "delta": -1.0,
    }


@pytest.mark.parametrize("tolerance", [-1.0, float("nan"), float("inf")])
def test_a_bad_tolerance_is_refused(tmp_path, tolerance):
    with pytest.raises(BadConfig, match="--tolerance: expected a number >= 0"):
        compare(tmp_path, [record("q1")], [record("q1")], tolerance=tolerance)


def test_reproducibility_knobs():
    s = RunSettings(k=[5, 10], seed=42, judge_temperature=0.0)
    target = {"kind": "reference", "tie_break": "score_final desc, chunk_id asc", "deterministic": True}
    assert reproducibility_knobs(s, target, {"provider": "openai", "temperature": 0.0}) == {
        "seed": 42, "top_k": 10, "ks": [5, 10], "tie_break": "score_final desc, chunk_id asc", "timestamps": "UTC",
        "judge_temperature": 0.0, "target_deterministic": True,
    }
    # a target that declares nothing: unknown, not "no"; no judge: no temperature
    knobs = reproducibility_knobs(RunSettings(), {"kind": "http"}, {"provider": None})
    assert knobs["tie_break"] is None and knobs["target_deterministic"] is None and knobs["judge_temperature"] is None
