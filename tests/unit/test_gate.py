"""The regression gate (evalkit/gate/regressions.py): thresholds are absolute, nulls are skipped."""

from __future__ import annotations

import pytest

from evalkit.gate.regressions import check_regressions, gate_result, skipped_metrics
from evalkit.gate.thresholds import Thresholds, gated_metrics


def _metrics(**agg):
    return {"aggregate_metrics": {"k": 5, **agg}}


BASE = _metrics(recall_at_k_avg=0.85, mrr_avg=0.70, scope_miss_rate=0.05, groundedness_avg=4.2)
FULL = _metrics(
    recall_at_k_avg=0.85, mrr_avg=0.70, scope_miss_rate=0.05, attribution_hit_rate=0.80, groundedness_avg=4.2,
    correctness_avg=3.5, abstention_accuracy=0.75, hallucination_rate_unanswerable=0.25, false_abstention_rate=0.10,
)


def test_no_change_passes():
    assert check_regressions(BASE, BASE, Thresholds()) == []


@pytest.mark.parametrize(
    ("metric", "new_value", "regressed"),
    [
        # by hand: 0.85 - 0.80 = 0.05, exactly the threshold -> allowed (strictly greater fails)
        pytest.param("recall_at_k_avg", 0.85 - 0.05, False, id="recall-at-threshold"),
        pytest.param("recall_at_k_avg", 0.85 - 0.06, True, id="recall-beyond"),
        # by hand: MRR threshold 0.10
        pytest.param("mrr_avg", 0.70 - 0.10, False, id="mrr-at-threshold"),
        pytest.param("mrr_avg", 0.70 - 0.11, True, id="mrr-beyond"),
        # scope miss is lower-is-better: a rise beyond 0.10 regresses, a fall never does
        pytest.param("scope_miss_rate", 0.05 + 0.10, False, id="scope-at-threshold"),
        pytest.param("scope_miss_rate", 0.05 + 0.11, True, id="scope-beyond"),
        pytest.param("scope_miss_rate", 0.0, False, id="scope-improves"),
        # groundedness in 0-5 points, threshold 0.5
        pytest.param("groundedness_avg", 4.2 - 0.5, False, id="grounded-at-threshold"),
        pytest.param("groundedness_avg", 4.2 - 0.6, True, id="grounded-beyond"),
        pytest.param("groundedness_avg", 5.0, False, id="grounded-improves"),
    ],
)
def test_threshold_per_metric(metric, new_value, regressed):
    new = _metrics(**{**BASE["aggregate_metrics"], metric: new_value})
    regs = check_regressions(BASE, new, Thresholds())
    assert [r.metric for r in regs] == ([metric] if regressed else [])


def test_regression_fields_and_message():
    new = _metrics(**{**BASE["aggregate_metrics"], "recall_at_k_avg": 0.70})
    (reg,) = check_regressions(BASE, new, Thresholds(recall=0.05))
    assert reg.baseline == 0.85 and reg.new == 0.70
    assert reg.delta == pytest.approx(0.70 - 0.85)  # by hand
    assert reg.threshold == 0.05
    assert reg.direction == "higher_is_better"
    assert "recall_at_k_avg dropped by 0.15" in reg.message


def test_custom_thresholds():
    new = _metrics(**{**BASE["aggregate_metrics"], "recall_at_k_avg": 0.80})
    assert check_regressions(BASE, new, Thresholds(recall=0.01))
    assert not check_regressions(BASE, new, Thresholds(recall=0.2))


def test_null_metrics_are_skipped_not_zero():
    # Retrieval-only run: groundedness null; folder_mode off: scope miss null.
    new = _metrics(recall_at_k_avg=0.85, mrr_avg=0.70, scope_miss_rate=None, groundedness_avg=None)
    assert check_regressions(BASE, new) == []
    assert [s["metric"] for s in skipped_metrics(BASE, new)] == [
        "scope_miss_rate", "attribution_hit_rate", "groundedness_avg", "correctness_avg", "abstention_accuracy",
        "hallucination_rate_unanswerable", "false_abstention_rate",
    ]


def test_accepts_aggregate_dicts_directly():
    assert check_regressions(BASE["aggregate_metrics"], {**BASE["aggregate_metrics"], "mrr_avg": 0.1})


