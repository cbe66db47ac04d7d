"""Issue 30 item 3: any metric the registry lists can be gated (seed 001's recall is
recall_frac, which none of the nine built-in thresholds watches), per slice too
(`--gate-by domain`), and seed 001's gate is one preset (evalkit/gate/thresholds.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evalkit.gate.regressions import check_regressions, gate_result
from evalkit.gate.thresholds import (
    GATE_BY,
    Thresholds,
    gate_metric,
    gate_preset,
    parse_gate_by,
    parse_regression_thresholds,
)


def _cell(recall_frac: float, n: int, **more: object) -> dict:
    """A metrics.json slice cell (slice_cell's layout: headline metrics at the primary K, each with its n)."""
    return {"n_cases": n, "recall_at_k_avg": 1.0, "mrr_avg": 1.0, "recall_frac_avg": recall_frac,
            "n": {"recall_at_k_avg": n, "mrr_avg": n, "recall_frac_avg": n}, **more}


def _run(frac: float, install_frac: float, *, k: int = 5, error_rate: float = 0.0, frac_at_10: float | None = None,
         food: bool = True) -> dict:
    """metrics.json of seed 001's reproduction: two install cases and one food case, all found (Recall@K 1.0)."""
    at_k = {str(k): {"recall_any": 1.0, "mrr": 1.0, "recall_frac": frac, "precision": 0.3}}
    if frac_at_10 is not None:
        at_k["10"] = {"recall_any": 1.0, "mrr": 1.0, "recall_frac": frac_at_10, "precision": 0.2}
    by_domain = {"install": _cell(install_frac, 2)}
    if food:
        by_domain["food"] = _cell(1.0, 1)
    return {
        "aggregate_metrics": {"k": k, "recall_at_k_avg": 1.0, "mrr_avg": 1.0, "recall_frac_avg": frac,
                              "precision_at_k_avg": 0.3, "at_k": at_k,
                              "operational_metrics": {"error_rate": error_rate, "n": 4}},
        "by_domain": by_domain,
    }


# by hand: install cases 1 and 2 expect chunks {5, 6}; the baseline retrieved [5, 6] (recall_frac 2/2 = 1),
# the new run [5] (1/2). The food case expects {7} and gets [7] (1) in both.
# recall_frac overall: (1 + 1 + 1) / 3 = 1.0 -> (0.5 + 0.5 + 1) / 3 = 2/3; install: (1 + 1) / 2 = 1.0 -> 0.5.
# Recall@K (any) and MRR: every case finds a gold chunk at rank 1, so 1.0 -> 1.0.
BASE = _run(1.0, 1.0)
NEW = _run(2 / 3, 0.5)


def test_the_nine_miss_seed_001s_recall_drop():
    # the issue: "Every evalkit gate checks recall_at_k_avg, the hit rate"
    assert check_regressions(BASE, NEW) == []
    assert gate_result(BASE, NEW)["passed"] is True


def test_recall_frac_fails_the_gate_overall_and_in_the_install_domain():
    t = replace(Thresholds().with_named(parse_regression_thresholds(["recall_frac=0.05"])), by=("domain",))
    g = gate_result(BASE, NEW, t)
    assert g["passed"] is False
    overall, install = g["regressions"]
    # by hand: 1.0 - 2/3 = 1/3 > 0.05
    assert (overall["metric"], overall["scope"], overall["delta"]) == ("recall_frac_avg", "overall", pytest.approx(-1 / 3))
    assert overall["message"] == "recall_frac_avg dropped by 0.3333 (1 -> 0.6667; allowed 0.05)"
    # by hand: 1.0 - 0.5 = 0.5 > 0.05, over the slice's n = 2 cases
    assert (install["scope"], install["baseline"], install["new"], install["n"]) == ("domain:install", 1.0, 0.5, 2)
    assert install["message"] == "recall_frac_avg in domain:install dropped by 0.5 (1 -> 0.5; allowed 0.05; n = 2)"
    assert g["failures"] == [overall["message"], install["message"]]
    # it is reported like the nine: in the thresholds, compared, and the slices it was checked in
    assert g["thresholds"]["recall_frac_avg"] == 0.05 and g["thresholds"]["recall"] == 0.05
    assert "recall_frac_avg" in g["compared"]
    assert g["slices"] == {"by": ["domain"], "min_n": 2,
                           "compared": {"domain:install": ["recall_at_k_avg", "mrr_avg", "recall_frac_avg"]}}
    # the food slice has one case: below the minimum n, skipped and said so, per metric
    food = [s for s in g["skipped"] if s.get("scope") == "domain:food"]
    assert {s["metric"] for s in food} == {"recall_at_k_avg", "mrr_avg", "recall_frac_avg"}
    assert {s["reason"] for s in food} == {"n = 1 is below --gate-min-n 2"}


def test_a_smaller_minimum_gates_the_one_case_slice_and_a_larger_one_skips_install():
    named = Thresholds().with_named({"recall_frac": 0.05})
    one = gate_result(BASE, NEW, replace(named, by=("domain",), min_slice_n=1))
    assert "domain:food" in one["slices"]["compared"]
    three = gate_result(BASE, NEW, replace(named, by=("domain",), min_slice_n=3))
    assert [r["scope"] for r in three["regressions"]] == ["overall"]
    assert {"metric": "recall_frac_avg", "scope": "domain:install", "reason": "n = 2 is below --gate-min-n 3"} in three["skipped"]


def test_a_slice_in_one_run_only_is_listed_not_gated():
    t = replace(Thresholds().with_named({"recall_frac": 0.05}), by=("domain",))
    g = gate_result(BASE, _run(2 / 3, 0.5, food=False), t)
    assert {"metric": "*", "scope": "domain:food", "reason": "the slice is in the baseline only"} in g["skipped"]
    no_slices = gate_result({"aggregate_metrics": BASE["aggregate_metrics"]}, NEW, t)
    assert {"metric": "*", "scope": "domain:*", "reason": "the baseline has no domain slices"} in no_slices["skipped"]


def test_a_metric_the_slices_do_not_hold_is_listed_once():
    # precision is not in metrics.json's slices (registry: not sliced); overall it is gated
    t = replace(Thresholds().with_named({"precision_at_k_avg": 0.05}), by=("domain",))
    g = gate_result(BASE, NEW, t)
    assert "precision_at_k_avg" in g["compared"]
    assert {"metric": "precision_at_k_avg", "scope": "domain:*", "reason": "no domain slice of both runs holds it"} in g["skipped"]


def test_slices_at_another_primary_k_are_not_set_against_each_other():
    # metrics.json's slices hold each run's primary K: a K=10 run's slice is not Recall_frac@5
    base10 = _run(1.0, 1.0, k=10)
    base10["aggregate_metrics"]["at_k"]["5"] = {"recall_any": 1.0, "mrr": 1.0, "recall_frac": 1.0}
    g = gate_result(base10, NEW, replace(Thresholds().with_named({"recall_frac": 0.05}), by=("domain",)))
    assert g["k"] == "5" and [r["scope"] for r in g["regressions"]] == ["overall"]
    reasons = {s["reason"] for s in g["skipped"] if s["metric"] == "recall_frac_avg"}
    assert reasons == {"the domain slices hold each run's primary K (10, 5), not K=5"}


def test_an_explicit_k_is_compared_at_that_k_and_fails_when_not_measured():
    # by hand: recall_frac@10 0.9 -> 0.8 is a drop of 0.1 > 0.05; recall_frac@5 unchanged
    t = Thresholds().with_named(parse_regression_thresholds(["R@10=5%"]))  # ir_measures' name for recall_frac
    assert dict(t.metrics) == {"recall_frac@10": 0.05}
    g = gate_result(_run(1.0, 1.0, frac_at_10=0.9), _run(1.0, 1.0, frac_at_10=0.8), t)
    assert [(r["metric"], r["scope"]) for r in g["regressions"]] == [("recall_frac@10", "overall")]
    missing = gate_result(_run(1.0, 1.0, frac_at_10=0.9), _run(1.0, 1.0), t)
    assert {"metric": "recall_frac@10", "reason": "the new run did not measure K=10 (its K: 5)"} in missing["skipped"]
    assert missing["passed"] is False  # a named metric not compared fails, as Recall@K does
    assert any(f.startswith("recall_frac@10 not compared") for f in missing["failures"])
    assert gate_result(_run(1.0, 1.0, frac_at_10=0.9), _run(1.0, 1.0), t, allow_missing_metrics=True)["passed"]


def test_direction_and_the_operational_block_come_from_the_registry():
    # error_rate is lower-is-better and held in operational_metrics: by hand 0.0 -> 0.25 is a rise of 0.25 > 0.02
    t = Thresholds().with_named(parse_regression_thresholds(["error_rate=2%"]))
    (r,) = check_regressions(_run(1.0, 1.0), _run(1.0, 1.0, error_rate=0.25), t)
    assert r.direction == "lower_is_better" and r.message.startswith("error_rate rose by 0.25")
    assert check_regressions(_run(1.0, 1.0, error_rate=0.25), _run(1.0, 1.0), t) == []  # a fall is no regression


def test_a_gated_metrics_name_sets_its_built_in_threshold():
    t = Thresholds().with_named(parse_regression_thresholds(["mrr=0.2", "scope_miss_rate=0.3", "recall_at_k_avg=1%"]))
    assert (t.mrr, t.scope_miss, t.recall, t.metrics) == (0.2, 0.3, 0.01, ())


@pytest.mark.parametrize(
    ("given", "gate_name"),
    [
        pytest.param("recall_frac", "recall_frac_avg", id="at-k-name"),
        pytest.param("recall_frac_avg", "recall_frac_avg", id="headline-key"),
        pytest.param("recall_frac@10", "recall_frac@10", id="explicit-k"),
        pytest.param("R@10", "recall_frac@10", id="ir-measures"),
        pytest.param("nDCG@5", "ndcg@5", id="ir-measures-ndcg"),
        pytest.param("hallucination", "hallucination_rate_unanswerable", id="threshold-name"),
        pytest.param("must_include_recall", "must_include_recall", id="expectation"),
        pytest.param("error_rate", "error_rate", id="operational"),
    ],
)
def test_names_the_gate_takes(given: str, gate_name: str):
    assert gate_metric(given)[0] == gate_name


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        pytest.param("recall=0.05", "'recall' names two metrics: recall_at_k_avg", id="ambiguous"),
        pytest.param("recal_frac=0.05", "unknown metric 'recal_frac'; did you mean 'recall_frac'?", id="typo"),
        pytest.param("recall_frac=150%", "'150%' is off the metric's scale", id="off-scale"),
        pytest.param("groundedness_avg=6", "must be in [0, 5]", id="off-the-0-5-scale"),
        pytest.param("recall_frac=much", "not a number", id="not-a-number"),
        pytest.param("recall_frac", "expected NAME=VALUE", id="no-value"),
    ],
)
def test_bad_entries_are_refused_with_what_to_write(entry: str, message: str):
    with pytest.raises(ValueError, match=None) as e:
        parse_regression_thresholds([entry])
    assert message in str(e.value)


