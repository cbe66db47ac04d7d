"""The merge verdict (issue 30): better, equivalent, non-inferior, worse or inconclusive, per
metric and for the merge, from a paired interval against a margin (EVAL.md, "The verdict").

The verdict family is the gated metrics at the gate's K, `error_rate`, and any metric given
a `--margin`. For each, over the n cases both runs scored, d_i = b_i − a_i and

    d̄ = Σ d_i / n,   s² = (Σ (d_i − d̄)² + R²) / (n − 1),   [lo, hi] = d̄ ∓ t_{n−1}(1 − α/m) · s / √n

clipped to [−R, R]. R is the metric's scale (1, or 5 for a 0-5 judge mean): the variance
counts one more case that changed by the whole scale (Agresti and Min's (2005) half case each
way), so a metric that changed on no case is not "equivalent" on three cases. m is the number
of metrics with an interval, a mirrored pair once. Each bound is a one-sided test at level α/m
(the interval is two-sided at 1 − 2α/m, as Schuirmann's two one-sided tests read a 90%
interval at α = 0.05): by Bonferroni, the chance that any metric is wrongly called worse is at
most α, and likewise better, so no label is a multiple-testing accident. Nothing is drawn: the
verdict does not depend on `--seed` or `--resamples`. Labels, read in the better direction (a lower-is-better metric
mirrored), with margin δ > 0:

    better        lo > 0                       a proven improvement
    worse         hi < 0 and lo ≤ −δ           a proven worsening not shown within the margin
    equivalent    −δ < lo and hi < δ           within the margin either way
    non-inferior  lo > −δ (otherwise)          no worse than the margin; a gain not settled
    inconclusive  otherwise (lo ≤ −δ, hi ≥ 0)

The merge is worse if any metric is, else inconclusive if any is, else better if any is,
else equivalent if all are, else non-inferior. `--gate non-inferior` passes exactly when
every metric's lo > −δ: better, equivalent or non-inferior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

import numpy as np

from evalkit.compare.models import MergeVerdict, MetricVerdict
from evalkit.errors import InputError, Problem
from evalkit.metrics.keys import HEADLINE_AT_K, canonical_key, metric_key, parse_metric_key
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
]

Label = Literal["better", "equivalent", "non-inferior", "worse", "inconclusive"]
DEFAULT_POWER = 0.8
# What --gate non-inferior lets through: every metric's lower bound above −margin.
PASSING: frozenset[str] = frozenset({"better", "equivalent", "non-inferior"})
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


def paired_interval(diff: Sequence[float] | np.ndarray, *, scale: float, confidence: float) -> Interval:
    """d̄ ∓ t_{n−1}((1 + c)/2) · s/√n, with s² = (Σ (d_i − d̄)² + scale²) / (n − 1), clipped to
    [−scale, scale] (no label changes: every margin is at most the scale).

    Args:
        diff: the paired differences d_i = b_i − a_i over the cases both runs scored.
        scale: R, the metric's largest value (1 for rates and @K metrics, 5 for a judge mean).
        confidence: c, e.g. 1 − 2α/m for a family of m (each bound one-sided at α/m).

    Returns:
        Interval; n = 0: every field None; n = 1: the mean only (no interval).
    """
    d = np.asarray(diff, dtype=np.float64)
    n = int(d.size)
    if n == 0:
        return Interval(0, None, None, None, None, confidence)
    mean = math.fsum(d.tolist()) / n + 0.0
    if n < 2:
        return Interval(n, mean, None, None, None, confidence)
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


def minimum_detectable(sd: float, n: int, confidence: float, power: float = DEFAULT_POWER) -> float:
    """The smallest true change that the interval shows as a change (excludes 0 on its side)
    with probability `power`: (t_{n−1}((1 + c)/2) + z_power) · s/√n."""
    return (t_quantile((1.0 + confidence) / 2.0, n - 1) + _z(power)) * sd / math.sqrt(n)


def cases_to_settle(
    good_mean: float, variance: float, scale: float, margin: float, n: int, confidence: float,
    power: float = DEFAULT_POWER,
) -> int | None:
    """Paired cases that would settle an inconclusive verdict with probability `power`, if the
    true change were the observed one and the observed variance held.

    The target is the bound the observed mean points to: lo > −δ (non-inferior or better) when
    d̄ > −δ, else hi < 0 (worse), at distance Δ = d̄ + δ or −d̄. With N cases the interval's
    s_N² = v + R²/(N − 1) (v the observed variance, R² the guard, which shrinks with N), and N
    is the smallest count, at least n + 1, with (t_{N−1}((1 + c)/2) + z_power) · s_N / √N ≤ Δ
    (the left side falls as N grows: found by bisection). None when Δ ≤ 0 or N would exceed
    1,000,000 (the change sits on the bound).
    """
    dist = good_mean + margin if good_mean > -margin else -good_mean
    if not dist > 0.0:
        return None
    z = _z(power)

    def settles(total: int) -> bool:
        df = total - 1
        sd = math.sqrt(variance + scale * scale / df)
        return (t_quantile((1.0 + confidence) / 2.0, df) + z) * sd / math.sqrt(total) <= dist

    lo, hi = n + 1, _MAX_CASES
    if not settles(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if settles(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def merge_label(labels: Sequence[str]) -> Label | None:
    """The merge: worse if any, else inconclusive if any, else better if any, else equivalent
    if all, else non-inferior; None without a metric."""
    if not labels:
        return None
    for label in ("worse", "inconclusive", "better"):
        if label in labels:
            return label  # type: ignore[return-value]
    return "equivalent" if all(x == "equivalent" for x in labels) else "non-inferior"


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


def _reason(label: str, direction: str, margin: float, ghi: float | None, more: int | None, n: int) -> str:
    """One sentence: why this label, in the metric's own direction."""
    higher = direction == "higher_is_better"
    bad, good = ("below", "above") if higher else ("above", "below")
    bound, good_bound = (f"-{margin:g}", f"+{margin:g}") if higher else (f"+{margin:g}", f"-{margin:g}")
    if n == 0:
        return "not settled: no case was scored by both runs"
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
        return f"not settled: the interval reaches past {bound} and past 0, and the change sits on the bound"
    return f"not settled: the interval reaches past {bound} and past 0; about {more:,} more paired cases would settle it"