def test_different_primary_k_compares_at_the_new_runs_k():
    # Baseline's primary K is 10 but it also measured K=5; the new run's primary K is 5.
    base = {
        "aggregate_metrics": {
            "k": 10,
            "recall_at_k_avg": 0.95,
            "mrr_avg": 0.75,
            "at_k": {"5": {"recall_any": 0.85, "mrr": 0.70}, "10": {"recall_any": 0.95, "mrr": 0.75}},
        }
    }
    new = {
        "aggregate_metrics": {
            "k": 5,
            "recall_at_k_avg": 0.85,
            "mrr_avg": 0.70,
            "at_k": {"5": {"recall_any": 0.85, "mrr": 0.70}},
        }
    }
    # At K=5 both are equal; comparing 0.95 (K=10) with 0.85 would have flagged a 0.10 drop.
    assert check_regressions(base, new) == []


def test_gate_result_shape():
    new = _metrics(**{**BASE["aggregate_metrics"], "recall_at_k_avg": 0.5})
    g = gate_result(BASE, new, Thresholds(), baseline_run_id="b1", allow_regressions=True)
    assert g["passed"] is False and g["allowed"] is True and g["baseline_run_id"] == "b1"
    assert g["thresholds"] == {
        "recall": 0.05, "mrr": 0.10, "scope_miss": 0.10, "groundedness": 0.5, "correctness": 0.5,
        "attribution": 0.05, "abstention": 0.05, "hallucination": 0.05, "false_abstention": 0.05,
    }
    assert [r["metric"] for r in g["regressions"]] == ["recall_at_k_avg"]
    assert set(g["regressions"][0]) >= {"metric", "baseline", "new", "delta", "threshold", "message"}
    assert g["compared"] == ["recall_at_k_avg", "mrr_avg", "scope_miss_rate", "groundedness_avg"]
    assert g["failures"] == [g["regressions"][0]["message"]] and g["nothing_compared"] is False
    assert gated_metrics() == [
        "recall_at_k_avg", "mrr_avg", "scope_miss_rate", "attribution_hit_rate", "groundedness_avg",
        "correctness_avg", "abstention_accuracy", "hallucination_rate_unanswerable", "false_abstention_rate",
    ]


def test_bools_and_missing_keys_are_not_numbers():
    assert check_regressions(_metrics(recall_at_k_avg=True), _metrics(recall_at_k_avg=0.0)) == []
    assert check_regressions(_metrics(), _metrics(recall_at_k_avg=0.0)) == []


def test_baseline_without_the_new_k_is_skipped_not_compared():
    # regression: review finding 2 — Recall@20 of the baseline was set against Recall@5
    base = {"aggregate_metrics": {"k": 20, "recall_at_k_avg": 0.98, "mrr_avg": 0.7, "at_k": {"20": {"recall_any": 0.98, "mrr": 0.7}}}}
    new = {"aggregate_metrics": {"k": 5, "recall_at_k_avg": 0.90, "mrr_avg": 0.7, "at_k": {"5": {"recall_any": 0.90, "mrr": 0.7}}}}
    assert check_regressions(base, new) == []
    reasons = {s["metric"]: s["reason"] for s in skipped_metrics(base, new)}
    assert reasons["recall_at_k_avg"] == (
        "no K measured by both runs (baseline K=20, new run K=5); re-score one with score_retrieval --k"
    )
    g = gate_result(base, new)  # nothing else is measured: nothing compared, which is no pass
    assert g["passed"] is False and g["nothing_compared"] is True
    # ...but a baseline that measured K=5 among several K is compared at 5
    base["aggregate_metrics"]["at_k"]["5"] = {"recall_any": 0.99, "mrr": 0.7}
    assert [r.metric for r in check_regressions(base, new)] == ["recall_at_k_avg"]


def test_the_gate_compares_at_the_baselines_k_when_the_new_run_measured_it():
    # The baseline's primary K first: a new run at --k 10 --k 5 is compared with a K=5 baseline at 5.
    base = {"aggregate_metrics": {"k": 5, "recall_at_k_avg": 0.9, "mrr_avg": 0.7, "groundedness_avg": 4.0,
                                  "at_k": {"5": {"recall_any": 0.9, "mrr": 0.7}}}}
    new = {"aggregate_metrics": {"k": 10, "recall_at_k_avg": 0.95, "mrr_avg": 0.72, "groundedness_avg": 4.0,
                                 "at_k": {"10": {"recall_any": 0.95, "mrr": 0.72}, "5": {"recall_any": 0.80, "mrr": 0.7}}}}
    g = gate_result(base, new)
    # by hand: Recall@5 0.9 -> 0.80 is a drop of 0.10 > 0.05; at the new run's own K=10 it would have "risen"
    assert g["k"] == "5"
    assert [r["metric"] for r in g["regressions"]] == ["recall_at_k_avg"]
    assert g["regressions"][0]["baseline"] == 0.9 and g["regressions"][0]["new"] == 0.80


