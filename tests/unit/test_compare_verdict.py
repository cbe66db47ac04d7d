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
from evalkit.compare.verdict import (
    Member,
    build_verdict,
    cases_to_settle,
    classify,
    minimum_detectable,
    paired_interval,
    parse_margins,
    t_quantile,
)
from evalkit.errors import InputError
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
    assert all(v.family_size == 8 and v.confidence == 1 - 2 * ALPHA / 8 for v in verdicts[:3])
    false_worse = sum(v.verdict == "worse" for v in verdicts) / trials
    false_better = sum(any(m.verdict == "better" for m in v.metrics) for v in verdicts) / trials
    assert false_worse <= 0.05 and false_better <= 0.05, (false_worse, false_better)
    assert false_worse <= 0.03  # what it is (under 1%): Bonferroni over 8 metrics, one direction


def test_the_detectable_change_is_detected_with_80_percent_power():
    # Binary per-case differences (30% of cases change), n = 120, the family of 8: the change
    # `minimum_detectable` names is shown as a change (lo > 0) in about 80% of simulated evals.
    rng = np.random.default_rng(2)
    n, confidence, q = 120, 1 - 2 * ALPHA / 8, 0.30
    mde = 0.1
    for _ in range(20):  # mde depends on the sd, which depends on the mean: iterate to the fixed point
        sd = math.sqrt(q - mde**2 + 1.0 / (n - 1))
        mde = minimum_detectable(sd, n, confidence)
    up, down = (q + mde) / 2, (q - mde) / 2
    trials = 3000
    draws = rng.choice([1.0, -1.0, 0.0], size=(trials, n), p=[up, down, 1 - q])
    power = np.mean([paired_interval(row, scale=1.0, confidence=confidence).lo > 0 for row in draws])
    assert 0.76 <= power <= 0.85, (mde, power)


def test_the_cases_that_would_settle_an_inconclusive_verdict_do_so_80_percent_of_the_time():
    # Observed: 60 cases, 6 lost and 4 gained a hit (Δ = -1/30), margin 0.10: inconclusive.
    # Drawing `cases_needed` cases from that distribution settles it (lo > -0.10) in ~80%.
    d = np.array([-1.0] * 6 + [1.0] * 4 + [0.0] * 50)
    confidence = 1 - 2 * ALPHA / 8
    iv = paired_interval(d, scale=1.0, confidence=confidence)
    assert classify(iv.lo, iv.hi, 0.10, "higher_is_better") == "inconclusive"
    needed = cases_to_settle(iv.mean, iv.variance, 1.0, 0.10, 60, confidence)
    assert 300 < needed < 800  # by the formula: ((t + z_0.8) · s / (d̄ + δ))², s² ≈ 10/59
    rng = np.random.default_rng(5)
    trials = 2000
    settled = np.mean([paired_interval(rng.choice(d, needed), scale=1.0, confidence=confidence).lo > -0.10
                       for _ in range(trials)])
    assert 0.74 <= settled <= 0.88, (needed, settled)
    fewer = np.mean([paired_interval(rng.choice(d, needed // 2), scale=1.0, confidence=confidence).lo > -0.10
                     for _ in range(500)])
    assert fewer < 0.6  # half as many cases are not enough


def test_a_metric_that_changed_on_no_case_needs_the_cases_its_guard_allows():
    # Zero variance: the interval is ±t·R/√(n(n-1)); it settles once (t + z_0.8)/√(N(N-1)) <= δ.
    confidence = 1 - 2 * ALPHA / 8
    needed = cases_to_settle(0.0, 0.0, 1.0, 0.05, 30, confidence)
    by_scan = next(N for N in range(31, 10_000)
                   if (stats.t.ppf((1 + confidence) / 2, N - 1) + stats.norm.ppf(0.8)) / math.sqrt(N * (N - 1)) <= 0.05)
    assert needed == by_scan


def test_the_registry_holds_each_margin_once():
    # A gated metric's margin is its regression threshold's default: one number, one place.
    from evalkit.compare.gate import Thresholds
    from evalkit.metrics.registry import METRICS, by_key

    gated = [m for m in METRICS if m.gated is not None]
    assert gated and all(m.margin == getattr(Thresholds(), m.gated) for m in gated)
    assert by_key("error_rate").margin == 0.05  # in the verdict without a threshold (issue 30 item 6)
    assert {m.key for m in METRICS if m.margin is not None} == {m.key for m in gated} | {"error_rate"}


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
    for mode in ("significant", "threshold"):
        assert compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate=mode).gate.passed is False
    # the verdict is the TOST scipy computes, on the differences known by construction
    d = np.array([-1.0] * 27 + [0.0] * 173)
    level = ALPHA / (2 * c.verdict.family_size)
    assert _tost(d, 0.05, 1.0, level) == "worse"
    for m in c.verdict.metrics:  # every other metric changed on no case
        expected = _tost(d if m.metric == "attribution_hit_rate" else np.zeros(m.n), m.margin, 5.0 if "_avg" in m.metric else 1.0,
                         level, m.direction)
        assert m.verdict == expected, m


def test_the_issues_drop_on_51_cases_is_worse(tmp_path):
    # The issue's numbers: 0.667 -> 0.529 on 51 cases, 7 one-way losses, a 95% CI wholly
    # beyond the 0.05 threshold that `--gate significant` let through. Each bound of the
    # verdict's interval is a one-sided test at alpha/m (m = 7 here: no unanswerable case), so
    # by hand: d = -1 on 7 of 51 cases, d̄ = -0.1373, s² = (7 - 51·d̄² + 1) / 50 = 0.1408,
    # t_50(1 - 0.05/7) = 2.53 (scipy.stats.t.ppf), hi = d̄ + 2.53 · 0.3752 / √51 = -0.004 < 0.
    _attribution_runs(tmp_path, 51, 34, 27)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="non-inferior")
    att = _member(c, "attribution_hit_rate")
    assert (att.verdict, att.n_changed) == ("worse", 7) and att.ci[0] < -0.05 and -0.01 < att.ci[1] < 0
    assert c.verdict.family_size == 7 and c.verdict.confidence == 1 - 2 * ALPHA / 7
    assert c.verdict.verdict == "worse" and c.gate.passed is False


