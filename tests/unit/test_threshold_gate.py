"""Absolute thresholds (issue 13 item 4, evalkit.gate.floors.threshold_check): seed 002's
MVP/Beta/GA strategy is a score floor of 70 / 80 / 90 %."""

from __future__ import annotations

import pytest

from evalkit.config import build_settings
from evalkit.errors import BadConfig
from evalkit.gate.floors import DEFAULT_THRESHOLD_METRICS, parse_thresholds, threshold_check


def _metrics(**agg):
    n = {key: 10 for key, value in agg.items() if value is not None}
    return {"aggregate_metrics": {"k": 5, **agg, "n": {**n, **{k: 0 for k, v in agg.items() if v is None}}}}


RUN = _metrics(recall_at_k_avg=0.86, mrr_avg=0.72, ndcg_at_k_avg=0.70, attribution_hit_rate=0.81,
               abstention_accuracy=0.75, latency_budget_score_avg=None, groundedness_avg=4.1,
               hallucination_rate_unanswerable=0.25)


def test_seed_002_mvp_70_percent_passes_and_ga_90_fails():
    mvp = threshold_check(RUN, parse_thresholds("0.7"))
    # by hand: 0.86, 0.72, 0.70 (exactly at the floor passes), 0.81, 0.75 are all >= 0.70
    assert mvp["passed"], mvp["failures"]
    assert [c["metric"] for c in mvp["checked"]] == [
        "recall_at_k_avg", "mrr_avg", "ndcg_at_k_avg", "attribution_hit_rate", "abstention_accuracy",
    ]
    # no budget in this run: listed, not failed
    assert mvp["not_measured"][0]["metric"] == "latency_budget_score_avg"
    ga = threshold_check(RUN, parse_thresholds("90%"))
    assert not ga["passed"]
    # every default metric measured is below 0.90
    assert len(ga["failures"]) == 5
    assert ga["failures"][0] == "recall_at_k_avg 0.86 is below the threshold 0.9 (n = 10)"


def test_beta_80_percent_names_what_failed():
    beta = threshold_check(RUN, parse_thresholds("0.8"))
    failed = sorted(c["metric"] for c in beta["checked"] if not c["passed"])
    # 0.72, 0.70 and 0.75 are below 0.80; 0.86 and 0.81 are not
    assert failed == ["abstention_accuracy", "mrr_avg", "ndcg_at_k_avg"]


def test_named_thresholds_and_the_bare_one_combine():
    t = parse_thresholds(["0.7", "recall_at_k_avg=0.9", "mrr_avg=0.7"])
    assert t == {"*": 0.7, "recall_at_k_avg": 0.9, "mrr_avg": 0.7}
    out = threshold_check(RUN, t)
    # recall is checked once, at its own 0.9
    recall = [c for c in out["checked"] if c["metric"] == "recall_at_k_avg"]
    assert len(recall) == 1 and recall[0]["threshold"] == 0.9 and not recall[0]["passed"]
    assert out["failures"] == ["recall_at_k_avg 0.86 is below the threshold 0.9 (n = 10)"]


def test_a_named_metric_not_measured_fails_loudly():
    out = threshold_check(RUN, {"latency_budget_score_avg": 0.8})
    assert not out["passed"]
    assert out["checked"] == []
    assert "latency_budget_score_avg: not measured by this run" in out["failures"][0]
    assert "--latency-budget-ms" in out["failures"][0]


def test_a_bare_threshold_that_finds_nothing_measured_fails():
    empty = _metrics(recall_at_k_avg=None, mrr_avg=None)
    out = threshold_check(empty, {"*": 0.7})
    assert not out["passed"]
    assert out["failures"][0].startswith("threshold 0.7: none of recall_at_k_avg")


def test_judge_scores_on_their_own_scale_and_lower_is_better_as_a_ceiling():
    out = threshold_check(RUN, parse_thresholds(["groundedness_avg=4", "hallucination_rate_unanswerable=0.2"]))
    by = {c["metric"]: c for c in out["checked"]}
    assert by["groundedness_avg"]["passed"]  # 4.1 >= 4 on 0-5
    assert by["hallucination_rate_unanswerable"]["direction"] == "max"
    assert not by["hallucination_rate_unanswerable"]["passed"]  # 0.25 > 0.2
    assert out["failures"] == ["hallucination_rate_unanswerable 0.25 is above the threshold 0.2 (n = 10)"]
    with pytest.raises(ValueError, match=r"scale \[0, 5\]"):
        parse_thresholds("groundedness_avg=6")


def test_per_k_keys_read_at_k():
    m = {"aggregate_metrics": {"k": 5, "n": {}, "at_k": {"10": {"ndcg": 0.65, "n": 8, "n_by_metric": {"ndcg": 8}}}}}
    out = threshold_check(m, parse_thresholds("ndcg@10=0.7", [5, 10]))
    assert out["checked"] == [
        {"metric": "ndcg@10", "value": 0.65, "n": 8, "threshold": 0.7, "direction": "min", "passed": False}
    ]


def test_operational_rates_read_their_block():
    m = {"aggregate_metrics": {"k": 5, "n": {}, "operational_metrics": {"error_rate": 0.1, "n": 20}}}
    out = threshold_check(m, {"error_rate": 0.05})
    assert out["failures"] == ["error_rate 0.1 is above the threshold 0.05 (n = 20)"]


def test_unknown_name_suggests_the_right_one():
    with pytest.raises(ValueError, match=r"unknown metric 'recall_at_k'.*did you mean 'recall_at_k_avg'"):
        parse_thresholds("recall_at_k=0.8")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param("70", r"did you mean 0.7 or 70%", id="percent-without-sign"),
        pytest.param("x", "not a number", id="not-a-number"),
        pytest.param("ndcg@10=0.5", r"measures K = 5 only; add --k 10", id="k-not-run"),
    ],
)
def test_bad_values(given, message):
    with pytest.raises(ValueError, match=message):
        parse_thresholds(given, [5])


def test_settings_name_the_flag_and_exclude_thresholds_from_the_hash():
    with pytest.raises(BadConfig) as e:
        build_settings({"thresholds": ["mrr=0.7"]})
    rendered = e.value.render()
    assert "--threshold" in rendered and "did you mean 'mrr_avg'" in rendered
    s = build_settings({"thresholds": 0.7})
    assert s.thresholds == {"*": 0.7}
    assert build_settings({"thresholds": {"recall_at_k_avg": 0.8}}).thresholds == {"recall_at_k_avg": 0.8}
    # thresholds judge the numbers, never change them: same config_hash input
    assert s.hashed() == build_settings({}).hashed()


def test_the_default_set_is_on_zero_one():
    assert "precision_at_k_avg" not in DEFAULT_THRESHOLD_METRICS  # bounded by |gold| / K
    assert "groundedness_avg" not in DEFAULT_THRESHOLD_METRICS  # 0-5