def test_the_ambiguous_recall_names_both_metrics():
    with pytest.raises(ValueError) as e:
        parse_regression_thresholds(["recall=0.05"])
    assert "recall_at_k_avg" in str(e.value) and "recall_frac" in str(e.value)


def test_percent_is_absolute_points():
    # seed 001's "Recall drop > 5%" read as 5 points of recall_frac; judge means are on 0-5
    assert parse_regression_thresholds(["recall_frac=5%", "groundedness=1"]) == {
        "recall_frac_avg": 0.05, "groundedness_avg": 1.0,
    }


def test_gate_by_names_the_aggregate_groupings():
    from evalkit.metrics.aggregate import GROUPINGS

    assert {f"by_{g}" for g in GATE_BY} == set(GROUPINGS)
    assert parse_gate_by(["domain,by_category", "domain"]) == ["domain", "category"]
    with pytest.raises(ValueError, match="unknown grouping 'domian'"):
        parse_gate_by(["domian"])
    with pytest.raises(ValueError, match="unknown grouping"):
        Thresholds(by=("folder",))


def test_the_seed_001_preset():
    bob = gate_preset("seed001")
    assert bob is gate_preset("bob")
    # regression: issue 36 item 10, "Recall drop > 5%" was read as 5 points and "MRR drop > 10%" as
    # 10% of the baseline's MRR. One reading now: both a share of the baseline's value. Any query
    # pass -> fail (--fail-on-flip), per domain.
    assert (dict(bob.thresholds), dict(bob.relative), bob.mrr_relative, bob.fail_on_flip, bob.by) == (
        {}, {"recall_frac_avg": 0.05, "mrr_avg": 0.10}, 0.10, True, ("domain",),
    )
    with pytest.raises(ValueError, match="unknown gate preset 'bobb'; expected one of: bob"):
        gate_preset("bobb")


