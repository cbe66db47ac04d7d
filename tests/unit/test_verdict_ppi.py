"""The merge verdict on judge metrics judges the runs' PPI++-corrected means when both runs
have human grades, and says so (issue 42, item 2)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import orjson
import pytest

from evalkit.compare import compare_runs
from evalkit.gate.verdict import Member, build_verdict
from evalkit.metrics.ppi import corrected_difference
from tests.unit.test_compare import make_run, rec


def _member(corrected=None, diff=(0.0, 0.0, 0.0)) -> Member:
    return Member(metric="groundedness_avg", k=None, direction="higher_is_better", margin=0.25, source="registry",
                  diff=np.array(diff), test=None, family="groundedness_avg", corrected=corrected)


def test_corrected_difference_adds_the_variances():
    # by hand: (3.0 - 3.5, sqrt(0.3^2 + 0.4^2)) = (-0.5, 0.5)
    assert corrected_difference({"estimate": 3.5, "se": 0.3}, {"estimate": 3.0, "se": 0.4}) == pytest.approx((-0.5, 0.5))
    assert corrected_difference(None, {"estimate": 3.0, "se": 0.4}) is None
    assert corrected_difference({"estimate": None, "se": 0.3}, {"estimate": 3.0, "se": 0.4}) is None


@pytest.mark.parametrize(("delta", "se", "label"), [(-1.0, 0.1, "worse"), (0.0, 0.05, "equivalent"), (0.5, 0.1, "better"),
                                                    (-0.1, 0.2, "inconclusive")])
def test_the_label_comes_from_the_corrected_interval(delta: float, se: float, label: str):
    v = build_verdict([_member((delta, se))], [], alpha=0.05).metrics[0]
    # by hand: one test in the family, confidence 1 - 2·0.05 = 0.9, z = 1.645
    z = NormalDist().inv_cdf(0.95)
    assert v.ci == pytest.approx([delta - z * se, delta + z * se]) and v.delta == delta
    assert v.verdict == label and v.interval == "ppi++" and "corrected by human grades, PPI++" in v.reason
    # the judge's own paired scores did not move at all: without the correction, identical
    assert build_verdict([_member()], [], alpha=0.05).metrics[0].verdict == "identical"


def _with_ppi(folder, est: float, se: float) -> None:
    path = folder / "metrics.json"
    m = orjson.loads(path.read_bytes())
    block = {"estimate": est, "se": se, "ci": [est - 1.96 * se, est + 1.96 * se], "lambda": 0.5}
    m["aggregate_metrics"]["judge_ppi"] = {"method": "ppi++", "confidence": 0.95, "groundedness": block, "correctness": None}
    path.write_bytes(orjson.dumps(m))


def test_compare_judges_groundedness_on_the_corrected_means_when_both_runs_have_them(tmp_path):
    # The judge gives both runs the same scores (its paired differences are all 0), but the
    # humans' grades say run b's answers are a point less grounded.
    records = [rec(f"q{i}", g=4.0, c=4.0) for i in range(40)]
    a, b = make_run(tmp_path, "a", records), make_run(tmp_path, "b", records)

    def groundedness(c):
        return next(m for m in c.verdict.metrics if m.metric == "groundedness_avg")

    plain = groundedness(compare_runs("a", "b", results_dir=tmp_path, resamples=200))
    assert (plain.verdict, plain.interval) == ("identical", "paired")
    _with_ppi(a, 4.0, 0.1)
    one = groundedness(compare_runs("a", "b", results_dir=tmp_path, resamples=200))
    assert one.interval == "paired"  # only one run has grades: nothing to compare them with
    _with_ppi(b, 3.0, 0.1)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=200)
    g = groundedness(c)
    assert g.interval == "ppi++" and g.verdict == "worse" and g.delta == pytest.approx(-1.0)
    half = NormalDist().inv_cdf((1 + c.verdict.confidence) / 2) * math.sqrt(0.1**2 + 0.1**2)
    assert g.ci == pytest.approx([-1.0 - half, -1.0 + half])
    assert c.verdict.verdict == "worse" and "PPI++" in c.verdict.summary
    # correctness has no corrected mean in either run: still the paired judge scores
    assert next(m for m in c.verdict.metrics if m.metric == "correctness_avg").interval == "paired"


def test_every_format_marks_the_corrected_row(tmp_path):
    from evalkit.report.compare import render_markdown

    records = [rec(f"q{i}", g=4.0, c=4.0) for i in range(40)]
    a, b = make_run(tmp_path, "a", records), make_run(tmp_path, "b", records)
    _with_ppi(a, 4.0, 0.3)
    _with_ppi(b, 3.9, 0.3)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=200)
    row = next(line for line in render_markdown(c).splitlines() if line.startswith("| Groundedness") and "PPI++" in line)
    assert "inconclusive" in row and "more grades" in row
    assert '"interval":"ppi++"' in c.model_dump_json()


@pytest.mark.parametrize("samples", [1, 4])
def test_the_paired_interval_carries_the_judges_own_noise(samples: int):
    # issue 42 item 3 (property): two runs whose answers are equally good, a judge that scores
    # each answer with noise sd 1.5 per sample, a case's score the mean of `samples` samples.
    # The verdict's paired interval of b - a over 60 cases covers the true difference 0 at
    # least at its nominal 95%: the per-case differences carry both judges' sampling noise
    # (Var d_i = Var(true) + 2 * 1.5² / samples), and s² measures it.
    from evalkit.gate.verdict import paired_interval

    rng = np.random.default_rng(7)
    hits, widths = 0, []
    for _ in range(1000):
        quality = rng.uniform(1, 4, size=60)
        a = quality + rng.normal(0, 1.5, size=(samples, 60)).mean(axis=0)
        b = quality + rng.normal(0, 1.5, size=(samples, 60)).mean(axis=0)
        iv = paired_interval(b - a, scale=5.0, confidence=0.95)
        hits += iv.lo <= 0 <= iv.hi
        widths.append(iv.hi - iv.lo)
    assert hits / 1000 >= 0.95
    # by hand: sd of d_i = 1.5 * sqrt(2 / samples); the t half-width near 2.0 * sd / sqrt(60) (plus the scale guard)
    sd = 1.5 * math.sqrt(2 / samples)
    assert np.mean(widths) == pytest.approx(2 * 2.0 * math.sqrt(sd**2 + 25 / 59) / math.sqrt(60), rel=0.05)


def test_compare_says_when_the_judge_was_sampled(tmp_path):
    records = [rec(f"q{i}", g=4.0, c=4.0) for i in range(10)]
    a, _ = make_run(tmp_path, "a", records), make_run(tmp_path, "b", records)
    assert not any("--judge-samples" in n for n in compare_runs("a", "b", results_dir=tmp_path, resamples=200).notes)
    path = a / "metrics.json"
    m = orjson.loads(path.read_bytes())
    m["aggregate_metrics"]["judge"] = {"trials": {"n_trials": 3}}
    path.write_bytes(orjson.dumps(m))
    notes = compare_runs("a", "b", results_dir=tmp_path, resamples=200).notes
    assert any("3 time(s) in run a, 1 in run b (--judge-samples)" in n for n in notes)
