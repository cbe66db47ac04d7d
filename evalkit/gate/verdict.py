"""The merge verdict (issues 30 and 36): identical, better, equivalent, non-inferior, worse or
inconclusive, per metric and for the merge, from a paired interval against a margin (EVAL.md,
"The verdict").

The verdict family is every metric both runs computed case by case (at the gate's K), and any
metric given a `--margin`; the gated set (the registry's `verdict_gated`, and every `--margin`
metric) must be settled for a pass. For each, over the n cases both runs scored,
d_i = b_i − a_i and

    d̄ = Σ d_i / n,   s² = (Σ (d_i − d̄)² + R²) / (n − 1),   [lo, hi] = d̄ ∓ t_{n−1}(1 − α/m) · s / √n

clipped to [−R, R]. R is the metric's scale (1, or 5 for a 0-5 judge mean): the variance
counts one more case that changed by the whole scale (Agresti and Min's (2005) half case each
way), so a metric that changed on a few cases is not "equivalent" on three. m is the number
of metrics with an interval on which some case changed, a mirrored pair once: a metric that
changed on no case has d̄ = 0 exactly, cannot be called better or worse, and is `identical`
(Tarone 1990: it spends nothing). Each bound is a one-sided test at level α/m (the interval is
two-sided at 1 − 2α/m, as Schuirmann's two one-sided tests read a 90% interval at α = 0.05):
by Bonferroni, the chance that any metric is wrongly called worse is at most α, and likewise
better. Nothing is drawn: the verdict does not depend on `--seed` or `--resamples`. Labels,
read in the better direction (a lower-is-better metric mirrored), with margin δ > 0:

    identical     no paired case changed
    better        lo > 0                       a proven improvement
    worse         hi < 0 and lo ≤ −δ           a proven worsening not shown within the margin
    equivalent    −δ < lo and hi < δ           within the margin either way
    non-inferior  lo > −δ (otherwise)          no worse than the margin; a gain not settled
    inconclusive  otherwise (lo ≤ −δ, hi ≥ 0)

The merge is worse if any metric is; else inconclusive if a gated one is; else identical if
all are; else better if any is; else equivalent if every gated one is; else non-inferior.
`evalkit.gate.decision` turns it into the decision: fail (exit 1) on worse, not enough
evidence (exit 4) on inconclusive, else pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from evalkit.errors import InputError, Problem
from evalkit.gate.models import MergeVerdict, MetricVerdict
from evalkit.metrics.keys import (
    HEADLINE_AT_K,
    canonical_key,
    metric_key,
    parse_metric_key,
)
from evalkit.metrics.registry import METRICS, by_key, label_of

__all__ = [
    "DEFAULT_POWER",
    "PASSING",
    "Interval",
    "Member",
    "build_verdict",
    "cases_to_settle",
    "classify",
    "default_margins",
    "format_change",
    "merge_label",
    "minimum_detectable",
    "paired_interval",
    "parse_margins",
    "resolve_margins",
    "t_quantile",
    "unsettled_probability",
]

Label = Literal["identical", "better", "equivalent", "non-inferior", "worse", "inconclusive"]
DEFAULT_POWER = 0.8
# What --gate non-inferior lets through: every metric's lower bound above −margin.
PASSING: frozenset[str] = frozenset({"identical", "better", "equivalent", "non-inferior"})
# Beyond this, "more cases would settle it" is no advice: the change sits on the margin.
_MAX_CASES = 1_000_000
_AT_K_OF = {at_k: key for key, at_k in HEADLINE_AT_K.items()}


# ---------------------------------------------------------------- Student's t, without scipy


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_upper(x: float, df: float) -> float:
    """P(T > x) for x ≥ 0, T Student's t with df degrees of freedom."""
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))


