"""Latency budgets (issue 13 item 2): seed 002's latencyBudget formula, per case and aggregated.

Seed 002 (GNO, evals/scorers/ir-metrics.ts):
    withinBudget = durationMs <= maxMs
    score = withinBudget ? 1 : Math.max(0, 1 - (durationMs - maxMs) / maxMs)
"""

from __future__ import annotations

import pytest

from evalkit.config import build_settings
from evalkit.errors import TargetError
from evalkit.evalset.load import EvalSet
from evalkit.metrics.aggregate import MEAN_METRICS, SLICE_METRICS, aggregate_records, extract_case, flatten_cell
from evalkit.metrics.latency import case_latency_budget, latency_budget_score
from evalkit.run.records import build_record, error_record
from evalkit.schema import AskResponse, EvalCase
from evalkit.targets.base import AskResult
from tests.support import eval_case


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        pytest.param(1500, 1.0, id="within"),
        pytest.param(2000, 1.0, id="exactly-at-budget-is-within"),
        # 1 - (2500 - 2000) / 2000 = 1 - 0.25
        pytest.param(2500, 0.75, id="quarter-over"),
        # 1 - (3000 - 2000) / 2000 = 1 - 0.5
        pytest.param(3000, 0.5, id="half-over"),
        # 1 - (4000 - 2000) / 2000 = 0
        pytest.param(4000, 0.0, id="twice-the-budget"),
        # 1 - (5000 - 2000) / 2000 = -0.5 -> clamped to 0
        pytest.param(5000, 0.0, id="clamped"),
        pytest.param(0, 1.0, id="instant"),
    ],
)
def test_seed_002_formula_by_hand(t, expected):
    assert latency_budget_score(t, 2000) == pytest.approx(expected)


@pytest.mark.parametrize("budget", [0, -1, float("nan"), float("inf"), None])
def test_a_budget_must_be_positive(budget):
    with pytest.raises(ValueError):
        latency_budget_score(100, budget)


def test_case_budget_overrides_the_run_budget():
    case = {"id": "a", "constraints": {"latency_budget_ms": 1000}}
    got = case_latency_budget(case, 1500.0, 2000.0)
    # the case's 1000 ms wins: 1 - (1500 - 1000) / 1000 = 0.5
    assert got == {"budget_ms": 1000.0, "source": "case", "latency_ms": 1500.0, "score": 0.5, "within": False}
    # without its own budget the run's applies: 1500 <= 2000
    got = case_latency_budget({"id": "b"}, 1500.0, 2000.0)
    assert got == {"budget_ms": 2000.0, "source": "run", "latency_ms": 1500.0, "score": 1.0, "within": True}
    # a case budget applies even when the run sets none
    assert case_latency_budget(case, 900.0, None)["score"] == 1.0


def test_no_budget_or_a_failed_case_gives_none():
    assert case_latency_budget({"id": "a"}, 1500.0, None) is None
    assert case_latency_budget({"id": "a", "constraints": None}, 1500.0, None) is None
    assert case_latency_budget({"id": "a"}, 1500.0, 2000.0, failed=True) is None
    assert case_latency_budget({"id": "a"}, None, 2000.0) is None


def test_the_case_field_is_validated():
    case = EvalCase.model_validate(
        {"id": "a", "question": "q", "answerable": True, "constraints": {"latency_budget_ms": 800, "token_budget": 9}}
    )
    assert case.constraints is not None and case.constraints.latency_budget_ms == 800
    assert case.model_dump(mode="json")["constraints"]["token_budget"] == 9  # an open object
    with pytest.raises(ValueError):
        EvalCase.model_validate({"id": "a", "question": "q", "answerable": True, "constraints": {"latency_budget_ms": 0}})


# --------------------------------------------------------------------------- records


def _eval_set(cases):
    return EvalSet(cases=cases, version="v1", files=[], commit_hash=None)