def _varied_run(n_answerable: int, n_unanswerable: int) -> list[dict]:
    recs = [rec(f"q{i:03d}", rank=(None, 1, 2, 3, 1)[i % 5], attribution=i % 3 != 0, g=float(i % 6), c=float((i * 7) % 6),
                abstained=i % 11 == 0, category=("factual", "multi_hop")[i % 2]) for i in range(n_answerable)]
    recs += [rec(f"u{i:03d}", answerable=False, abstained=i % 4 != 0, g=None, c=None, tags=()) for i in range(n_unanswerable)]
    return recs


def test_a_run_compared_with_itself_is_equivalent_on_every_metric_with_enough_cases(tmp_path):
    make_run(tmp_path, "big", _varied_run(130, 70))
    c = compare_runs("big", "big", results_dir=tmp_path, resamples=R, gate="non-inferior")
    assert [m.verdict for m in c.verdict.metrics] == ["equivalent"] * len(c.verdict.metrics)
    assert {m.metric for m in c.verdict.metrics} == {"recall_any", "mrr", "attribution_hit_rate", "groundedness_avg", "correctness_avg",
                                                     "abstention_accuracy", "hallucination_rate_unanswerable",
                                                     "false_abstention_rate", "error_rate"}
    assert c.verdict.not_compared == [{"metric": "scope_miss_rate", "reason": "not computed in the new run"}]
    assert c.verdict.family_size == 8  # hallucination = 1 - abstention accuracy case by case: one test
    assert c.verdict.verdict == "equivalent" and c.gate.passed is True
    # with too few cases, "no case changed" does not show that no case would: inconclusive, with the count
    make_run(tmp_path, "small", _varied_run(12, 4))
    small = compare_runs("small", "small", results_dir=tmp_path, resamples=R, gate="non-inferior")
    recall = _member(small, "recall_any")
    assert recall.verdict == "inconclusive" and recall.n == 12 and recall.cases_needed > 12
    assert small.verdict.verdict == "inconclusive" and small.gate.passed is False


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


def test_every_format_leads_with_the_verdict(tmp_path):
    _attribution_runs(tmp_path, 200, 133, 106)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R)
    line = f"Verdict: worse — {c.verdict.summary}"
    out = io.StringIO()
    print_comparison(c, Console(file=out, width=400, color_system=None, force_terminal=False))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("compare a (a) → b (b): gate failed (threshold)") and lines[1] == line
    assert "For merges use --gate non-inferior" in out.getvalue()  # another gate decided: the advice
    md = render_markdown(c).splitlines()
    assert md[2] == f"**Verdict: worse** — {c.verdict.summary}"
    assert c.verdict.family_size == 7  # no unanswerable case: abstention is not in it
    table = md.index("#### Verdict per metric (98.57% intervals)")
    assert table < next(i for i, x in enumerate(md) if x.startswith("#### Significant changes"))
    att = next(x for x in md[table:] if x.startswith("| Attribution hit rate |"))
    lo, hi = _member(c, "attribution_hit_rate").ci
    assert att == f"| Attribution hit rate | 200 | -0.135 | [{lo:+.3f}, {hi:+.3f}] | -0.05 | worse | ±{_member(c, 'attribution_hit_rate').mde:.3f} | — |"
    body = json.loads(c.model_dump_json())
    assert list(body)[:4] == ["schema_version", "run_id_1", "run_id_2", "verdict"]
    assert body["verdict"]["verdict"] == "worse" and body["verdict"]["metrics"][2]["metric"] == "attribution_hit_rate"
    html = write_compare_report("a", "b", results_dir=tmp_path, resamples=R).read_text(encoding="utf-8")
    verdict_at = html.index('<p class="merge-verdict merge-worse"><strong>Verdict: worse</strong>')
    assert verdict_at < html.index('id="significant"') and 'id="verdict-table"' in html
    assert html.index("Verdict per metric") < html.index('id="significant"')


def test_the_non_inferior_gate_says_nothing_else_decided(tmp_path):
    _attribution_runs(tmp_path, 200, 133, 106)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R, gate="non-inferior")
    md = render_markdown(c)
    assert md.startswith("### ❌ evalkit compare: gate failed (non-inferior)\n\n**Verdict: worse**")
    assert "For merges use --gate non-inferior" not in md
    assert c.gate.regression_details[0]["metric"] == "attribution_hit_rate"  # the failing verdicts
    assert c.gate.compared[:2] == ["recall_any@5", "mrr@5"]


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
    return tmp_path


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param(["base", "same", "--gate", "non-inferior"], 0, id="equivalent-0"),
        pytest.param(["base", "drop", "--gate", "non-inferior"], 1, id="worse-1"),
        pytest.param(["base", "drop", "--gate", "non-inferior", "--margin", "attribution_hit_rate=off"], 0, id="left-out-0"),
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
        assert body["gate"]["mode"] == "non-inferior" and body["verdict"]["verdict"] in ("equivalent", "worse", "better")