def _metric_verdict(m: Member, confidence: float, power: float) -> MetricVerdict:
    iv = paired_interval(m.diff, scale=_scale(m.metric), confidence=confidence)
    label: Label = "inconclusive"
    mde = needed = ghi = None
    if iv.lo is not None and iv.hi is not None and iv.sd is not None and iv.mean is not None:
        label = classify(iv.lo, iv.hi, m.margin, m.direction)
        ghi = _good(iv.lo, iv.hi, m.direction)[1]
        mde = minimum_detectable(iv.sd, iv.n, confidence, power)
        mde = mde if mde <= _scale(m.metric) else None  # no change on the metric's scale could be shown
        if label == "inconclusive":
            good_mean = iv.mean if m.direction == "higher_is_better" else -iv.mean
            needed = cases_to_settle(good_mean, iv.variance or 0.0, _scale(m.metric), m.margin, iv.n, confidence, power)
    more = None if needed is None else needed - iv.n
    return MetricVerdict(
        metric=m.metric, k=m.k, label=label_of(m.metric, m.k), direction=m.direction,  # type: ignore[arg-type]
        margin=m.margin, margin_source=m.source, n=iv.n, n_changed=int(np.count_nonzero(m.diff)), delta=iv.mean,
        ci=None if iv.lo is None else [iv.lo, iv.hi], sd=iv.sd, verdict=label,
        reason=_reason(label, m.direction, m.margin, ghi, more, iv.n), mde=mde, cases_needed=needed,
        more_cases=more, test=m.test,
    )


def _severity(v: MetricVerdict) -> float:
    """How far the interval reaches to the bad side, in margins (worse: most clearly worse first)."""
    lo, hi = v.ci if v.ci is not None else (0.0, 0.0)
    return _good(lo, hi, v.direction)[1] / v.margin  # type: ignore[arg-type]


def _observed(v: MetricVerdict) -> float:
    """The observed change in the better direction, in margins (inconclusive: the largest worsening first)."""
    delta = v.delta or 0.0
    return (delta if v.direction == "higher_is_better" else -delta) / v.margin


def _summary(label: str | None, verdicts: list[MetricVerdict], confidence: float, m: int) -> str:
    if label is None:
        return "no metric with a margin could be compared"
    if label == "equivalent":
        return f"every one of the {len(verdicts)} metric(s) lies within its margin"
    chosen = [v for v in verdicts if v.verdict == label]
    if label == "worse":
        chosen.sort(key=_severity)
    elif label == "inconclusive":
        chosen.sort(key=_observed)
    lead = chosen[0]
    ci = "" if lead.ci is None else f" [{format_change(lead.ci[0])}, {format_change(lead.ci[1])}]"
    delta = "" if lead.delta is None else f" {format_change(lead.delta)}"
    more = f"; {len(chosen) - 1} more metric(s) {label}" if len(chosen) > 1 else ""
    if label == "inconclusive" and len(chosen) > 1:
        counts = [v.more_cases for v in chosen]
        if all(x is not None for x in counts):
            more += f" (settling all of them needs about {max(counts):,} more paired cases)"  # type: ignore[type-var]
    return f"{lead.label}{delta}{ci}: {lead.reason}{more}"


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
    """Each member's interval at 1 − 2α/m (each bound a one-sided test at α/m), its label, power and cases to settle, and the merge
    label with its one-line summary.

    m counts the members with an interval (n ≥ 2), a mirrored pair once (`Member.family`).
    It is fixed by which metrics were compared, never by their outcome: two metrics that
    happen to have the same differences still count twice."""
    tests = {m.family for m in members if m.diff.size >= 2}
    family = len(tests)
    confidence = 1.0 - 2.0 * alpha / max(family, 1)
    verdicts = [_metric_verdict(m, confidence, power) for m in members]
    label = merge_label([v.verdict for v in verdicts])
    return MergeVerdict(
        available=True, verdict=label, summary=_summary(label, verdicts, confidence, family), alpha=alpha,
        power=power, family_size=family, confidence=confidence, metrics=verdicts,
        not_compared=[dict(x) for x in not_compared],
    )