A = {"question": "q?", "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]}


def _build(case, settings, total_ms):
    response = AskResponse.model_validate({"answer": "yes [1]", "references": [], "debug": {"retrieved_chunks": []}})
    result = AskResult(response=response, missing_fields=[], server_timings_ms={})
    record, _ = build_record(
        0, case, result, settings=settings, total_ms=total_ms, run_versions={}, judge_desc=None, coverage=None,
        eval_set=_eval_set([case]),
    )
    return record


def test_build_record_scores_the_case_total_latency():
    s = build_settings({"latency_budget_ms": 2000, "retrieval_only": True})
    rec = _build(eval_case("c1", **A), s, 3000.0)
    assert rec["latency"]["total_ms"] == 3000.0
    assert rec["latency_budget"] == {"budget_ms": 2000.0, "source": "run", "latency_ms": 3000.0, "score": 0.5, "within": False}
    # the case's own budget overrides: 1 - (3000 - 1500) / 1500 = 0
    assert _build(eval_case("c1", **A, constraints={"latency_budget_ms": 1500}), s, 3000.0)["latency_budget"]["score"] == 0.0
    # no budget anywhere: None
    assert _build(eval_case("c1", **A), build_settings({"retrieval_only": True}), 3000.0)["latency_budget"] is None


def test_an_errored_case_is_excluded_and_counted_never_zero():
    s = build_settings({"latency_budget_ms": 2000})
    case = eval_case("c1", **A)
    err = error_record(0, case, TargetError("timeout", "took too long"), settings=s, total_ms=60000.0, config={}, coverage=None)
    assert err["latency_budget"] is None
    ok = _build(eval_case("c2", **A), s, 1000.0)
    body = aggregate_records([ok, err], ks=[5])
    agg = body["aggregate_metrics"]
    # the mean is over the one case that answered, not (1 + 0) / 2
    assert agg["latency_budget_score_avg"] == 1.0
    assert agg["within_budget_rate"] == 1.0
    assert agg["n"]["latency_budget_score_avg"] == 1
    assert agg["n"]["within_budget_rate"] == 1
    assert agg["operational_metrics"]["n_errors"] == 1  # the excluded case is counted here


# --------------------------------------------------------------------------- aggregate


def _rec(cid, budget_block, category="factual"):
    return {"test_case_id": cid, "case": {"id": cid, "answerable": True, "category": category},
            "latency": {"total_ms": 1.0}, "latency_budget": budget_block}


def test_aggregate_means_by_hand():
    recs = [
        _rec("a", {"budget_ms": 2000, "score": 1.0, "within": True}),
        _rec("b", {"budget_ms": 2000, "score": 0.5, "within": False}),
        _rec("c", {"budget_ms": 2000, "score": 0.0, "within": False}, category="reasoning"),
        _rec("d", None),  # no budget: not in n
    ]
    assert "latency_budget_score_avg" in MEAN_METRICS and "within_budget_rate" in MEAN_METRICS
    assert "within_budget_rate" in SLICE_METRICS
    body = aggregate_records(recs, ks=[5])
    agg = body["aggregate_metrics"]
    assert agg["latency_budget_score_avg"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert agg["within_budget_rate"] == pytest.approx(1 / 3)
    assert agg["n"]["latency_budget_score_avg"] == 3
    flat = flatten_cell(agg)
    assert flat["within_budget_rate"] == (pytest.approx(1 / 3), 3)
    # slices: factual (a, b, d) -> 1 of 2 within; reasoning (c) -> 0 of 1
    assert body["by_category"]["factual"]["within_budget_rate"] == 0.5
    assert body["by_category"]["factual"]["n"]["within_budget_rate"] == 2
    assert body["by_category"]["reasoning"]["within_budget_rate"] == 0.0


def test_no_budget_means_null_never_zero():
    agg = aggregate_records([_rec("a", None)], ks=[5])["aggregate_metrics"]
    assert agg["latency_budget_score_avg"] is None
    assert agg["within_budget_rate"] is None
    assert agg["n"]["latency_budget_score_avg"] == 0
    # and a slice leaves the metric out altogether
    body = aggregate_records([_rec("a", None)], ks=[5])
    assert "within_budget_rate" not in body["by_category"]["factual"]


def test_extract_case_reads_the_record_block():
    x = extract_case(_rec("a", {"score": 0.25, "within": False}), [5])
    assert x["values"]["latency_budget_score_avg"] == 0.25
    assert x["values"]["within_budget_rate"] == 0.0


def test_run_budget_is_hashed_only_when_set():
    plain = build_settings({}).hashed()
    assert "latency_budget_ms" not in plain  # runs without a budget keep their config_hash
    assert build_settings({"latency_budget_ms": 2000}).hashed()["latency_budget_ms"] == 2000