def _t_cornish_fisher(z: float, df: float) -> float:
    """The t quantile from the normal one, to 1/df⁴ (Abramowitz and Stegun 26.7.5)."""
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@lru_cache(maxsize=65536)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (scipy.stats.t.ppf).

    numpy and the standard library have no t distribution, and scipy is not a runtime
    dependency. Above 1,000 degrees of freedom the Cornish-Fisher expansion (error of order
    df⁻⁵); below, Newton steps on the upper tail P(T > x) = ½ I_{df/(df+x²)}(df/2, ½), kept
    inside a bracket by bisection.
    """
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p!r}, df={df!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    z = NormalDist().inv_cdf(p)
    if df > 1000:
        return _t_cornish_fisher(z, df)
    tail = 1.0 - p
    lo, hi = 0.0, max(1.0, z)
    while _t_upper(hi, df) > tail:
        lo, hi = hi, 2.0 * hi
    log_c = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    x = min(max(_t_cornish_fisher(z, df), lo), hi)
    for _ in range(100):
        excess = _t_upper(x, df) - tail  # > 0: x is too small
        if excess > 0:
            lo = x
        else:
            hi = x
        density = math.exp(log_c - (df + 1.0) / 2.0 * math.log1p(x * x / df))
        step = x + excess / density if density > 0 else 0.5 * (lo + hi)
        nxt = step if lo < step < hi else 0.5 * (lo + hi)
        if abs(nxt - x) <= 1e-14 * max(1.0, abs(x)) or hi - lo <= 1e-14 * hi:
            return nxt
        x = nxt
    return x


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


# ---------------------------------------------------------------- one metric


@dataclass(frozen=True)
class Interval:
    """The verdict's interval of the mean paired difference b − a (see the module docstring)."""

    n: int
    mean: float | None
    sd: float | None
    lo: float | None
    hi: float | None
    confidence: float
    variance: float | None = None  # Σ (d_i − d̄)² / (n − 1): the observed part of sd², without the guard
    per_cluster: float | None = None  # m̄ = n / G when the unit is a cluster of several cases (a conversation)


def paired_interval(diff: Sequence[float] | np.ndarray, *, scale: float, confidence: float,
                    clusters: Sequence[Any] | np.ndarray | None = None) -> Interval:
    """d̄ ∓ t_{n−1}((1 + c)/2) · s/√n, with s² = (Σ (d_i − d̄)² + scale²) / (n − 1), clipped to
    [−scale, scale] (no label changes: every margin is at most the scale).

    With `clusters` (one label per difference; the turns of one conversation share one), the
    cluster-robust form over the G clusters: S_g a cluster's sum of differences and n_g its
    cases, u_g = S_g − n_g·d̄, Var(d̄) = G/(G − 1) · Σ u_g² / n², and
    d̄ ∓ t_{G−1}((1 + c)/2) · √(Var(d̄) + scale² / (n (G − 1))). With one case per cluster it is
    the interval above. `variance` is then n·Var(d̄): the per-case variance of the same
    standard error (the design effect folded in), which the power figures read.

    Args:
        diff: the paired differences d_i = b_i − a_i over the cases both runs scored.
        scale: R, the metric's largest value (1 for rates and @K metrics, 5 for a judge mean).
        confidence: c, e.g. 1 − 2α/m for a family of m (each bound one-sided at α/m).
        clusters: None, or a label per difference.

    Returns:
        Interval; n = 0: every field None; n = 1 (or one cluster): the mean only (no interval).
    """
    d = np.asarray(diff, dtype=np.float64)
    n = int(d.size)
    if n == 0:
        return Interval(0, None, None, None, None, confidence)
    mean = math.fsum(d.tolist()) / n + 0.0
    if n < 2:
        return Interval(n, mean, None, None, None, confidence)
    if clusters is not None:
        _, groups = np.unique(np.asarray(clusters), return_inverse=True)
        g = int(groups.max()) + 1 if groups.size else 0
        if g < n:
            if g < 2:
                return Interval(n, mean, None, None, None, confidence)
            u = np.bincount(groups, weights=d) - np.bincount(groups) * mean
            var_mean = g / (g - 1) * math.fsum((u * u).tolist()) / (n * n)
            se = math.sqrt(var_mean + scale * scale / (n * (g - 1)))
            half = t_quantile((1.0 + confidence) / 2.0, g - 1) * se
            return Interval(n, mean, se * math.sqrt(n), max(mean - half, -scale) + 0.0, min(mean + half, scale) + 0.0,
                            confidence, n * var_mean, n / g)
    variance = math.fsum(((d - mean) ** 2).tolist()) / (n - 1)
    sd = math.sqrt(variance + scale * scale / (n - 1))
    half = t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(n, mean, sd, max(mean - half, -scale) + 0.0, min(mean + half, scale) + 0.0, confidence, variance)