def test_a_missing_headline_metric_fails_the_gate_unless_allowed():
    # The runs share no K: groundedness is compared, recall and MRR are not.
    base = {"aggregate_metrics": {"k": 5, "recall_at_k_avg": 0.9, "mrr_avg": 0.7, "groundedness_avg": 4.0,
                                  "at_k": {"5": {"recall_any": 0.9, "mrr": 0.7}}}}
    new = {"aggregate_metrics": {"k": 10, "recall_at_k_avg": 0.95, "mrr_avg": 0.72, "groundedness_avg": 4.0,
                                 "at_k": {"10": {"recall_any": 0.95, "mrr": 0.72}}}}
    g = gate_result(base, new, asked_k=(10, 10))
    assert g["compared"] == ["groundedness_avg"] and g["passed"] is False
    assert [f.split(":")[0] for f in g["failures"]] == ["recall_at_k_avg not compared", "mrr_avg not compared"]
    assert gate_result(base, new, asked_k=(10, 10), allow_missing_metrics=True)["passed"] is True
    # asked for different K: the answer metrics are not compared either, and say why
    g = gate_result(base, new, asked_k=(5, 10), allow_missing_metrics=True)
    reasons = {s["metric"]: s["reason"] for s in g["skipped"]}
    assert reasons["groundedness_avg"] == "K differs: the target was asked for 5 vs 10 chunks"
    assert g["nothing_compared"] is True and g["passed"] is False


def test_heuristic_and_llm_groundedness_are_not_compared_unless_allowed():
    base = _metrics(groundedness_avg=4.5, judge={"heuristic": True})
    new = _metrics(groundedness_avg=3.0, judge={"heuristic": False})
    assert check_regressions(base, new) == []
    reasons = {s["metric"]: s["reason"] for s in skipped_metrics(base, new)}
    assert reasons["groundedness_avg"].startswith("one run was judged by the offline heuristic")
    assert [r.metric for r in check_regressions(base, new, allow_mixed_judges=True)] == ["groundedness_avg"]


def test_invariants_name_a_different_eval_set_or_case_count():
    base = {**BASE, "dataset_version": "a" * 64, "total_tests": 59}
    same = gate_result(base, {**BASE, "dataset_version": "a" * 64, "total_tests": 59})
    assert same["invariants"] == {"ok": True, "violations": [], "ignored": False, "warnings": []}
    other = gate_result(base, {**BASE, "dataset_version": "b" * 64, "total_tests": 9})
    assert other["invariants"]["ok"] is False
    assert other["invariants"]["violations"] == [
        f"eval sets differ (dataset_version {'a' * 12}… vs {'b' * 12}…)",
        "case counts differ (59 vs 9): a filtered or partial run",
    ]


@pytest.mark.parametrize(
    ("metric", "new_value", "regressed"),
    [
        # by hand, thresholds 0.05 on rates (absolute) and 0.5 on the 0-5 correctness scale
        pytest.param("attribution_hit_rate", 0.80 - 0.05, False, id="attribution-at-threshold"),
        pytest.param("attribution_hit_rate", 0.80 - 0.06, True, id="attribution-beyond"),
        pytest.param("correctness_avg", 3.5 - 0.5, False, id="correctness-at-threshold"),
        pytest.param("correctness_avg", 3.5 - 0.6, True, id="correctness-beyond"),
        pytest.param("abstention_accuracy", 0.75 - 0.06, True, id="abstention-beyond"),
        pytest.param("abstention_accuracy", 1.0, False, id="abstention-improves"),
        # lower is better: a rise beyond 0.05 regresses
        pytest.param("hallucination_rate_unanswerable", 0.25 + 0.05, False, id="hallucination-at-threshold"),
        pytest.param("hallucination_rate_unanswerable", 0.25 + 0.06, True, id="hallucination-beyond"),
        pytest.param("false_abstention_rate", 0.10 + 0.06, True, id="false-abstention-beyond"),
        pytest.param("false_abstention_rate", 0.0, False, id="false-abstention-improves"),
    ],
)
def test_abstention_correctness_and_attribution_are_gated(metric, new_value, regressed):
    new = _metrics(**{**FULL["aggregate_metrics"], metric: new_value})
    assert [r.metric for r in check_regressions(FULL, new)] == ([metric] if regressed else [])