def _mrr_run(mrr: float, install_mrr: float, frac: float = 1.0, install_frac: float = 1.0) -> dict:
    run = _run(frac, install_frac)
    run["aggregate_metrics"]["mrr_avg"] = mrr
    run["aggregate_metrics"]["at_k"]["5"]["mrr"] = mrr
    run["by_domain"]["install"]["mrr_avg"] = install_mrr
    return run


def _bob() -> Thresholds:
    bob = gate_preset("bob")
    return replace(Thresholds().with_relative(dict(bob.relative)), by=bob.by, preset=bob.name)


@pytest.mark.parametrize(
    ("base", "new", "failed"),
    [
        # by hand: recall_frac 0.80 -> 0.77 is 0.03 / 0.80 = 3.75% of the baseline: within 5%
        pytest.param(0.80, 0.77, False, id="recall-3.75%"),
        # by hand: 0.80 -> 0.75 is 0.05 / 0.80 = 6.25% > 5% (as 5 points it would have passed)
        pytest.param(0.80, 0.75, True, id="recall-6.25%"),
        # by hand: 0.40 -> 0.38 is 0.02 / 0.40 = 5%, exactly the threshold: allowed (strictly greater fails)
        pytest.param(0.40, 0.38, False, id="recall-exactly-5%"),
        # by hand: 0.40 -> 0.37 is 0.03 / 0.40 = 7.5% > 5%
        pytest.param(0.40, 0.37, True, id="recall-7.5%"),
    ],
)
def test_seed_001_recall_drop_is_a_share_of_the_baseline(base, new, failed):
    g = gate_result(_run(base, base), _run(new, new), _bob())
    overall = [r for r in g["regressions"] if r["scope"] == "overall"]
    assert [r["metric"] for r in overall] == (["recall_frac_avg"] if failed else [])
    assert "recall_frac_avg_relative" in g["compared"] and g["thresholds"]["recall_frac_avg_relative"] == 0.05
    if failed:
        (reg,) = overall
        assert reg["relative"] is True and reg["relative_change"] == pytest.approx((base - new) / base)