def _good(lo: float, hi: float, direction: str) -> tuple[float, float]:
    """The interval read in the better direction (a lower-is-better metric mirrored)."""
    return (lo, hi) if direction == "higher_is_better" else (-hi + 0.0, -lo + 0.0)


def classify(lo: float, hi: float, margin: float, direction: str) -> Label:
    """The label of one interval [lo, hi] of b − a against a margin δ > 0 (module docstring)."""
    glo, ghi = _good(lo, hi, direction)
    if glo > 0.0:
        return "better"
    if ghi < 0.0 and glo <= -margin:
        return "worse"
    if glo > -margin and ghi < margin:
        return "equivalent"
    if glo > -margin:
        return "non-inferior"
    return "inconclusive"


def _df(n: float, cluster_size: float) -> float:
    """Degrees of freedom at n cases: n − 1, or G − 1 for G = n / m̄ clusters of m̄ cases on
    average (paired_interval's cluster-robust form; never below 1)."""
    return max(n / cluster_size - 1.0, 1.0)


def _half_width(variance: float, scale: float, n: int, confidence: float, cluster_size: float = 1.0) -> float:
    """The interval's half-width at n cases: t_{df}((1 + c)/2) · s/√n, s² = variance + R²/df (df: `_df`)."""
    df = _df(n, cluster_size)
    return t_quantile((1.0 + confidence) / 2.0, df) * math.sqrt(variance + scale * scale / df) / math.sqrt(n)


def minimum_detectable(
    variance: float, n: int, confidence: float, scale: float, power: float = DEFAULT_POWER, cluster_size: float = 1.0,
) -> float | None:
    """The smallest true change Δ that the interval shows as a change (excludes 0 on its side)
    with probability `power`, counting the spread the change itself adds.

    A change of Δ made of cases that each move by the whole scale R (a hit lost, a judge
    grade from 5 to 0) moves a share Δ/R of the cases, which adds Δ·(R − Δ) to the variance of
    the differences: the most spread a one-way change of that size can have. Δ solves

        Δ = (t_{n−1}((1 + c)/2) + z_power) · √(v + Δ·(R − Δ) + R²/(n − 1)) / √n

    (v the observed variance; the left side grows faster than the right, so bisection finds
    the one root). Using v alone, the spread of a system that barely changed, promised power
    it did not have (issue 36: 3-20% at the printed value). None when even Δ = R would not be
    shown (no change on the metric's scale could be).

    With clusters of m̄ = `cluster_size` cases (a conversation's turns), v is paired_interval's
    n·Var(d̄) (the design effect folded in) and n − 1 becomes G − 1 = n/m̄ − 1, in the t and in
    the guard: the same se² = Var(d̄) + R²/(n (G − 1)) the interval uses, so the power is that of
    G conversations, not of n independent cases. The change's own spread is then the most a
    change of Δ can have with clusters, whole conversations moving together: Δ·(R − Δ)·m̄.
    """
    if n < 2 or n / cluster_size < 2:
        return None
    df = _df(n, cluster_size)
    factor = (t_quantile((1.0 + confidence) / 2.0, df) + _z(power)) / math.sqrt(n)

    def shown(delta: float) -> bool:
        return delta >= factor * math.sqrt(variance + delta * (scale - delta) * cluster_size + scale * scale / df)

    if not shown(scale):
        return None
    lo, hi = 0.0, scale
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if shown(mid):
            hi = mid
        else:
            lo = mid
    return hi


