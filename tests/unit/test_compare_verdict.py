"""The merge verdict (issue 30 items 1, 2 and 6): better, equivalent, non-inferior, worse or
inconclusive per metric and for the merge, from an adjusted paired interval against a margin;
the power behind it; target errors in the gate (EVAL.md, "The verdict").

Checked against scipy (the t quantile, and a TOST computed from scipy's t distribution), by
simulation (the A/A false-worse rate, the detectable change, the cases that settle a verdict),
and on hand-built runs (the issue's attribution drop, a run against itself, a small change on
few cases, a timeout regression).
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from rich.console import Console
from scipy import stats
from typer.testing import CliRunner

from evalkit.cli.compare_runs import app
from evalkit.compare import compare_runs
from evalkit.errors import InputError
from evalkit.gate.verdict import (
    Member,
    build_verdict,
    cases_to_settle,
    classify,
    minimum_detectable,
    paired_interval,
    parse_margins,
    t_quantile,
)
from evalkit.report.compare import print_comparison, render_markdown
from evalkit.report.html.compare import write_compare_report
from tests.unit.test_compare import make_run, rec

R = 500  # resamples of the p-values beside the verdict; the verdict itself draws nothing
ALPHA = 0.05


def _tost(d: np.ndarray, margin: float, scale: float, level: float, direction: str = "higher_is_better") -> str:
    """The verdict label computed independently: four one-sided t-tests (scipy.stats.t) at
    `level` each, on the standard error EVAL.md gives (variance plus one full-scale change)."""
    g = d if direction == "higher_is_better" else -d
    n = g.size
    se = math.sqrt((np.var(g, ddof=1) * (n - 1) + scale**2) / (n - 1)) / math.sqrt(n)
    mean, df = float(np.mean(g)), n - 1
    gain = stats.t.sf(mean / se, df) < level  # H0: change <= 0
    drop = stats.t.cdf(mean / se, df) < level  # H0: change >= 0
    above_minus = stats.t.sf((mean + margin) / se, df) < level  # H0: change <= -margin
    below_plus = stats.t.cdf((mean - margin) / se, df) < level  # H0: change >= +margin
    if gain:
        return "better"
    if drop and not above_minus:
        return "worse"
    if above_minus and below_plus:
        return "equivalent"
    return "non-inferior" if above_minus else "inconclusive"


# ---------------------------------------------------------------- the statistics


@pytest.mark.parametrize("df", [1, 2, 3, 7, 30, 50, 200, 999, 1001, 10**5])
def test_t_quantile_is_scipys(df):
    for p in (0.51, 0.8, 0.975, 0.99375, 0.999, 0.99999, 0.025):
        assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9)


def test_the_interval_is_a_t_interval_whose_variance_counts_one_more_full_scale_change():
    d = np.array([1.0, 0, 0, -1, 0, 1, 1, 0, 0, 0])
    iv = paired_interval(d, scale=1.0, confidence=0.99)
    # by hand: mean 0.2, Σ(d - 0.2)² = 3·0.64 + 1.44 + 6·0.04 = 3.6, plus 1² -> s² = 4.6/9
    s = math.sqrt(4.6 / 9)
    half = stats.t.ppf(0.995, 9) * s / math.sqrt(10)
    assert (iv.n, iv.mean, iv.sd) == (10, pytest.approx(0.2), pytest.approx(s))
    assert (iv.lo, iv.hi) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))
    # clipped to the scale: a mean difference of a rate lies in [-1, 1]
    assert paired_interval([1.0, 1.0], scale=1.0, confidence=0.99).hi == 1.0
    assert paired_interval([], scale=1.0, confidence=0.95).lo is None
    one = paired_interval([0.5], scale=1.0, confidence=0.95)
    assert (one.mean, one.lo) == (0.5, None)


def test_the_labels_equal_a_tost_computed_with_scipy():
    rng = np.random.default_rng(30)
    seen = set()
    for trial in range(400):
        n = int(rng.integers(8, 150))
        scale, margin = (5.0, 0.5) if trial % 3 == 0 else (1.0, 0.05 * (1 + trial % 2))
        shift = rng.normal(0, 0.08) * scale
        if scale == 1.0:
            d = rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.15, 0.7, 0.15]) + (rng.random(n) < abs(shift)) * np.sign(shift)
            d = np.clip(d, -1, 1)
        else:
            d = np.clip(np.round(rng.normal(shift, 1.2, n)), -5, 5)
        m = int(rng.integers(1, 10))
        confidence = 1 - ALPHA / m
        direction = "higher_is_better" if trial % 2 else "lower_is_better"
        iv = paired_interval(d, scale=scale, confidence=confidence)
        got = classify(iv.lo, iv.hi, margin, direction)
        assert got == _tost(d, margin, scale, ALPHA / (2 * m), direction), (trial, d.tolist(), margin, m)
        seen.add(got)
    assert seen == {"better", "equivalent", "non-inferior", "worse", "inconclusive"}  # every branch was exercised


def _aa_members(rng: np.random.Generator, n: int = 51, n_unanswerable: int = 8, flaky: float = 0.35) -> list[Member]:
    """One A/A comparison shaped like compare's verdict family: each case has two real outcomes
    (two runs of one noisy system; a case is flaky with probability `flaky`), and a fair coin
    assigns them to A and B, so the null holds exactly."""
    def two_runs(draw):
        x = draw()
        y = np.where(rng.random(x.shape) < flaky, draw(), x)
        coin = rng.random(x.shape) < 0.5
        return np.where(coin, y, x) - np.where(coin, x, y)

    p = rng.beta(2, 1, n)  # how easy each case is
    binary = lambda q, size=n: (lambda: (rng.random(size) < q).astype(float))  # noqa: E731
    score = lambda mu: (lambda: np.clip(np.round(rng.normal(mu, 1.2, n)), 0, 5))  # noqa: E731
    rank = rng.integers(1, 6, n)
    family = [
        ("recall_any", 5, "higher_is_better", 0.05, two_runs(binary(p))),
        ("mrr", 5, "higher_is_better", 0.10, two_runs(lambda: (rng.random(n) < p) / rank)),
        ("attribution_hit_rate", None, "higher_is_better", 0.05, two_runs(binary(p * 0.9))),
        ("groundedness_avg", None, "higher_is_better", 0.5, two_runs(score(4.0))),
        ("correctness_avg", None, "higher_is_better", 0.5, two_runs(score(3.0))),
        ("abstention_accuracy", None, "higher_is_better", 0.05, two_runs(binary(0.6, n_unanswerable))),
        ("false_abstention_rate", None, "lower_is_better", 0.05, two_runs(binary(0.1))),
        ("error_rate", None, "lower_is_better", 0.05, two_runs(binary(0.02, n + n_unanswerable))),
    ]
    return [Member(m, k, d, margin, "registry", diff, None, f"{m}@{k}") for m, k, d, margin, diff in family]


@pytest.mark.parametrize("flaky", [0.1, 0.35])
def test_aa_comparisons_are_rarely_called_worse(flaky):
    # The issue's A/A: the threshold gate failed 46-75% of such comparisons. Each bound of the
    # verdict's intervals is a one-sided test at alpha/m, so by Bonferroni "worse" for a system
    # compared with itself is at most 5% (and "better" likewise); here, over 1,000 seeds, under it.
    trials = 1000
    verdicts = [build_verdict(_aa_members(np.random.default_rng(seed), flaky=flaky), [], alpha=ALPHA) for seed in range(trials)]
    # m counts the metrics that changed on some case (a metric that did not cannot be called
    # better or worse): 8 when all did, fewer on the seeds where the 8 unanswerable cases did not.
    for v in verdicts[:20]:
        changed = sum(1 for m in v.metrics if m.n_changed)
        assert v.family_size == changed and v.confidence == 1 - 2 * ALPHA / max(changed, 1)
    false_worse = sum(v.verdict == "worse" for v in verdicts) / trials
    false_better = sum(any(m.verdict == "better" for m in v.metrics) for v in verdicts) / trials
    assert false_worse <= 0.05 and false_better <= 0.05, (false_worse, false_better)
    assert false_worse <= 0.03  # what it is (under 1%): Bonferroni over 8 metrics, one direction


# ---------------------------------------------------------------- honest power (issue 36 item 3)


def _noise(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    """Paired differences of an unchanged system that is a little flaky, by metric kind."""
    if kind in ("rate", "lower_rate"):  # a hit / an error: 6% of cases flip, either way
        return rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.03, 0.94, 0.03])
    if kind == "reciprocal_rank":  # MRR: the first hit moves between ranks 1-3 on 10% of cases
        rr = np.array([1.0, 0.5, 1 / 3])
        a = rr[rng.integers(0, 3, n)]
        b = np.where(rng.random(n) < 0.10, rr[rng.integers(0, 3, n)], a)
        return b - a
    # a 0-5 judge: a grade moves by one point on 20% of cases
    return rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.10, 0.80, 0.10])


def _with_drop(rng: np.random.Generator, kind: str, d: np.ndarray, size: float) -> np.ndarray:
    """d plus a true worsening of `size` (in the metric's own direction), made of cases that
    each move by the whole scale: the most spread a one-way change of that size can have, so
    the hardest change to detect."""
    scale = 5.0 if kind == "judge" else 1.0
    hit = rng.random(d.size) < size / scale
    return d + (scale if kind == "lower_rate" else -scale) * hit


# kind -> (a registry metric of that kind: its scale and direction, as the product reads them)
_KINDS = {"rate": ("attribution_hit_rate", "higher_is_better", 1.0), "lower_rate": ("error_rate", "lower_is_better", 1.0),
          "reciprocal_rank": ("mrr", "higher_is_better", 1.0), "judge": ("groundedness_avg", "higher_is_better", 5.0)}


@pytest.mark.parametrize("n", [59, 300, 1000])
@pytest.mark.parametrize("kind", list(_KINDS))
def test_the_printed_detectable_change_is_detected_at_least_75_percent_of_the_time(kind, n):
    # Issue 36: 'detectable' was printed from the spread of an unchanged system and was caught
    # 3-20% of the time. Now: observe an A/A pair, take the mde the product prints, then make a
    # true drop of that size (each trial a fresh observation and a fresh drop) and count how
    # often the interval the product computes shows it (lies wholly on the bad side of 0).
    metric, direction, scale = _KINDS[kind]
    rng = np.random.default_rng(36 + n)
    family = [Member(metric, None, direction, 0.05 * scale, "registry", _noise(rng, kind, n), None, f"m{j}") for j in range(8)]
    confidence = build_verdict(family, [], alpha=ALPHA).confidence
    trials, shown = 400, 0
    for _ in range(trials):
        observed = _noise(rng, kind, n)
        printed = build_verdict([Member(metric, None, direction, 0.05 * scale, "registry", observed, None, "m0"), *family[1:]],
                                [], alpha=ALPHA).metrics[0]
        assert printed.mde is not None and 0 < printed.mde < scale
        drop = _with_drop(rng, kind, _noise(rng, kind, n), printed.mde)
        iv = paired_interval(drop, scale=scale, confidence=confidence)
        shown += (iv.hi < 0) if direction == "higher_is_better" else (iv.lo > 0)
    assert shown / trials >= 0.75, (kind, n, shown / trials)


def test_the_detectable_change_counts_the_spread_of_the_change():
    # By hand, v = 0, R = 1, n = 300, t = z = 0 would give Δ = 0; with the factor f = (t + z)/√n
    # the root of Δ = f·√(Δ(1 − Δ) + 1/299) is what bisection returns: check it solves it.
    n, confidence = 300, 1 - 2 * ALPHA / 8
    mde = minimum_detectable(0.0, n, confidence, 1.0)
    f = (stats.t.ppf((1 + confidence) / 2, n - 1) + stats.norm.ppf(0.8)) / math.sqrt(n)
    assert mde == pytest.approx(f * math.sqrt(mde * (1 - mde) + 1 / (n - 1)), rel=1e-9)
    # and it is far above what the unchanged spread alone promised (f · √(1/299) ≈ 0.011)
    assert mde > 3 * f * math.sqrt(1 / (n - 1))
    assert minimum_detectable(0.0, 3, confidence, 1.0) is None  # three cases cannot show any change


def test_the_cases_that_would_settle_an_inconclusive_verdict_do_so_either_way():
    # Observed: 60 cases, 6 lost and 4 gained a hit (Δ = -1/30), margin 0.10: inconclusive.
    # Drawing `cases_needed` cases from that distribution settles it (lo > -0.10, or hi < 0)
    # in at least 75% of simulated evals.
    confidence = 1 - 2 * ALPHA / 8
    for d, margin in [
        (np.array([-1.0] * 6 + [1.0] * 4 + [0.0] * 50), 0.10),
        # issue 36: an MRR case whose observed change sits on the margin said "about 2,669 more";
        # it settles (as worse) with a few hundred
        (np.array([-1.0] * 5 + [-0.5] * 4 + [0.5] * 3 + [0.0] * 48), 0.10),
    ]:
        iv = paired_interval(d, scale=1.0, confidence=confidence)
        assert classify(iv.lo, iv.hi, margin, "higher_is_better") == "inconclusive"
        needed = cases_to_settle(iv.mean, iv.variance, 1.0, margin, d.size, confidence)
        assert needed is not None and needed < 1000
        rng = np.random.default_rng(5)
        trials = 1500
        settled = 0
        for _ in range(trials):
            x = paired_interval(rng.choice(d, needed), scale=1.0, confidence=confidence)
            settled += x.lo > -margin or x.hi < 0
        assert settled / trials >= 0.75, (needed, settled / trials)
        half = sum(
            (lambda x: x.lo > -margin or x.hi < 0)(paired_interval(rng.choice(d, max(needed // 3, 61)), scale=1.0,
                                                                   confidence=confidence))
            for _ in range(500)
        ) / 500
        assert half < 0.75  # a third as many cases are not enough


def test_a_margin_finer_than_the_set_can_show_is_said_plainly():
    # Issue 36: abstention accuracy on 8 unanswerable cases can never be shown within 0.05: one
    # case moves it by 1/8, and even an unchanged metric's interval is ±t·1/√(8·7).
    confidence = 1 - 2 * ALPHA / 8
    floor = stats.t.ppf((1 + confidence) / 2, 7) / math.sqrt(8 * 7)  # by hand: scipy's t, the guard alone
    assert floor > 0.05
    d = np.array([1.0, 0, 0, 0, 0, 0, 0, 0])
    v = build_verdict([Member("abstention_accuracy", None, "higher_is_better", 0.05, "registry", d, None, "a", gated=False)],
                      [], alpha=ALPHA).metrics[0]
    assert (v.verdict, v.judgeable, v.resolution) == ("inconclusive", False, 0.125)
    assert v.reason.startswith("one case moves it by 0.125 and even an unchanged metric's interval is ±")
    assert "this set cannot judge a 0.05 margin; add about" in v.reason
    # the product's `judgeable` turns true at the first n where scipy's t says the guard alone fits in ±0.05
    by_scan = next(N for N in range(2, 10_000) if stats.t.ppf((1 + confidence) / 2, N - 1) / math.sqrt(N * (N - 1)) < 0.05)
    assert by_scan > 8

    def judgeable(n: int) -> bool:
        # seven more members changed on some case, so m = 8 and the confidence is the one above
        family = [Member("m", None, "higher_is_better", 0.05, "registry", np.array([1.0] + [0.0] * (n - 1)), None, f"m{j}")
                  for j in range(7)]
        member = Member("abstention_accuracy", None, "higher_is_better", 0.05, "registry",
                        np.array([1.0] + [0.0] * (n - 1)), None, "a", gated=False)
        return build_verdict([member, *family], [], alpha=ALPHA).metrics[0].judgeable

    assert (judgeable(by_scan - 1), judgeable(by_scan)) == (False, True)


def test_the_registry_holds_each_margin_once():
    # A gated metric's margin is its regression threshold's default: one number, one place.
    # Every metric with per-case values has a margin: the verdict judges each of them.
    from evalkit.gate.thresholds import Thresholds
    from evalkit.metrics.registry import METRICS

    gated = [m for m in METRICS if m.gated is not None]
    assert gated and all(m.margin == getattr(Thresholds(), m.gated) for m in gated)
    assert all(m.margin is not None for m in METRICS if m.per_case is not None or m.at_k is not None)
    assert {(m.at_k or m.key) for m in METRICS if m.verdict_gated} == {
        "recall_any", "recall_frac", "mrr", "scope_miss_rate", "attribution_hit_rate", "groundedness_avg",
        "correctness_avg", "error_rate"}


# ---------------------------------------------------------------- hand-built runs


def _attribution_runs(root: Path, n: int, hits_a: int, hits_b: int) -> None:
    """n answerable cases, attribution hit on the first hits_a (run a) and hits_b (run b)."""
    make_run(root, "a", [rec(f"q{i:03d}", attribution=i < hits_a) for i in range(n)])
    make_run(root, "b", [rec(f"q{i:03d}", attribution=i < hits_b) for i in range(n)])


def _member(c, metric: str):
    return next(m for m in c.verdict.metrics if m.metric == metric)


def test_a_drop_whose_interval_lies_beyond_the_margin_is_worse_and_fails_every_gate(tmp_path):
    # regression: issue 30, "a proven drop passes": attribution 0.665 -> 0.530 on 200 cases
    # (27 one-way losses); its adjusted interval lies wholly below -0.05.
    _attribution_runs(tmp_path, 200, 133, 106)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="non-inferior")
    att = _member(c, "attribution_hit_rate")
    assert att.delta == pytest.approx(-27 / 200) and att.ci[1] < -0.05 and att.verdict == "worse"
    assert att.reason == "worse beyond the margin: the interval lies below -0.05"
    assert c.verdict.verdict == "worse" and c.verdict.summary.startswith("Attribution hit rate -0.135 [")
    assert c.gate.passed is False and c.gate.failures[0].startswith("Attribution hit rate: worse, Δ -0.135")
    assert (c.gate.mode, c.decision.outcome, c.decision.exit_code) == ("verdict", "fail", 1)
    for mode in ("significant", "threshold"):
        assert compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate=mode).gate.passed is False
    # the verdict is the TOST scipy computes, on the differences known by construction
    d = np.array([-1.0] * 27 + [0.0] * 173)
    level = ALPHA / (2 * c.verdict.family_size)
    assert _tost(d, 0.05, 1.0, level) == "worse"
    # the lost references also lost the citations of those 27 answers: the same differences
    # under another metric; every other metric changed on no case (identical, outside m)
    for m in c.verdict.metrics:
        if m.metric in ("attribution_hit_rate", "has_citations_rate"):
            assert m.verdict == _tost(d, m.margin, 1.0, level, m.direction) == "worse"
        else:
            assert (m.verdict, m.n_changed) == ("identical", 0), m
    assert c.verdict.family_size == 2


def test_the_issues_drop_on_51_cases_is_worse(tmp_path):
    # The issue's numbers: 0.667 -> 0.529 on 51 cases, 7 one-way losses, a 95% CI wholly
    # beyond the 0.05 threshold that `--gate significant` let through. Each bound of the
    # verdict's interval is a one-sided test at alpha/m (m = 2 here: attribution and the
    # citations the same answers lost; nothing else changed), so by hand: d = -1 on 7 of 51
    # cases, d̄ = -0.1373, s² = (7 - 51·d̄² + 1) / 50 = 0.1408, t_50(1 - 0.05/2) = 2.009
    # (scipy.stats.t.ppf), hi = d̄ + 2.009 · 0.3752 / √51 = -0.0317 < 0.
    _attribution_runs(tmp_path, 51, 34, 27)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    att = _member(c, "attribution_hit_rate")
    assert (att.verdict, att.n_changed) == ("worse", 7) and att.ci[0] < -0.05
    assert att.ci[1] == pytest.approx(-0.1373 + 2.009 * 0.3752 / math.sqrt(51), abs=1e-3)
    assert c.verdict.family_size == 2 and c.verdict.confidence == 1 - 2 * ALPHA / 2
    assert c.verdict.verdict == "worse" and c.gate.passed is False


def _varied_run(n_answerable: int, n_unanswerable: int) -> list[dict]:
    recs = [rec(f"q{i:03d}", rank=(None, 1, 2, 3, 1)[i % 5], attribution=i % 3 != 0, g=float(i % 6), c=float((i * 7) % 6),
                abstained=i % 11 == 0, category=("factual", "multi_hop")[i % 2]) for i in range(n_answerable)]
    recs += [rec(f"u{i:03d}", answerable=False, abstained=i % 4 != 0, g=None, c=None, tags=()) for i in range(n_unanswerable)]
    return recs


def test_a_run_compared_with_itself_is_identical_on_every_metric_and_passes(tmp_path):
    # Issue 36: a no-op failed (abstention accuracy on 8 cases can never be shown within 0.05).
    # Identical per-case outcomes are called identical and pass, whatever the set's size.
    for name, size in (("big", (130, 70)), ("small", (12, 4))):
        make_run(tmp_path, name, _varied_run(*size))
        c = compare_runs(name, name, results_dir=tmp_path, resamples=R)
        assert {m.verdict for m in c.verdict.metrics} == {"identical"}
        assert {"recall_any", "recall_frac", "precision", "ndcg", "mrr", "attribution_hit_rate", "groundedness_avg",
                "correctness_avg", "abstention_accuracy", "hallucination_rate_unanswerable", "false_abstention_rate",
                "error_rate"} <= {m.metric for m in c.verdict.metrics}
        assert c.verdict.not_compared == [{"metric": "scope_miss_rate", "reason": "not computed in the new run"}]
        assert c.verdict.family_size == 0 and c.verdict.verdict == "identical"
        assert (c.gate.passed, c.decision.outcome, c.decision.exit_code) == (True, "pass", 0)
        assert c.decision.headline.startswith("PASS: identical — no paired case changed on any of the ")


def test_a_small_change_on_few_cases_is_inconclusive_with_the_cases_that_would_settle_it(tmp_path):
    make_run(tmp_path, "a", [rec(f"q{i:02d}", rank=1) for i in range(20)])
    make_run(tmp_path, "b", [rec(f"q{i:02d}", rank=None if i == 0 else 1) for i in range(20)])
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    recall = _member(c, "recall_any")
    assert (recall.verdict, recall.delta, recall.n_changed) == ("inconclusive", -0.05, 1)
    assert recall.more_cases == recall.cases_needed - 20 > 0 and recall.mde > 0.05
    assert c.verdict.verdict == "inconclusive"
    # the delta the verdict judges is the row's paired delta: one number, one truth
    row = next(r for r in c.deltas if r.metric == "recall_any" and r.scope == "overall" and r.k == 5)
    assert recall.delta == row.paired_delta and recall.test == row.test


def test_target_errors_fail_the_non_inferior_and_significant_gates(tmp_path):
    # regression: issue 30, "target errors hide a regression from --gate significant": the new
    # run times out on 10 of the 44 cases the baseline found. Recall@5 0.863 -> 0.667 in
    # metrics.json, but the paired rows leave the errors out (no paired case changed, n=41).
    make_run(tmp_path, "a", [rec(f"q{i:02d}", rank=1 if i < 44 else None) for i in range(51)])
    make_run(tmp_path, "b", [rec(f"q{i:02d}", rank=1 if i < 44 else None, error="timeout" if i < 10 else None) for i in range(51)])
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="significant")
    recall = next(r for r in c.deltas if r.metric == "recall_any" and r.scope == "overall" and r.k == 5)
    assert (recall.a, recall.b, recall.note) == (pytest.approx(44 / 51), pytest.approx(34 / 51), "no paired case changed (n=41)")
    errors = next(r for r in c.deltas if r.metric == "error_rate" and r.scope == "overall")
    assert errors.significant and errors.change == "worse"
    assert c.gate.passed is False and "error_rate" in c.gate.compared
    assert c.gate.failures[0].startswith("error_rate rose by 0.1961 (0 -> 0.1961; allowed 0.05), significant after holm")
    ni = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="non-inferior")
    assert ni.gate.passed is False and ni.verdict.verdict == "worse"
    assert _member(ni, "error_rate").verdict == "worse" and ni.verdict.summary.startswith("Error rate +0.196 [")
    assert any(f.startswith("Error rate: worse") for f in ni.gate.failures)
    # a rise within the margin is no regression for either gate: one error in 51
    make_run(tmp_path, "one", [rec(f"q{i:02d}", rank=1 if i < 44 else None, error="timeout" if i == 0 else None) for i in range(51)])
    one = compare_runs("a", "one", results_dir=tmp_path, resamples=R, gate="significant")
    assert not any(f.startswith("error_rate") for f in one.gate.failures)


def test_margins_replace_add_and_leave_out_metrics(tmp_path):
    make_run(tmp_path, "a", _varied_run(40, 10))
    make_run(tmp_path, "b", _varied_run(40, 10))
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R, margins=parse_margins(
        ["recall_at_k_avg=0.2", "R@5=3%", "error_rate=off", "ndcg=0.1"]))
    by = {(m.metric, m.k): m for m in c.verdict.metrics}
    assert (by[("recall_any", 5)].margin, by[("recall_any", 5)].margin_source) == (0.2, "--margin")
    assert (by[("recall_frac", 5)].margin, by[("ndcg", 5)].margin) == (0.03, 0.1)  # ir_measures' R@5; an @K metric at the gate's K
    assert by[("mrr", 5)].margin_source == "registry" and ("error_rate", None) not in by
    assert {"metric": "error_rate", "reason": "left out by --margin error_rate=off"} in c.verdict.not_compared
    for bad, message in [
        ({"recall_any@10": 0.1}, "K = 10 is not compared"),
        ({"error_rate@5": 0.1}, "error_rate has no K"),
        ({"abstention_precision": 0.1}, "no per-case values to pair"),
        ({"recall_at_k_avgg": 0.1}, "no per-case values to pair"),
        ({"groundedness_avg": 6.0}, "the margin must be in (0, 5]"),
        ({"mrr": 0.0}, "the margin must be in (0, 1]"),
    ]:
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            compare_runs("a", "b", results_dir=tmp_path, resamples=R, margins=bad)
    with pytest.raises(InputError, match="expected NAME=VALUE"):
        parse_margins(["recall_any@5"])
    with pytest.raises(InputError, match="not a number"):
        parse_margins(["recall_any@5=lots"])


def test_a_bare_metrics_json_has_no_verdict_and_cannot_gate_non_inferior(tmp_path):
    folder = make_run(tmp_path, "a", _varied_run(10, 2))
    make_run(tmp_path, "b", _varied_run(10, 2))
    bare = tmp_path / "metrics_only.json"
    bare.write_bytes((folder / "metrics.json").read_bytes())
    c = compare_runs(bare, "b", results_dir=tmp_path, resamples=R)
    assert c.verdict.available is False and c.verdict.verdict is None and c.verdict.metrics == []
    with pytest.raises(InputError, match="--gate non-inferior needs per-case results"):
        compare_runs(bare, "b", results_dir=tmp_path, gate="non-inferior")


# ---------------------------------------------------------------- every format leads with it


def test_every_format_leads_with_one_headline_that_matches_the_exit_code(tmp_path):
    # Issue 36 item 4: terminal, markdown (a ✅ PR comment) and HTML (a green box) said "gate
    # passed" above "Verdict: inconclusive". Now the first line of each is the decision's one
    # sentence, the same words as the JSON's decision.headline.
    import html as html_lib

    _attribution_runs(tmp_path, 200, 133, 106)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    head = c.decision.headline
    assert head == f"FAIL: worse — {c.verdict.summary}" and c.decision.exit_code == 1
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=400, color_system=None, force_terminal=False))
    lines = out.getvalue().splitlines()
    assert lines[0] == head and lines[1] == "compare a (a, baseline) → b (b)"
    assert "Verdict: worse" not in out.getvalue()  # the headline already says it
    md = render_markdown(c).splitlines()
    assert md[0] == f"### ❌ {head}"
    table = next(i for i, x in enumerate(md) if x.startswith("#### Verdict per metric ("))
    assert table < next(i for i, x in enumerate(md) if x.startswith("#### Significant changes"))
    body = json.loads(c.model_dump_json())
    assert list(body)[:4] == ["schema_version", "run_id_1", "run_id_2", "decision"]
    assert body["decision"] == {"gate": "verdict", "outcome": "fail", "exit_code": 1, "on_inconclusive": "exit-4",
                                "allowed": False, "headline": head}
    html = write_compare_report("a", "b", results_dir=tmp_path, resamples=R).read_text(encoding="utf-8")
    assert f'<section id="verdict" class="verdict verdict-fail">\n  <h2>✗ {html_lib.escape(head)}</h2>' in html
    assert html.index("Verdict per metric") < html.index('id="significant"')
    # another gate deciding says so in its headline, and shows the verdict under it
    t = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="threshold")
    assert t.decision.headline.startswith("FAIL (threshold gate): ")
    assert t.decision.headline.endswith("; the verdict, not deciding: worse")
    assert render_markdown(t).splitlines()[2] == f"**Verdict: worse** — {t.verdict.summary}"


def test_not_enough_evidence_is_its_own_outcome(tmp_path):
    # One hit lost on 20 cases: Recall@5 (any), a gated metric, is not settled. Not a pass, not
    # a regression shown: exit 4, unless --on-inconclusive says what CI does with it.
    make_run(tmp_path, "a", [rec(f"q{i:02d}", rank=1) for i in range(20)])
    make_run(tmp_path, "b", [rec(f"q{i:02d}", rank=None if i == 0 else 1) for i in range(20)])
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    assert (c.gate.outcome, c.gate.passed, c.gate.failures) == ("inconclusive", False, [])
    assert c.gate.inconclusive[0].startswith("Recall@5 (any): inconclusive, Δ -0.050")
    assert (c.decision.outcome, c.decision.exit_code) == ("inconclusive", 4)
    assert c.decision.headline.startswith("NOT ENOUGH EVIDENCE: inconclusive — Recall@5 (any) -0.050 [")
    for action, code in (("pass", 0), ("fail", 1)):
        d = compare_runs("a", "b", results_dir=tmp_path, resamples=R, on_inconclusive=action).decision
        assert (d.outcome, d.exit_code) == ("inconclusive", code)
        assert d.headline.endswith(f"(--on-inconclusive {action}: exit {code})")
    assert render_markdown(c).startswith("### ⚠️ NOT ENOUGH EVIDENCE: ")


def test_the_halved_recall_fails_and_names_each_worse_metric(tmp_path):
    # Issue 36's reproduction: 60 cases, two gold supports each; the candidate retrieves only
    # the first. By hand: recall_frac 1 -> 0.5, Precision@5 2/5 -> 1/5, nDCG@5 1 -> 1/(1 + 1/log2 3)
    # = 0.613, the hit rate and MRR unchanged (the first support is still at rank 1).
    def two_gold(cid: str, both: bool) -> dict:
        r = rec(cid)
        r["retrieval_metrics"]["at_k"]["5"] = {
            "recall_any": 1.0, "recall_all": 1.0 if both else 0.0, "recall_frac": 1.0 if both else 0.5,
            "precision": 0.4 if both else 0.2, "mrr": 1.0, "ndcg": 1.0 if both else 1 / (1 + 1 / math.log2(3))}
        return r

    make_run(tmp_path, "a", [two_gold(f"c{i:02d}", True) for i in range(60)])
    make_run(tmp_path, "b", [two_gold(f"c{i:02d}", False) for i in range(60)])
    for gate in (None, "verdict", "non-inferior"):
        c = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate=gate)
        labels = {m.metric: m.verdict for m in c.verdict.metrics}
        assert labels["recall_frac"] == labels["ndcg"] == labels["precision"] == labels["recall_all"] == "worse"
        assert labels["recall_any"] == labels["mrr"] == "identical"
        assert _member(c, "ndcg").delta == pytest.approx(1 / (1 + 1 / math.log2(3)) - 1)
        assert (c.decision.outcome, c.decision.exit_code) == ("fail", 1)
        # the gated one leads; every other metric shown worse is named in the headline
        assert c.decision.headline.startswith("FAIL: worse — Recall_frac@5 -0.500 [")
        assert c.decision.headline.endswith("also shown worse: Recall_all@5, nDCG@5, Precision@5")


# ---------------------------------------------------------------- the command line


@pytest.fixture
def cli_runs(tmp_path: Path) -> Path:
    make_run(tmp_path, "base", _varied_run(130, 70))
    make_run(tmp_path, "same", _varied_run(130, 70))
    recs = _varied_run(130, 70)
    for r in recs[:40]:  # the attribution of 40 cases lost
        r["references"] = []
        r["retrieval_metrics"]["attribution_hit"] = False
    make_run(tmp_path, "drop", recs)
    make_run(tmp_path, "small", [rec(f"q{i:02d}", rank=1) for i in range(20)])
    make_run(tmp_path, "small-drop", [rec(f"q{i:02d}", rank=None if i == 0 else 1) for i in range(20)])
    return tmp_path


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param(["base", "same"], 0, id="identical-0"),
        pytest.param(["base", "same", "--gate", "non-inferior"], 0, id="alias-0"),
        pytest.param(["base", "drop"], 1, id="worse-1"),
        pytest.param(["base", "drop", "--allow-regressions"], 0, id="allowed-0"),
        pytest.param(["base", "drop", "--margin", "attribution_hit_rate=off", "--margin", "has_citations_rate=off"], 0,
                     id="left-out-0"),
        pytest.param(["small", "small-drop"], 4, id="inconclusive-4"),
        pytest.param(["small", "small-drop", "--on-inconclusive", "pass"], 0, id="inconclusive-pass-0"),
        pytest.param(["small", "small-drop", "--on-inconclusive", "fail"], 1, id="inconclusive-fail-1"),
        pytest.param(["small", "small-drop", "--on-inconclusive", "maybe"], 2, id="bad-action-2"),
        pytest.param(["base", "same", "--gate", "non-inferior", "--margin", "nope=0.1"], 2, id="unknown-margin-2"),
        pytest.param(["base", "same", "--margin", "recall_any@5"], 2, id="no-value-2"),
        pytest.param(["base", "same", "--gate", "nope"], 2, id="bad-gate-2"),
    ],
)
def test_exit_codes(cli_runs, args, code):
    out = CliRunner().invoke(app, [*args, "--results-dir", str(cli_runs), "--resamples", "200", "--format", "json"])
    assert out.exit_code == code, out.output
    if code != 2:
        body = orjson.loads(out.stdout)
        assert body["gate"]["mode"] == "verdict" and body["decision"]["exit_code"] == (0 if "--allow-regressions" in args else out.exit_code)
        assert body["verdict"]["verdict"] in ("identical", "worse", "inconclusive", "non-inferior")