def test_the_abstention_threshold_example_from_the_issue_fails_the_gate():
    # Raising the reference chatbot's abstention threshold took false abstention from 0.157
    # to 0.843 and correctness from 1.76 to 0.42: both far beyond 0.05 / 0.5.
    base = _metrics(false_abstention_rate=0.157, correctness_avg=1.76, judge={"heuristic": True})
    new = _metrics(false_abstention_rate=0.843, correctness_avg=0.42, judge={"heuristic": True})
    g = gate_result(base, new)
    assert g["passed"] is False
    assert [r["metric"] for r in g["regressions"]] == ["correctness_avg", "false_abstention_rate"]


def test_a_gate_that_compared_nothing_has_not_passed():
    # Every gated metric is missing on one side: nothing was compared.
    base = _metrics(recall_at_k_avg=0.9, mrr_avg=0.8)
    new = _metrics(groundedness_avg=4.0)
    g = gate_result(base, new, baseline_run_id="b")
    assert g["passed"] is False and g["nothing_compared"] is True and g["compared"] == []
    assert g["regressions"] == []
    assert g["failures"][0].startswith("nothing comparable — recall_at_k_avg: not computed in the new run")
    assert len(g["skipped"]) == len(gated_metrics())


JUDGE = {"provider": "openai", "model": "gpt-4o-2024-08-06", "prompt_version": "v1", "temperature": 0.0}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"model": "gpt-4o-mini-2024-07-18"}, "judge model differs (openai:gpt-4o-2024-08-06 vs openai:gpt-4o-mini-2024-07-18)"),
        ({"prompt_version": "v2"}, "judge prompt version differs (v1 vs v2)"),
        ({"temperature": 0.7}, "judge temperature differs (0.0 vs 0.7)"),
    ],
)
def test_each_judge_invariant_is_named(change, says):
    base = {**FULL, "invariants": {"judge": JUDGE, "debug_fields_missing": []}}
    new = {**FULL, "invariants": {"judge": {**JUDGE, **change}, "debug_fields_missing": []}}
    g = gate_result(base, new)
    assert g["invariants"]["violations"] == [says]
    # a broken invariant fails the gate unless ignored
    assert g["passed"] is False and g["failures"] == [f"invariant broken: {says}"]
    ignored = gate_result(base, new, ignore_invariants=True)
    assert ignored["passed"] is True and ignored["invariants"]["ignored"] is True


def test_a_debug_field_one_target_leaves_out_skips_what_reads_it_and_a_retrieval_only_side_is_not_held():
    # regression: issue 36 item 7, a missing debug field refused the pair; now only the
    # metrics that read it are skipped. Chunk text is read for required snippets ("snippets").
    forms = {"gold_forms": ["anchor", "snippets"]}
    base = {**FULL, "invariants": {"judge": JUDGE, "debug_fields_missing": [], **forms}}
    new = {**FULL, "invariants": {"judge": None, "debug_fields_missing": ["debug.retrieved_chunks[].text"], **forms}}
    g = gate_result(base, new)
    reason = ("the new run's target leaves out debug.retrieved_chunks[].text (the baseline's sends it): "
              "required gold snippets are searched in it")
    assert g["invariants"]["violations"] == []
    assert {"metric": "recall_at_k_avg", "reason": reason} in g["skipped"]
    assert {"metric": "mrr_avg", "reason": reason} in g["skipped"]
    # the two headline retrieval metrics are not compared: the gate says so (exit 1), never exit 2
    assert g["passed"] is False and g["failures"] == [
        f"recall_at_k_avg not compared: {reason} (--allow-missing-metrics gates without it)",
        f"mrr_avg not compared: {reason} (--allow-missing-metrics gates without it)",
    ]
    # what does not read chunk text is compared: scope miss, attribution, the judges, abstention
    assert "attribution_hit_rate" in g["compared"] and "groundedness_avg" in g["compared"]
    # an older metrics.json without the block is not held against the other run
    assert gate_result(FULL, new)["skipped"] == []


def test_a_mixed_judge_run_is_not_compared_on_judge_scores():
    # A partial re-judge left some verdicts from another judge: its means mix two scales.
    base = _metrics(groundedness_avg=4.5, correctness_avg=4.0, judge={"heuristic": False, "mixed": True})
    new = _metrics(groundedness_avg=3.0, correctness_avg=2.0, judge={"heuristic": False, "mixed": False})
    assert check_regressions(base, new) == []
    reasons = {s["metric"]: s["reason"] for s in skipped_metrics(base, new)}
    assert reasons["correctness_avg"] == "the baseline's answers were judged by several judges (a partial re-judge)"
