"""Prediction-powered inference (PPI++) for the mean of a judge metric.

A judge scores every case; humans grade a uniform random subset. The judge's mean is biased
by whatever the judge gets wrong; the humans' mean alone is unbiased but wide. PPI
(Angelopoulos, Bates, Fannjiang, Jordan, Zrnic, Science 2023) uses the graded cases to
measure the judge's bias and the ungraded ones to cut the variance; PPI++ (Angelopoulos,
Duchi, Zrnic 2023, "PPI++: Efficient Prediction-Powered Inference") weights the judge by a
power-tuning λ chosen from the data, so the interval is never wider (asymptotically) than
the humans' alone. This is ppi-python's `ppi_mean_ci` with `lam=None` (its `_calc_lam_glm`,
clipped to [0, 1]), which tests/unit/test_ppi.py holds it equal to. EVAL.md ("Corrected
means") states the same formulas.

Symbols: Y_i human value and Ŷ_i judge score on the n graded cases; Ŷ'_j judge score on the
N ungraded cases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = ["classical_mean_ci", "corrected_difference", "grading_plan", "power_lambda", "ppi_mean_ci"]


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def power_lambda(y: np.ndarray, yhat: np.ndarray, yhat_unlabeled: np.ndarray) -> float:
    """PPI++'s power-tuning λ for a mean:
    λ = Cov_n(Y, Ŷ) / ((1 + n/N) · Var(Ŷ ∪ Ŷ')), clipped to [0, 1], with Cov_n the
    covariance over the graded cases (divided by n) and Var the sample variance (ddof 1)
    of every judge score. 0 when the judge gave one score to everything (it carries no
    information then)."""
    n, big_n = len(y), len(yhat_unlabeled)
    var = float(np.var(np.concatenate([yhat, yhat_unlabeled]), ddof=1))
    if var == 0 or not math.isfinite(var):
        return 0.0
    cov = float(np.mean((y - y.mean()) * (yhat - yhat.mean())))
    return float(np.clip(cov / ((1 + n / big_n) * var), 0.0, 1.0))


def ppi_mean_ci(
    y: Sequence[float], yhat: Sequence[float], yhat_unlabeled: Sequence[float], *,
    confidence: float = 0.95, lam: float | None = None,
) -> dict[str, Any]:
    """The PPI++ estimate of the mean human value and its normal confidence interval.

    θ = λ · mean(Ŷ') + mean(Y − λŶ)
    se = sqrt(Var₀(λŶ') / N + Var₀(Y − λŶ) / n)   (Var₀: population variance, ddof 0)
    interval = θ ± z · se, z the normal quantile of (1 + confidence) / 2.

    Args:
        y, yhat: human value and judge score of each graded case (same order).
        yhat_unlabeled: judge scores of the ungraded cases.
        confidence: the interval's nominal coverage.
        lam: a fixed λ (1: plain PPI; 0: the humans alone); None: `power_lambda`.

    Returns:
        {estimate, ci: [lo, hi], se, lambda, n_labeled, n_unlabeled}.

    Raises:
        ValueError: fewer than 2 graded or 1 ungraded case, or y and yhat differ in length.
    """
    y_, f, fu = (np.asarray(v, dtype=float) for v in (y, yhat, yhat_unlabeled))
    if len(y_) != len(f):
        raise ValueError(f"y and yhat differ in length: {len(y_)} vs {len(f)}")
    if len(y_) < 2 or len(fu) < 1:
        raise ValueError(f"PPI needs ≥ 2 graded and ≥ 1 ungraded case, got {len(y_)} and {len(fu)}")
    lam = power_lambda(y_, f, fu) if lam is None else float(lam)
    estimate = lam * float(fu.mean()) + float((y_ - lam * f).mean())
    se = math.sqrt(float(np.var(lam * fu)) / len(fu) + float(np.var(y_ - lam * f)) / len(y_))
    half = _z(confidence) * se
    return {"estimate": estimate, "ci": [estimate - half, estimate + half], "se": se, "lambda": lam,
            "n_labeled": len(y_), "n_unlabeled": len(fu)}


def classical_mean_ci(values: Sequence[float], *, confidence: float = 0.95) -> dict[str, Any] | None:
    """A mean and its normal interval, mean ± z · sd₀ / √n (sd₀ with ddof 0, as ppi-python's
    classical interval): the judge's raw mean over every case, or the humans' over theirs.
    None when there is no value."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return None
    mean = float(v.mean())
    se = float(v.std()) / math.sqrt(len(v))
    half = _z(confidence) * se
    return {"mean": mean, "ci": [mean - half, mean + half], "se": se, "n": len(v)}


def grading_plan(
    y: Sequence[float], yhat: Sequence[float], yhat_unlabeled: Sequence[float], width: float, *,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """How many graded cases would bring the PPI++ interval to `width` (hi − lo).

    The variances measured now are taken as what more grades will show: with λ and
    σ_f² = Var₀(λŶ ∪ λŶ'), σ_r² = Var₀(Y − λŶ) fixed, grading m of the T = n + N cases gives
    width(m) = 2z · sqrt(σ_f² / (T − m) + σ_r² / m). `n_needed` is the least m ≥ n with
    width(m) ≤ width, grading every case being the humans' mean alone (width 2z·σ_r/√T with
    λ = 0, σ_r² = Var₀(Y)); None when even that is wider.

    Returns:
        {width, width_now, n_labeled, n_needed, n_more, lambda}.
    """
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    now = ppi_mean_ci(y, yhat, yhat_unlabeled, confidence=confidence)
    y_, f, fu = (np.asarray(v, dtype=float) for v in (y, yhat, yhat_unlabeled))
    lam, n, total = now["lambda"], len(y_), len(y_) + len(fu)
    z2 = 2 * _z(confidence)
    var_f = float(np.var(lam * np.concatenate([f, fu])))
    var_r = float(np.var(y_ - lam * f))
    m = np.arange(n, total, dtype=float)
    widths = z2 * np.sqrt(var_f / (total - m) + var_r / m)
    ok = np.nonzero(widths <= width)[0]
    if len(ok):
        needed: int | None = int(m[ok[0]])
    elif z2 * math.sqrt(float(np.var(y_)) / total) <= width:
        needed = total
    else:
        needed = None
    return {"width": width, "width_now": now["ci"][1] - now["ci"][0], "n_labeled": n, "n_needed": needed,
            "n_more": None if needed is None else needed - n, "lambda": lam}


def corrected_difference(a: Any, b: Any) -> tuple[float, float] | None:
    """(θ_b − θ_a, √(se_a² + se_b²)) of two runs' corrected means (`judge_ppi.<kind>` blocks,
    {estimate, se, ...}); None unless both hold a number for each.

    The two estimates rest on different human grades (of different answers), so their errors
    are taken as independent. Both use the judge on the same cases, whose errors are usually
    positively correlated between the runs; leaving that covariance out overstates the
    variance, so the interval errs wide, never narrow, on that account.
    """
    def part(x: Any) -> tuple[float, float] | None:
        if not isinstance(x, dict):
            return None
        est, se = x.get("estimate"), x.get("se")
        ok = isinstance(est, int | float) and isinstance(se, int | float) and math.isfinite(est) and math.isfinite(se)
        return (float(est), float(se)) if ok else None

    pa, pb = part(a), part(b)
    if pa is None or pb is None:
        return None
    return pb[0] - pa[0], math.sqrt(pa[1] ** 2 + pb[1] ** 2)
