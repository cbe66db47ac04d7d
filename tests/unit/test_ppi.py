"""evalkit/metrics/ppi.py: PPI++ for a judge metric's mean (issue 42, item 2).

Against ppi-python (`pip install ppi-python`; skipped when absent), by hand, and on
simulated data with a known truth: the corrected interval covers it at its nominal rate,
the biased judge's own interval does not."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from evalkit.metrics import ppi

Z95 = NormalDist().inv_cdf(0.975)


def _biased_judge(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Human grades Y ~ Binomial(5, 0.6) (mean 3 exactly); a lenient judge: Y + 1 on 60% of
    the cases, capped at 5, plus its own noise (mean ≈ 3.5)."""
    y = rng.binomial(5, 0.6, size=size).astype(float)
    judge = np.minimum(5.0, y + rng.binomial(1, 0.6, size=size)) + rng.normal(0, 0.5, size=size)
    return y, judge


def test_fixed_lambda_by_hand():
    y, f, fu = [1.0, 3.0], [2.0, 2.0], [4.0, 2.0]
    # by hand, λ = 1: θ = mean(fu) + mean(y - f) = 3 + 0 = 3
    #   se = sqrt(var0(fu)/N + var0(y - f)/n) = sqrt(1/2 + 1/2) = 1
    out = ppi.ppi_mean_ci(y, f, fu, lam=1.0)
    assert out["estimate"] == pytest.approx(3.0) and out["se"] == pytest.approx(1.0)
    assert out["ci"] == pytest.approx([3 - Z95, 3 + Z95])
    # λ = 0 is the humans alone: mean(y) = 2, se = sd0(y)/√n = 1/√2
    out = ppi.ppi_mean_ci(y, f, fu, lam=0.0)
    assert out["estimate"] == pytest.approx(2.0) and out["se"] == pytest.approx(1 / math.sqrt(2))
    # a constant judge carries nothing: λ = 0
    assert ppi.ppi_mean_ci(y, [2.0, 2.0], [2.0], lam=None)["lambda"] == 0.0
    with pytest.raises(ValueError, match="≥ 2 graded"):
        ppi.ppi_mean_ci([1.0], [1.0], [1.0])


@pytest.mark.parametrize("seed", range(6))
def test_equals_ppi_python(seed: int):
    ppi_py = pytest.importorskip("ppi_py")
    rng = np.random.default_rng(seed)
    y, f = _biased_judge(rng, 400)
    n = [20, 50, 100, 150, 200, 300][seed]
    ours = ppi.ppi_mean_ci(y[:n], f[:n], f[n:], confidence=0.9)
    # reference: ppi_py.ppi_mean_ci (PPI++, lam=None: power-tuned, clipped) and its point estimate
    lo, hi = ppi_py.ppi_mean_ci(y[:n], f[:n], f[n:], alpha=0.1)
    assert ours["ci"] == pytest.approx([float(np.squeeze(lo)), float(np.squeeze(hi))], abs=1e-12)
    assert ours["estimate"] == pytest.approx(float(np.squeeze(ppi_py.ppi_mean_pointestimate(y[:n], f[:n], f[n:]))), abs=1e-12)
    c = ppi.classical_mean_ci(y[:n], confidence=0.9)
    assert c["ci"] == pytest.approx([float(np.squeeze(v)) for v in ppi_py.classical_mean_ci(y[:n], alpha=0.1)], abs=1e-12)


def test_covers_a_known_truth_at_its_nominal_rate_where_the_judge_mean_does_not():
    # property: 1,000 simulated runs of 1,000 cases, 100 graded at random; truth = 3 (Binomial(5, 0.6))
    rng = np.random.default_rng(42)
    truth, trials, total, graded = 3.0, 1000, 1000, 100
    ppi_hits = judge_hits = 0
    ppi_width = human_width = 0.0
    for _ in range(trials):
        y, f = _biased_judge(rng, total)
        pick = rng.permutation(total)
        lab, unl = pick[:graded], pick[graded:]
        out = ppi.ppi_mean_ci(y[lab], f[lab], f[unl])
        ppi_hits += out["ci"][0] <= truth <= out["ci"][1]
        raw = ppi.classical_mean_ci(f)
        judge_hits += raw["ci"][0] <= truth <= raw["ci"][1]
        ppi_width += out["ci"][1] - out["ci"][0]
        human = ppi.classical_mean_ci(y[lab])
        human_width += human["ci"][1] - human["ci"][0]
    assert ppi_hits / trials >= 0.93
    assert judge_hits / trials < 0.05  # the judge's own interval is narrow around its bias
    assert ppi_width < human_width  # and the judge still buys precision over the humans alone


def test_grading_plan_reaches_the_width_it_promises():
    rng = np.random.default_rng(3)
    y, f = _biased_judge(rng, 2000)
    n = 60
    now = ppi.ppi_mean_ci(y[:n], f[:n], f[n:])
    width_now = now["ci"][1] - now["ci"][0]
    plan = ppi.grading_plan(y[:n], f[:n], f[n:], width_now / 2)
    assert plan["width_now"] == pytest.approx(width_now) and plan["n_labeled"] == n
    m = plan["n_needed"]
    # by the planner's own formula: width(m) ≤ target, width(m - 1) > target
    lam, z2 = plan["lambda"], 2 * Z95
    var_f, var_r = float(np.var(lam * f)), float(np.var(y[:n] - lam * f[:n]))

    def width(k: int) -> float:
        return z2 * math.sqrt(var_f / (2000 - k) + var_r / k)

    assert width(m) <= width_now / 2 < width(m - 1) and plan["n_more"] == m - n
    # halving a width takes about four times the grades
    assert 3 * n < m < 6 * n  # about four times the grades (fewer judge-only cases left)
    # grading what is asked for does give about that width (other grades, same distribution)
    again = ppi.ppi_mean_ci(y[:m], f[:m], f[m:])
    assert again["ci"][1] - again["ci"][0] == pytest.approx(width_now / 2, rel=0.25)
    assert ppi.grading_plan(y[:n], f[:n], f[n:], 1e-6)["n_needed"] is None
    assert ppi.grading_plan(y[:n], f[:n], f[n:], 100.0)["n_more"] == 0