def unsettled_probability(
    good_mean: float, variance: float, scale: float, margin: float, total: int, confidence: float,
    cluster_size: float = 1.0,
) -> float:
    """P(the interval at `total` cases is still inconclusive: lo ≤ −δ and hi ≥ 0), read in the
    better direction, if the true change were `good_mean` and the variance `variance`.

    With se = s/√N and h = t · se, the mean lands in [−h, h − δ] exactly when lo ≤ −δ and
    hi ≥ 0; under the normal approximation of the mean that is Φ((h − δ − μ)/se) − Φ((−h − μ)/se).
    Both ways out count: shown no worse than the margin, or shown worse. With clusters of
    m̄ = `cluster_size` cases, df = N/m̄ − 1 (more cases come as more conversations of that size).
    """
    df = _df(total, cluster_size)
    se = math.sqrt(variance + scale * scale / df) / math.sqrt(total)
    h = t_quantile((1.0 + confidence) / 2.0, df) * se
    if h - margin < -h:
        return 0.0
    normal = NormalDist(good_mean, se)
    return max(normal.cdf(h - margin) - normal.cdf(-h), 0.0)


def cases_to_settle(
    good_mean: float, variance: float, scale: float, margin: float, n: int, confidence: float,
    power: float = DEFAULT_POWER, cluster_size: float = 1.0,
) -> int | None:
    """Paired cases that would settle an inconclusive verdict, either way, with probability
    `power`, if the true change were the observed one and the observed variance held.

    Settled means shown no worse than the margin (lo > −δ) or shown worse (hi < 0): N is the
    smallest count, at least n + 1, with `unsettled_probability` ≤ 1 − power. The variance at N
    is v + R²/(N − 1) (the guard shrinks with N). Since the inconclusive region [−h, h − δ] is
    empty once 2h < δ, N is always finite; None only beyond 1,000,000 cases.
    """
    def settles(total: int) -> bool:
        return unsettled_probability(good_mean, variance, scale, margin, total, confidence, cluster_size) <= 1.0 - power

    lo, hi = n + 1, n + 1
    while not settles(hi):  # doubling, then bisection: the unsettled share falls as N grows
        if hi >= _MAX_CASES:
            return None
        lo, hi = hi + 1, min(2 * hi, _MAX_CASES)
    while lo < hi:
        mid = (lo + hi) // 2
        if settles(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def merge_label(labels: Sequence[str], gated: Sequence[bool] | None = None) -> Label | None:
    """The merge: worse if any metric is; else inconclusive if a gated metric is (every metric
    is gated when `gated` is None, or when none is); else identical if every metric is; else
    better if any is; else equivalent if every gated metric is (or identical); else
    non-inferior. None without a metric."""
    if not labels:
        return None
    flags = [True] * len(labels) if gated is None or not any(gated) else list(gated)
    if "worse" in labels:
        return "worse"
    if any(label == "inconclusive" and g for label, g in zip(labels, flags, strict=True)):
        return "inconclusive"
    if all(label == "identical" for label in labels):
        return "identical"
    if "better" in labels:
        return "better"
    settled = [label for label, g in zip(labels, flags, strict=True) if g]
    return "equivalent" if all(x in ("equivalent", "identical") for x in settled) else "non-inferior"


# ---------------------------------------------------------------- margins


def _scale(name: str) -> float:
    entry = by_key(name) or by_key(_AT_K_OF.get(name, ""))
    return float(entry.scale) if entry is not None else 1.0


def default_margins() -> dict[str, float]:
    """{row metric name: margin} from the registry (an @K metric by its @K name, `recall_any`)."""
    return {(m.at_k or m.key): float(m.margin) for m in METRICS if m.margin is not None}


def parse_margins(entries: Sequence[str]) -> dict[str, float | None]:
    """`--margin NAME=VALUE` (repeatable; later wins) -> {NAME: VALUE}; VALUE a number, `N%`, or
    `off` (None: leave the metric out of the verdict).

    Raises:
        InputError: an entry without `=` or a value that is not a number, all listed.
    """
    out: dict[str, float | None] = {}
    problems = []
    for entry in entries:
        name, sep, raw = str(entry).partition("=")
        if not sep or not name.strip():
            problems.append(Problem(f"expected NAME=VALUE (e.g. recall_frac@5=0.03), got {entry!r}", field="--margin"))
            continue
        text = raw.strip()
        if text.lower() == "off":
            out[name.strip()] = None
            continue
        try:
            value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            problems.append(Problem(f"{name.strip()}: not a number: {raw.strip()!r}", field="--margin"))
            continue
        out[name.strip()] = value
    if problems:
        raise InputError(problems)
    return out


def resolve_margins(
    given: Mapping[str, float | None], *, ks: Sequence[int], gate_k: int | None, testable: set[str], at_k: set[str]
) -> dict[tuple[str, int | None], tuple[float | None, Literal["registry", "--margin"]]]:
    """The verdict's metrics: {(row metric, K or None): (margin, source)}; margin None: left
    out by `--margin NAME=off`.

    The registry's margins (an @K metric at the gate's K), then each `given` name: ours or
    ir_measures' (`recall_frac@5`, `R@5`), a headline key (`recall_at_k_avg`: its metric at the
    gate's K), or an @K metric without K (at the gate's K). A given margin replaces the
    registry's for the same metric and K, or adds the metric to the verdict.

    Args:
        given: {name: margin} (`parse_margins`, or a library caller's dict).
        ks: the K both runs measured; gate_k: the gate's K (None when they share none).
        testable: row metric names that have a paired test; at_k: the @K metric names.

    Raises:
        InputError: every unknown name, a metric without per-case values, a K not compared,
            a value outside (0, scale].
    """
    out: dict[tuple[str, int | None], tuple[float | None, Literal["registry", "--margin"]]] = {}
    for name, margin in default_margins().items():
        if name in at_k:
            if gate_k is not None:
                out[(name, gate_k)] = (margin, "registry")
        else:
            out[(name, None)] = (margin, "registry")
    problems = []
    for given_name, value in given.items():
        try:
            name, k = parse_metric_key(canonical_key(str(given_name)))
        except ValueError:
            name, k = str(given_name), None
        if k is None and name in HEADLINE_AT_K:
            name = HEADLINE_AT_K[name]
        if name in at_k and k is None:
            k = gate_k
        if name not in testable:
            names = sorted(testable)
            problems.append(Problem(f"{given_name!r} has no per-case values to pair, so no margin (one of: "
                                    f"{', '.join(n + '@K' if n in at_k else n for n in names)})", field="--margin"))
            continue
        if name in at_k and k is None:
            problems.append(Problem(f"{given_name!r}: the runs share no K; name one (e.g. {name}@5)", field="--margin"))
            continue
        if name not in at_k and k is not None:
            problems.append(Problem(f"{given_name!r}: {name} has no K", field="--margin"))
            continue
        if k is not None and k not in ks:
            problems.append(Problem(f"{given_name!r}: K = {k} is not compared (the runs share K = "
                                    f"{', '.join(map(str, ks)) or 'none'})", field="--margin"))
            continue
        scale = _scale(name)
        if value is None:
            out[(name, k)] = (None, "--margin")
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < float(value) <= scale:
            problems.append(Problem(f"{metric_key(name, k)}: the margin must be in (0, {scale:g}], got {value!r}",
                                    field="--margin"))
            continue
        out[(name, k)] = (float(value), "--margin")
    if problems:
        raise InputError(problems)
    return out


# ---------------------------------------------------------------- the family


@dataclass(frozen=True)
class Member:
    """One metric of the verdict family, with its paired differences over the cases both runs scored."""

    metric: str
    k: int | None
    direction: str
    margin: float
    source: Literal["registry", "--margin"]
    diff: np.ndarray
    test: str | None
    family: str  # members with the same family key are one test (hallucination = 1 − abstention accuracy)
    gated: bool = True  # must be shown no worse than its margin for the merge to pass
    clusters: np.ndarray | None = None  # per difference, its conversation (paired_interval), or None
    # (delta, se) of the difference of both runs' PPI++-corrected means (judge metrics whose
    # runs both have human grades: metrics.ppi.corrected_difference); it replaces the paired
    # interval of the judge's own scores, which is about the judge, not about the humans.
    corrected: tuple[float, float] | None = None
    # A project's own metric (`metrics.custom`) carries its scale; the registry's are looked up.
    scale: float | None = None


def _more(more: int, conversations: int | None) -> str:
    return f"{more:,} more paired cases" + ("" if conversations is None else f" (about {conversations:,} conversations, "
                                                                            "a single question counting as one)")


def _reason(label: str, direction: str, margin: float, ghi: float | None, more: int | None, n: int,
            conversations: int | None = None) -> str:
    """One sentence: why this label, in the metric's own direction."""
    higher = direction == "higher_is_better"
    bad, good = ("below", "above") if higher else ("above", "below")
    bound, good_bound = (f"-{margin:g}", f"+{margin:g}") if higher else (f"+{margin:g}", f"-{margin:g}")
    if n == 0:
        return "not settled: no case was scored by both runs"
    if label == "identical":
        return f"no paired case changed (n = {n:,})"
    if n < 2:
        return "not settled: one paired case gives no interval"
    if label == "better":
        return f"a proven improvement: the interval lies {good} 0"
    if label == "worse" and ghi is not None and ghi < -margin:
        return f"worse beyond the margin: the interval lies {bad} {bound}"
    if label == "worse":
        return f"a proven worsening that may exceed the margin: the interval lies {bad} 0 and reaches past {bound}"
    if label == "equivalent":
        return f"within the margin: the interval lies inside ±{margin:g}"
    if label == "non-inferior":
        return f"no worse than the margin: the interval stays {good} {bound} (an improvement beyond {good_bound} is not ruled out)"
    if more is None:
        return f"not settled: the interval reaches past {bound} and past 0, and over a million cases would not settle it"
    return f"not settled: the interval reaches past {bound} and past 0; about {_more(more, conversations)} would settle it either way"


def _too_few_reason(scale: float, n: int, margin: float, floor: float, more: int | None,
                    conversations: int | None = None) -> str:
    """Issue 36: a margin finer than this many cases can show, said plainly: even a metric on
    which no case changed would have an interval of ±floor here."""
    unit = "cases" if conversations is None else (f"cases (about {conversations:,} conversations, a single question "
                                                  "counting as one)")
    add = f"add about {more:,} {unit} of this kind" if more is not None else "add cases of this kind"
    return (f"one case moves it by {scale / n:.3g} and even an unchanged metric's interval is ±{floor:.3g} at n = {n:,}: "
            f"this set cannot judge a {margin:g} margin; {add}")


def _corrected_verdict(m: Member, confidence: float) -> MetricVerdict:
    """The label from the corrected interval delta ∓ z_{(1+c)/2} · se (PPI++ is normal in the
    limit), clipped to the scale; the paired-cases figures (mde, cases to settle) do not apply."""
    scale = m.scale if m.scale is not None else _scale(m.metric)
    delta, se = m.corrected  # type: ignore[misc]
    half = _z((1.0 + confidence) / 2.0) * se
    lo, hi = max(delta - half, -scale) + 0.0, min(delta + half, scale) + 0.0
    label = classify(lo, hi, m.margin, m.direction)
    if label == "inconclusive":
        bound = f"-{m.margin:g}" if m.direction == "higher_is_better" else f"+{m.margin:g}"
        reason = (f"not settled: the interval reaches past {bound} and past 0; more human grades would narrow it "
                  "(label --grade-answers --plan-width)")
    else:
        reason = _reason(label, m.direction, m.margin, _good(lo, hi, m.direction)[1], None, 2)
    return MetricVerdict(
        metric=m.metric, k=m.k, label=label_of(m.metric, m.k), direction=m.direction,  # type: ignore[arg-type]
        margin=m.margin, margin_source=m.source, n=int(m.diff.size), n_changed=int(np.count_nonzero(m.diff)),
        delta=delta, ci=[lo, hi], sd=None, verdict=label, gated=m.gated, judgeable=True, mde=None, cases_needed=None,
        more_cases=None, test=m.test, interval="ppi++",
        reason=reason + " (corrected by human grades, PPI++: both runs have them)",
    )


def _metric_verdict(m: Member, confidence: float, power: float) -> MetricVerdict:
    if m.corrected is not None:
        return _corrected_verdict(m, confidence)
    scale = m.scale if m.scale is not None else _scale(m.metric)
    iv = paired_interval(m.diff, scale=scale, confidence=confidence, clusters=m.clusters)
    # The power figures read the interval's own unit: with conversations, G − 1 degrees of
    # freedom and the design effect, and more cases come as more conversations of m̄ turns.
    per = iv.per_cluster
    m_bar = per or 1.0
    changed = int(np.count_nonzero(m.diff))
    label: Label = "inconclusive"
    mde = needed = ghi = None
    judgeable = True
    if iv.n and not changed:
        label = "identical"
    if iv.lo is not None and iv.hi is not None and iv.sd is not None and iv.mean is not None:
        if label != "identical":
            label = classify(iv.lo, iv.hi, m.margin, m.direction)
        ghi = _good(iv.lo, iv.hi, m.direction)[1]
        mde = minimum_detectable(iv.variance or 0.0, iv.n, confidence, scale, power, m_bar)
        judgeable = _half_width(0.0, scale, iv.n, confidence, m_bar) < m.margin
        if label == "inconclusive":
            good_mean = iv.mean if m.direction == "higher_is_better" else -iv.mean
            needed = cases_to_settle(good_mean, iv.variance or 0.0, scale, m.margin, iv.n, confidence, power, m_bar)
    more = None if needed is None else needed - iv.n
    more_conversations = None if more is None or per is None else math.ceil(more / per)
    reason = _reason(label, m.direction, m.margin, ghi, more, iv.n, more_conversations)
    if label == "inconclusive" and not judgeable and iv.n >= 2:
        reason = _too_few_reason(scale, iv.n, m.margin, _half_width(0.0, scale, iv.n, confidence, m_bar), more,
                                 more_conversations)
    return MetricVerdict(
        metric=m.metric, k=m.k, label=label_of(m.metric, m.k), direction=m.direction,  # type: ignore[arg-type]
        margin=m.margin, margin_source=m.source, n=iv.n, n_changed=changed, delta=iv.mean,
        ci=None if iv.lo is None else [iv.lo, iv.hi], sd=iv.sd, verdict=label, reason=reason, gated=m.gated,
        resolution=scale / iv.n if iv.n else None, judgeable=judgeable, mde=mde, cases_needed=needed,
        more_cases=more, test=m.test, cases_per_conversation=per, more_conversations=more_conversations,
    )


def _severity(v: MetricVerdict) -> float:
    """How far the interval reaches to the bad side, in margins (worse: most clearly worse first)."""
    lo, hi = v.ci if v.ci is not None else (0.0, 0.0)
    return _good(lo, hi, v.direction)[1] / v.margin  # type: ignore[arg-type]


def _observed(v: MetricVerdict) -> float:
    """The observed change in the better direction, in margins (inconclusive: the largest worsening first)."""
    delta = v.delta or 0.0
    return (delta if v.direction == "higher_is_better" else -delta) / v.margin


def _shown(v: MetricVerdict) -> str:
    """`Recall@5 (any) -0.500 [-0.563, -0.437]`: a metric, its change and interval."""
    ci = "" if v.ci is None else f" [{format_change(v.ci[0])}, {format_change(v.ci[1])}]"
    delta = "" if v.delta is None else f" {format_change(v.delta)}"
    return f"{v.label}{delta}{ci}"


def _summary(label: str | None, verdicts: list[MetricVerdict]) -> str:
    """Why the merge has its label, in one sentence: the deciding metric(s) first."""
    if label is None:
        return "no metric could be compared case by case"
    gated = [v for v in verdicts if v.gated] or verdicts
    if label == "identical":
        return f"no paired case changed on any of the {len(verdicts)} metric(s)"
    if label == "worse":
        chosen = sorted((v for v in verdicts if v.verdict == "worse"), key=lambda v: (not v.gated, _severity(v)))
        lead = chosen[0]
        others = [v.label for v in chosen[1:]]
        more = f"; also shown worse: {', '.join(others)}" if others else ""
        return f"{_shown(lead)}: {lead.reason}{more}"
    if label == "inconclusive":
        chosen = sorted((v for v in gated if v.verdict == "inconclusive"), key=_observed)
        lead = chosen[0]
        more = ""
        if len(chosen) > 1:
            more = f"; {len(chosen) - 1} more gated metric(s) not settled: {', '.join(v.label for v in chosen[1:])}"
        return f"{_shown(lead)}: {lead.reason}{more}"
    better = [v for v in verdicts if v.verdict == "better"]
    gains = f"; shown better: {', '.join(_shown(v) for v in better[:3])}" + (" …" if len(better) > 3 else "") if better else ""
    n_gated = sum(1 for v in gated if v.verdict != "identical")
    if label == "equivalent":
        head = f"every gated metric that changed ({n_gated}) lies within its margin either way"
    elif label == "better":
        head = f"nothing is shown worse and every gated metric ({len(gated)}) is shown no worse than its margin"
    else:
        head = f"every gated metric that changed ({n_gated}) is shown no worse than its margin"
    return f"{head}; none is shown worse{gains}" if label != "better" else f"{head}{gains}"


def format_change(x: float | None) -> str:
    """A change or an interval bound as the verdict shows it: +0.137, ±0 for exactly 0, and two
    significant digits when three decimals would hide the sign (-0.00012: a bound's side of 0
    decides the label)."""
    if x is None:
        return "—"
    if x == 0:
        return "±0"
    return f"{x:+.2g}" if abs(x) < 5e-4 else f"{x:+.3f}"


def build_verdict(
    members: Sequence[Member], not_compared: Sequence[Mapping[str, str]], *, alpha: float, power: float = DEFAULT_POWER
) -> MergeVerdict:
    """Each member's interval at 1 − 2α/m (each bound a one-sided test at α/m), its label, power
    and cases to settle, and the merge label with its one-line summary.

    m counts the distinct tests (`Member.family`, a mirrored pair once) among the members with
    an interval (n ≥ 2) and at least one changed case. A metric on which no case changed
    cannot be called better or worse at any level (its mean difference is exactly 0), so
    leaving it out of m spends nothing on it (Tarone 1990); conditional on which cases changed,
    the Bonferroni bound over the rest holds as before."""
    tests = {m.family for m in members if m.diff.size >= 2 and np.any(m.diff)}
    family = len(tests)
    confidence = 1.0 - 2.0 * alpha / max(family, 1)
    verdicts = [_metric_verdict(m, confidence, power) for m in members]
    label = merge_label([v.verdict for v in verdicts], [v.gated for v in verdicts])
    return MergeVerdict(
        available=True, verdict=label, summary=_summary(label, verdicts), alpha=alpha,
        power=power, family_size=family, confidence=confidence, metrics=verdicts,
        gated=[metric_key(v.metric, v.k) for v in verdicts if v.gated], not_compared=[dict(x) for x in not_compared],
    )