@pytest.mark.parametrize(
    ("base", "new", "failed"),
    [
        # by hand: MRR 0.50 -> 0.46 is 0.04 / 0.50 = 8% of the baseline: within 10%
        pytest.param(0.50, 0.46, False, id="mrr-8%"),
        # by hand: 0.50 -> 0.44 is 0.06 / 0.50 = 12% > 10% (as 10 points it would have passed)
        pytest.param(0.50, 0.44, True, id="mrr-12%"),
        # by hand: 1.00 -> 0.90 is 0.10 / 1.00 = 10%, exactly the threshold: allowed
        pytest.param(1.00, 0.90, False, id="mrr-exactly-10%"),
    ],
)
def test_seed_001_mrr_drop_is_read_the_same_way(base, new, failed):
    g = gate_result(_mrr_run(base, base), _mrr_run(new, new), _bob())
    overall = [r["metric"] for r in g["regressions"] if r["scope"] == "overall"]
    assert overall == (["mrr_avg"] if failed else [])


def test_seed_001_relative_drops_per_domain_with_their_own_message():
    # the reproduction: recall_frac 1 -> 2/3 overall, the install domain 1 -> 0.5 (n = 2);
    # and MRR in the install domain 0.8 -> 0.6
    g = gate_result(_mrr_run(1.0, 0.8, 1.0, 1.0), _mrr_run(1.0, 0.6, 2 / 3, 0.5), _bob())
    assert [r["message"] for r in g["regressions"]] == [
        # by hand: (1 - 2/3) / 1 = 33.3%
        "recall_frac_avg dropped by 33.3% of the baseline (1 -> 0.6667; allowed 5%)",
        # by hand: (1 - 0.5) / 1 = 50%; (0.8 - 0.6) / 0.8 = 25%
        "recall_frac_avg in domain:install dropped by 50.0% of the baseline (1 -> 0.5; allowed 5%; n = 2)",
        "mrr_avg in domain:install dropped by 25.0% of the baseline (0.8 -> 0.6; allowed 10%; n = 2)",
    ]
    # one reading per metric: MRR is not also gated by the absolute 0.10 (0.8 -> 0.6 is 0.2 points)
    assert "mrr" not in g["thresholds"] and g["thresholds"]["mrr_avg_relative"] == 0.10
    assert "mrr_avg" not in g["compared"] and "mrr_avg_relative" in g["compared"]


def test_a_relative_threshold_on_a_zero_baseline_is_skipped_not_failed():
    g = gate_result(_run(0.0, 0.0), _run(0.0, 0.0), _bob())
    reason = "the baseline's value is 0: a relative change is undefined"
    assert {"metric": "recall_frac_avg_relative", "reason": reason} in g["skipped"]
    assert g["passed"] is True
    with pytest.raises(ValueError, match="unknown metric 'recal_frac'"):
        Thresholds().with_relative({"recal_frac": 0.05})
