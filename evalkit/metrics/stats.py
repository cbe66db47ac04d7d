"""Paired statistics for comparing two runs case by case: bootstrap CI, sign-flip test, corrections.

Plain functions over numpy arrays; every random draw comes from an explicit
`numpy.random.Generator`. The unit of resampling is the *case*: run a and run b are
paired by case, d_i = b_i − a_i over the n cases both runs scored (`paired`), and the
statistic is the mean paired difference d̄ = (1/n) Σ d_i. Only the changed cases are drawn,
and from `NORMAL_CI_FROM` / `NORMAL_P_FROM` effective changed cases on, normal theory
(`normal_ci`, `normal_test`) stands in for the draws. `compare_paired` puts the pieces
together for one metric in one scope; the caller collects its p-values over every metric ×
slice and corrects them with `holm` (default) or `benjamini_hochberg`. EVAL.md, section
"Comparing two runs", is the spec; the docstrings say the same in short.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

from evalkit.errors import InputError, Problem

__all__ = [
    "DEFAULT_RESAMPLES",
    "NORMAL_CI_FROM",
    "NORMAL_P_FROM",
    "PairedComparison",
    "PairedValues",
    "adjust_pvalues",
    "benjamini_hochberg",
    "bootstrap_ci",
    "compare_paired",
    "effective_changes",
    "holm",
    "noise_sentence",
    "normal_ci",
    "normal_test",
    "paired",
    "permutation_test",
    "rng_for",
    "significant",
]

DEFAULT_RESAMPLES = 10_000
# Normal theory from this many effective changed cases on (`effective_changes`; EVAL.md,
# "Normal theory for many changed cases"): tests/unit/test_stats_normal.py holds both to the
# resampled statistics at and above them.
NORMAL_CI_FROM = 30
NORMAL_P_FROM = 100
# Elements of one block of draws: a block's index (or bit) matrix and the values it gathers
# stay within a few tens of MiB whatever n and the number of resamples.
_CHUNK_ELEMENTS = 1 << 21
# Sign-flipped sums within this fraction of Σ|d_i| of the observed one count as ties:
# the same sum computed in another order differs by float rounding only.
_TIE_RTOL = 1e-9
# The sequential sign-flip test looks at its count after 100, 200, 400, … patterns and stops
# when "p ≤ α" is rejected at this level (a one-sided binomial test of the count).
_FIRST_LOOK = 100
_SETTLED = 1e-4
# Lattice steps 1/q tried for the continuity correction: per-case values on a grid of
# 1/2 … 1/64 (precision@K, recall_frac, MRR@5, integer grades) are found.
_LATTICE_Q = 64

ArrayLike = Sequence[float | int | bool | None] | np.ndarray


@dataclass(frozen=True)
class PairedValues:
    """Two runs' values over the cases both scored, in case order.

    Attributes:
        a, b: float arrays of equal length n (booleans as 1/0).
        n_excluded_a: cases run a did not score while run b did (excluded because of a).
        n_excluded_b: cases run b did not score while run a did.
        n_neither: cases neither run scored (metric not applicable, or both failed).
        kept: the mask over the input cases of the n kept (aligns per-case labels with a, b).
    """

    a: np.ndarray
    b: np.ndarray
    n_excluded_a: int
    n_excluded_b: int
    n_neither: int
    kept: np.ndarray

    @property
    def n(self) -> int:
        return int(self.a.shape[0])

    @property
    def diff(self) -> np.ndarray:
        """d_i = b_i − a_i: positive when run b scores higher on case i."""
        return self.b - self.a


@dataclass(frozen=True)
class PairedComparison:
    """One metric in one scope, run a (baseline) vs run b (new). See `compare_paired`.

    `ci` is (lo, hi) at `confidence`, computed by `ci_method`: "exact" (n = 1, or every d_i
    is the same: every resample has that mean), "bootstrap" (`resamples` resamples) or
    "normal" (`normal_ci`). `p_value` comes from `p_method`: "exact" (every sign pattern
    counted, without drawing), "monte_carlo" (`p_draws` random sign patterns: `resamples`,
    or fewer when the sequential test stopped) or "normal" (`normal_test`). `p_exact` is
    p_method == "exact". The methods are None when n = 0.
    """

    n: int
    n_excluded_a: int
    n_excluded_b: int
    n_neither: int
    mean_a: float | None
    mean_b: float | None
    delta: float | None
    ci: tuple[float | None, float | None]
    confidence: float
    p_value: float | None
    p_exact: bool
    resamples: int
    ci_method: Literal["exact", "bootstrap", "normal"] | None = None
    p_method: Literal["exact", "monte_carlo", "normal"] | None = None
    p_draws: int = 0


def _check_resamples(resamples: int) -> int:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise InputError(Problem(f"resamples must be a positive integer, got {resamples!r}", field="resamples"))
    return resamples


def _check_confidence(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0.0 < confidence < 1.0:
        raise InputError(Problem(f"confidence must be a number in (0, 1), got {confidence!r}", field="confidence"))
    return float(confidence)


def _as_diff(diff: ArrayLike) -> np.ndarray:
    d = np.asarray(diff, dtype=np.float64)
    if d.ndim != 1:
        raise ValueError(f"expected a 1-D array of paired differences, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("paired differences must be finite; drop unscored cases with paired() first")
    return d


def _column(values: ArrayLike, side: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)  # None -> nan, True -> 1.0
    if v.ndim != 1:
        raise ValueError(f"run {side}: expected one value per case, got shape {v.shape}")
    if np.isinf(v).any():
        raise ValueError(f"run {side}: infinite per-case value at case {int(np.flatnonzero(np.isinf(v))[0])}")
    return v


def paired(a: ArrayLike, b: ArrayLike) -> PairedValues:
    """Keep the cases both runs scored; count the ones dropped.

    `a[i]` and `b[i]` are the same case's value in run a and run b (the caller aligns
    cases by id). None or NaN means "not scored" (not applicable, or the instrument
    failed); such a case is excluded from the pair, never turned into 0.

    Args:
        a: per-case values of run a (the baseline); numbers, booleans, None or NaN.
        b: per-case values of run b, same length and case order.

    Returns:
        PairedValues with the scored pairs and the counts n_excluded_a (a missing, b
        scored), n_excluded_b (b missing, a scored) and n_neither (both missing).

    Raises:
        ValueError: the two sequences differ in length, or a value is infinite.
    """
    va, vb = _column(a, "a"), _column(b, "b")
    if va.shape != vb.shape:
        raise ValueError(f"runs a and b must list the same cases: {va.shape[0]} values vs {vb.shape[0]}")
    miss_a, miss_b = np.isnan(va), np.isnan(vb)
    keep = ~(miss_a | miss_b)
    return PairedValues(
        a=va[keep],
        b=vb[keep],
        n_excluded_a=int(np.count_nonzero(miss_a & ~miss_b)),
        n_excluded_b=int(np.count_nonzero(miss_b & ~miss_a)),
        n_neither=int(np.count_nonzero(miss_a & miss_b)),
        kept=keep,
    )


def bootstrap_ci(
    diff: ArrayLike, *, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95, rng: np.random.Generator
) -> tuple[float | None, float | None]:
    """Percentile bootstrap confidence interval of the mean paired difference.

    Resampling unit: the case. Resample r draws n of the n cases uniformly with
    replacement and takes their mean m_r; the interval is (Q(m, (1 − c)/2), Q(m, (1 + c)/2)),
    where Q is `numpy.quantile(..., method="linear")` (Hyndman–Fan type 7, as EVAL.md's
    percentiles): sort m_(0) ≤ … ≤ m_(R−1), h = (R − 1)·q,
    Q = m_(⌊h⌋) + (h − ⌊h⌋)·(m_(⌊h⌋+1) − m_(⌊h⌋)).

    Only the k cases whose d_i differs from the most common value v (0 when no single value
    is the most common) move a resample's mean, so only they are drawn: e = (d_i − v for
    those cases, in case order); K = rng.binomial(n, k/n, size=R), K_r being how many of
    resample r's n draws land on one of them; then J = rng.integers(0, k, size=ΣK) (int64),
    the first K_1 for resample 1, the next K_2 for resample 2, …; m_r = v + (1/n) Σ_j e[J_j].
    Each m_r has exactly the distribution of the mean of n uniform draws from d, at a cost
    of R·k draws instead of R·n. J is drawn in blocks of whole resamples, which gives the
    same numbers as one draw.

    Edge cases: n = 0 → (None, None); n = 1, or every d_i equal → (d_1, d_1) without drawing.

    Args:
        diff: the paired differences d_i = b_i − a_i (finite; see `paired`).
        resamples: R, the number of bootstrap resamples.
        confidence: c, the coverage of the interval, in (0, 1).
        rng: the generator the resamples are drawn from (see `rng_for`).

    Returns:
        (lo, hi) as floats, or (None, None) when there is no case.
    """
    d = _as_diff(diff)
    r, c = _check_resamples(resamples), _check_confidence(confidence)
    n = d.shape[0]
    if n == 0:
        return None, None
    values, counts = np.unique(d, return_counts=True)
    if values.shape[0] == 1:
        return float(d[0]), float(d[0])
    top = np.flatnonzero(counts == counts.max())
    # 0 on a tie keeps the draws of −d those of d, negated (v is chosen alike on both).
    v = float(values[top[0]]) if top.shape[0] == 1 else 0.0
    e = d[d != v] - v
    k = e.shape[0]
    hits = rng.binomial(n, k / n, size=r)
    sums = np.empty(r, dtype=np.float64)
    rows = max(1, _CHUNK_ELEMENTS // k)  # a resample draws about k indices
    for start in range(0, r, rows):
        stop = min(r, start + rows)
        idx = rng.integers(0, k, size=int(hits[start:stop].sum()))
        owner = np.repeat(np.arange(stop - start), hits[start:stop])
        sums[start:stop] = np.bincount(owner, weights=e[idx], minlength=stop - start)
    lo, hi = np.quantile(v + sums / n, [(1.0 - c) / 2.0, (1.0 + c) / 2.0], method="linear")
    return float(lo), float(hi)


def effective_changes(diff: ArrayLike) -> float:
    """(Σ x_i²)² / Σ x_i⁴: how many equal-sized terms x would weigh as much; 0 when all are 0.

    It is c for c changes of one size (and zeros), and smaller when a few changes dominate.
    The sign-flip sum Σ s_i d_i has excess kurtosis −2 / this of d, and the bootstrap mean's
    skewness is at most 1 / √(this of d − d̄): both vanish as it grows, which is when
    `normal_test` and `normal_ci` stand in for the draws (EVAL.md).
    """
    x = _as_diff(diff)
    sq = x * x
    s4 = float(np.dot(sq, sq))
    return float(sq.sum()) ** 2 / s4 if s4 > 0.0 else 0.0


def normal_ci(diff: ArrayLike, *, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """The percentile bootstrap's interval without drawing: its Cornish–Fisher expansion.

    The bootstrap distribution of the resample mean has mean d̄, standard deviation
    se = √(m₂/n) and skewness γ = m₃ / (m₂^{3/2} √n), where m_j = (1/n) Σ (d_i − d̄)^j. Its
    q-quantile is, to first order in γ, d̄ + se·(z_q + γ(z_q² − 1)/6) (z_q the standard
    normal quantile), so the interval is those at q = (1 − c)/2 and (1 + c)/2. With γ = 0
    it is the normal interval d̄ ± z·se.

    Edge cases: n = 0 → (None, None); m₂ = 0 (every d_i equal) → (d̄, d̄).

    Args:
        diff: the paired differences d_i = b_i − a_i (finite; see `paired`).
        confidence: c, the coverage of the interval, in (0, 1).
    """
    d = _as_diff(diff)
    c = _check_confidence(confidence)
    n = d.shape[0]
    if n == 0:
        return None, None
    mean = float(d.mean())
    x = d - mean
    sq = x * x
    return _normal_interval(mean, n, float(sq.sum()) / n, float(np.dot(sq, x)) / n, c)


def _normal_interval(mean: float, n: int, m2: float, m3: float, c: float) -> tuple[float, float]:
    """`normal_ci` from the mean and the centred moments m₂, m₃ of n differences."""
    if m2 == 0.0:
        return mean, mean
    se = math.sqrt(m2 / n)
    gamma = m3 / m2**1.5 / math.sqrt(n)
    ends = []
    for q in ((1.0 - c) / 2.0, (1.0 + c) / 2.0):
        z = NormalDist().inv_cdf(q)
        ends.append(mean + se * (z + gamma * (z * z - 1.0) / 6.0))
    return ends[0], ends[1]


def _enumerates(n: int, resamples: int) -> bool:
    """Whether the sign-flip test enumerates all 2^n patterns of n changed cases instead of drawing R."""
    return 0 < n < 63 and (1 << n) <= resamples


def _binomial_tail(k: int, n: int, prob: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, prob), summed in log space (no overflow at any n)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    first = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
             + k * math.log(prob) + (n - k) * math.log1p(-prob))
    j = np.arange(k, n, dtype=np.float64)
    # log pmf(j + 1) − log pmf(j) = log((n − j) / (j + 1)) + log(prob / (1 − prob))
    logs = first + np.concatenate(([0.0], np.cumsum(np.log((n - j) / (j + 1)) + (math.log(prob) - math.log1p(-prob)))))
    top = float(logs.max())
    return min(1.0, math.exp(top) * float(np.exp(logs - top).sum()))


def _one_size(e: np.ndarray) -> bool:
    mag = np.abs(e)
    top = float(mag.max())
    return top - float(mag.min()) <= _TIE_RTOL * top


def _sign_flip(
    e: np.ndarray, r: int, rng: np.random.Generator, alpha: float | None
) -> tuple[float, Literal["exact", "monte_carlo"], int]:
    """(p, method, patterns drawn) of the sign-flip test over the nonzero differences e."""
    c = e.shape[0]
    scale = float(np.abs(e).sum())
    total = float(e.sum())
    threshold = abs(total) - _TIE_RTOL * scale
    # Flipping the cases in B turns Σ e_i into Σ e_i − 2 Σ_{i∈B} e_i; the empty flip is exactly `total`.
    if _enumerates(c, r):
        patterns = np.arange(1 << c, dtype=np.int64)
        bits = (patterns[:, None] >> np.arange(c, dtype=np.int64)) & 1
        return int(np.count_nonzero(np.abs(total - 2.0 * (bits @ e)) >= threshold)) / (1 << c), "exact", 0
    if _one_size(e):
        # |Σ s_i e_i| = |e|·|2U − c|, U ~ Binomial(c, 1/2) the cases left unflipped: the sign test.
        up = int(np.count_nonzero(e > 0))
        return min(1.0, 2.0 * _binomial_tail(max(up, c - up), c, 0.5)), "exact", 0
    extreme, drawn, words = 0, 0, -(-c // 64)
    look = _FIRST_LOOK if alpha is not None else r
    rows = max(1, _CHUNK_ELEMENTS // c)
    while drawn < r:
        stop = min(r, look, drawn + rows)
        # 64 sign flips per random word; a draw of whole words is the same split in blocks or not.
        packed = rng.integers(0, 2**64, size=(stop - drawn, words), dtype=np.uint64)
        bits = np.unpackbits(packed.astype("<u8", copy=False).view(np.uint8), axis=1, count=c, bitorder="little")
        extreme += int(np.count_nonzero(np.abs(total - 2.0 * (bits.astype(np.float64) @ e)) >= threshold))
        drawn = stop
        if drawn == look and drawn < r:
            if _binomial_tail(extreme, drawn, alpha) <= _SETTLED:  # type: ignore[arg-type]
                break  # "p ≤ α" is rejected: no correction could make this test significant
            look *= 2
    return (1 + extreme) / (1 + drawn), "monte_carlo", drawn


def permutation_test(
    diff: ArrayLike, *, resamples: int = DEFAULT_RESAMPLES, rng: np.random.Generator, alpha: float | None = None
) -> float | None:
    """Two-sided paired randomization test (random sign flips) of "mean difference = 0".

    Under the null hypothesis the labels a/b of each case are exchangeable, so each d_i
    is as likely as −d_i. The statistic is T = |Σ d_i| (equivalently |d̄|). A case with
    d_i = 0 adds nothing to any flipped sum, so the test runs over the c changed cases
    e = (d_i ≠ 0, in case order). A sign pattern s ∈ {−1, +1}^c gives T_s = |Σ s_i e_i|;
    it counts as at least as extreme when T_s ≥ T − τ, with τ = 1e-9 · Σ|e_i| (float
    rounding of the same sum in another order is not a difference).

    - Exact, when 2^c ≤ R: all 2^c patterns are enumerated and
      p = #{s : T_s ≥ T − τ} / 2^c. No random draw. (R = 10,000: c ≤ 13.)
    - Exact, when every |e_i| is the same size (within τ's relative 1e-9; binary metrics):
      T_s = |e|·|2U − c| with U ~ Binomial(c, ½), so p = min(1, 2·P(U ≥ max(c₊, c₋))),
      c₊ and c₋ the cases that went up and down (the two-sided sign test). No random draw.
    - Monte Carlo, otherwise: for r = 1..R, draw W = ⌈c/64⌉ words
      w = rng.integers(0, 2**64, size=W, dtype=numpy.uint64) (drawn in blocks of whole
      patterns: the same numbers as R separate draws); case i of e is flipped (s_i = −1)
      iff bit i mod 64 (least significant first) of w[⌊i/64⌋] is 1. Then
      p = (1 + #{r : T_r ≥ T − τ}) / (1 + R) (Phipson & Smyth 2010: the observed pattern
      counts once, so p > 0 and the test keeps its level).
    - Sequential, with `alpha`: the same draws, looked at after L = 100, 200, 400, …
      patterns (L < R). With x of them at least as extreme, it stops when
      P(Binomial(L, α) ≥ x) ≤ 1e-4 (the count rules out p ≤ α) and gives
      p = (1 + x) / (1 + L). At most 7 looks at R = 10,000: a test whose p is ≤ α stops
      early with probability below 7·10⁻⁴.

    Edge cases: n = 0 → None; every d_i = 0 → 1.0 without drawing. With k nonzero
    differences the exact p is at least 2/2^k: fewer than 6 changed cases can never
    reach p ≤ 0.05, however large the change.

    Args:
        diff: the paired differences d_i = b_i − a_i (finite; see `paired`).
        resamples: R, the number of random sign patterns (and the exact-enumeration limit).
        rng: the generator the signs are drawn from (see `rng_for`).
        alpha: stop drawing once p > alpha is settled (None: always R patterns).

    Returns:
        The p-value in (0, 1], or None when there is no case.
    """
    d = _as_diff(diff)
    r = _check_resamples(resamples)
    if d.shape[0] == 0:
        return None
    e = d[d != 0.0]
    return _sign_flip(e, r, rng, alpha)[0] if e.shape[0] else 1.0


def _lattice_unit(mag: np.ndarray) -> float:
    """The largest u with every value a whole multiple of u, for u = g/q, q ≤ 64; 0 when none."""
    head = mag[:64]
    for q in range(1, _LATTICE_Q + 1):
        for part in (head, mag):
            scaled = part * q
            whole = np.rint(scaled)
            if not np.all(np.abs(scaled - whole) <= 1e-9 * np.maximum(scaled, 1.0)):
                break
        else:
            return float(np.gcd.reduce(whole.astype(np.int64))) / q
    return 0.0


def normal_test(diff: ArrayLike) -> float | None:
    """The sign-flip test's p-value by its normal approximation, with a continuity correction.

    Under the null hypothesis the flipped sum S = Σ s_i d_i has mean 0 and variance
    V = Σ d_i² exactly, and is a sum of independent terms ±|d_i|. When every |d_i| is a
    whole multiple of one unit u (the largest u = g/q with q ≤ 64 and g an integer:
    precision@K, recall_frac, integer grades), S moves in steps of 2u, and half a step is
    taken off |Σ d_i| (Yates); else u = 0. Then z = max(0, |Σ d_i| − u) / √V and
    p = P(|Z| ≥ z) = erfc(z/√2).

    Edge cases: n = 0 → None; every d_i = 0 → 1.0.
    """
    d = _as_diff(diff)
    if d.shape[0] == 0:
        return None
    e = d[d != 0.0]
    if e.shape[0] == 0:
        return 1.0
    z = max(0.0, abs(float(e.sum())) - _lattice_unit(np.abs(e))) / math.sqrt(float(np.dot(e, e)))
    return math.erfc(z / math.sqrt(2.0))


def _check_pvalues(pvalues: Sequence[float | None]) -> list[tuple[int, float]]:
    present = []
    for i, p in enumerate(pvalues):
        if p is None:
            continue
        if not isinstance(p, int | float) or math.isnan(p) or not 0.0 <= p <= 1.0:
            raise ValueError(f"p-value {i} must be a number in [0, 1] or None, got {p!r}")
        present.append((i, float(p)))
    return present


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (family-wise error rate).

    Over the m p-values that are not None, sorted p_(1) ≤ … ≤ p_(m) (ties keep input
    order; tied p-values get the same adjusted value either way):
    p̃_(i) = min(1, max_{j ≤ i} (m − j + 1)·p_(j)). Reject where p̃ ≤ α. None entries pass
    through as None and do not count toward m. The same as statsmodels'
    `multipletests(method="holm")` and R's `p.adjust(method="holm")`.

    Args:
        pvalues: raw p-values in [0, 1], or None for "not tested".

    Returns:
        Adjusted p-values in the input order.
    """
    present = _check_pvalues(pvalues)
    out: list[float | None] = [None] * len(pvalues)
    m, running = len(present), 0.0
    for j, (i, p) in enumerate(sorted(present, key=lambda ip: ip[1])):
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out


def benjamini_hochberg(pvalues: Sequence[float | None]) -> list[float | None]:
    """Benjamini–Hochberg step-up adjustment (false discovery rate).

    Over the m p-values that are not None, sorted p_(1) ≤ … ≤ p_(m):
    p̃_(i) = min(1, min_{j ≥ i} (m / j)·p_(j)). Reject where p̃ ≤ α (FDR ≤ α for
    independent or positively dependent tests). None entries pass through as None and
    do not count toward m. The same as statsmodels' `multipletests(method="fdr_bh")`,
    R's `p.adjust(method="BH")` and `scipy.stats.false_discovery_control`.

    Args:
        pvalues: raw p-values in [0, 1], or None for "not tested".

    Returns:
        Adjusted p-values in the input order.
    """
    present = _check_pvalues(pvalues)
    out: list[float | None] = [None] * len(pvalues)
    m, running = len(present), 1.0
    ranked = sorted(present, key=lambda ip: ip[1])
    for j in range(m, 0, -1):
        i, p = ranked[j - 1]
        running = min(running, m * p / j)
        out[i] = running
    return out


def adjust_pvalues(pvalues: Sequence[float | None], method: Literal["holm", "bh"] = "holm") -> list[float | None]:
    """`holm` (method="holm", the default) or `benjamini_hochberg` (method="bh", `--fdr`)."""
    if method == "holm":
        return holm(pvalues)
    if method == "bh":
        return benjamini_hochberg(pvalues)
    raise InputError(Problem(f"correction must be 'holm' or 'bh', got {method!r}", field="correction"))


def significant(p_adjusted: float | None, alpha: float = 0.05) -> bool:
    """True when an adjusted p-value rejects at level alpha: p̃ ≤ α. None (not tested) is False."""
    return p_adjusted is not None and p_adjusted <= alpha


def noise_sentence(n: int) -> str:
    """What the report says of a change that is not significant after correction."""
    if n == 0:
        return "not compared: no case was scored by both runs"
    return f"not distinguishable from noise at n={n}"


def _seed_sequence(seed: int, key: str) -> np.random.SeedSequence:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(Problem(f"seed must be a non-negative integer, got {seed!r}", field="seed"))
    words = np.frombuffer(hashlib.sha256(key.encode("utf-8")).digest(), dtype="<u4")
    return np.random.SeedSequence(seed, spawn_key=tuple(int(w) for w in words))


def rng_for(seed: int, key: str) -> np.random.Generator:
    """The generator for one comparison, independent of which others run and in what order.

    `numpy.random.default_rng(SeedSequence(seed, spawn_key=K))`, where K is the eight
    little-endian 32-bit words of SHA-256(key as UTF-8). Key is e.g. "recall_any@5|tag:work".

    Args:
        seed: the run's `--seed`, a non-negative integer.
        key: names the metric and scope.

    Raises:
        InputError: seed is not a non-negative integer.
    """
    return np.random.default_rng(_seed_sequence(seed, key))


def _groups(pv: PairedValues, clusters: ArrayLike) -> np.ndarray | None:
    """The cluster of each case `paired` kept, numbered 0..G-1; None when no cluster holds
    two of them (the case is then the unit, and the numbers are the unclustered ones)."""
    labels = np.asarray(clusters)
    if labels.shape != pv.kept.shape:
        raise ValueError(f"expected one cluster label per case: {labels.shape[0]} labels for {pv.kept.shape[0]} cases")
    _, numbered = np.unique(labels[pv.kept], return_inverse=True)
    return numbered if numbered.size and int(np.bincount(numbered).max()) > 1 else None


def _cluster_sums(d: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each cluster's sum of differences, its number of cases)."""
    return np.bincount(groups, weights=d), np.bincount(groups).astype(np.float64)


def cluster_interval(
    sums: ArrayLike, sizes: ArrayLike, *, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
    rng: np.random.Generator, normal_from: float = NORMAL_CI_FROM,
) -> tuple[tuple[float, float], Literal["bootstrap", "normal"]]:
    """The interval of the mean difference over cases when the unit drawn is a cluster
    (a conversation): the estimate is d̄ = Σ S_g / Σ n_g over the G clusters, S_g a cluster's
    sum of differences and n_g its cases.

    - "bootstrap": R resamples of G clusters drawn uniformly with replacement, each giving
      Σ S / Σ n over the clusters drawn; the interval their `numpy.quantile` (linear) at
      (1 − c)/2 and (1 + c)/2, as `bootstrap_ci`.
    - "normal", once `effective_changes` of the residuals u_g = S_g − n_g·d̄ reaches
      `normal_from`: the same Cornish–Fisher interval as `normal_ci` with the cluster-robust
      spread: se = √(Σ u_g²) / n and skewness γ = Σ u_g³ / (Σ u_g²)^{3/2} (n = Σ n_g). With
      one case per cluster these are `normal_ci`'s se and γ.

    Returns:
        ((lo, hi), method).
    """
    s, m = np.asarray(sums, dtype=np.float64), np.asarray(sizes, dtype=np.float64)
    r, c = _check_resamples(resamples), _check_confidence(confidence)
    n, g = float(m.sum()), s.shape[0]
    mean = float(s.sum()) / n
    u = s - m * mean
    sq = u * u
    s2, s4 = float(sq.sum()), float(np.dot(sq, sq))
    if s2 == 0.0:
        return (mean, mean), "normal"
    if s2 * s2 / s4 >= normal_from:
        se = math.sqrt(s2) / n
        gamma = float(np.dot(sq, u)) / s2**1.5
        ends = []
        for q in ((1.0 - c) / 2.0, (1.0 + c) / 2.0):
            z = NormalDist().inv_cdf(q)
            ends.append(mean + se * (z + gamma * (z * z - 1.0) / 6.0))
        return (ends[0], ends[1]), "normal"
    means = np.empty(r, dtype=np.float64)
    rows = max(1, _CHUNK_ELEMENTS // g)
    for start in range(0, r, rows):
        stop = min(r, start + rows)
        idx = rng.integers(0, g, size=(stop - start, g))
        means[start:stop] = s[idx].sum(axis=1) / m[idx].sum(axis=1)
    lo, hi = np.quantile(means, [(1.0 - c) / 2.0, (1.0 + c) / 2.0], method="linear")
    return (float(lo), float(hi)), "bootstrap"


def compare_paired(
    a: ArrayLike,
    b: ArrayLike,
    *,
    seed: int,
    key: str = "",
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    alpha: float | None = None,
    normal_ci_from: float = NORMAL_CI_FROM,
    normal_p_from: float = NORMAL_P_FROM,
    clusters: ArrayLike | None = None,
) -> PairedComparison:
    """Paired comparison of one metric in one scope: run a (baseline) vs run b (new).

    Over the n cases both runs scored (`paired`): mean_a = Σ a_i / n, mean_b = Σ b_i / n,
    delta = Σ (b_i − a_i) / n (math.fsum). The means are over the paired cases, so they can
    differ from a run's own metrics.json value when the runs scored different cases.

    - `ci`: `normal_ci` when `effective_changes` of d − d̄ is at least `normal_ci_from`,
      else `bootstrap_ci` (no draw when every d_i is the same).
    - `p_value`: the exact sign-flip count when `permutation_test` has one (2^c ≤ R, or
      every change of one size), else `normal_test` when `effective_changes` of d is at least
      `normal_p_from`, else the Monte-Carlo sign-flip test, sequential when `alpha` is given.

    Seeding: SeedSequence(seed, spawn_key=SHA-256 words of key) (see `rng_for`) is
    spawned into two children; child 0 drives the bootstrap and child 1 the test. The
    same inputs, seed and key give identical numbers, whatever else is compared and in
    whatever order.

    Args:
        a: run a's per-case values (None/NaN = not scored).
        b: run b's per-case values, same cases in the same order.
        seed: the comparison's `--seed`.
        key: the metric and scope, e.g. "recall_any@5|tag:work".
        resamples: R for both the bootstrap and the Monte-Carlo test.
        confidence: coverage of the interval.
        alpha: the significance level a Monte-Carlo test may stop at once p > alpha is
            settled (None: always R patterns).
        normal_ci_from: the effective number of changed cases from which `normal_ci`
            replaces the bootstrap (math.inf: never).
        normal_p_from: the same for `normal_test` and the Monte-Carlo test.
        clusters: one label per case (same order as `a`), cases of one label not independent
            (the turns of one conversation): the interval and the test then resample whole
            clusters (`cluster_interval`; the sign-flip test over each cluster's sum of
            differences, which is the case test when every cluster holds one case). None,
            or every label its own case: the case is the unit, as above.

    Returns:
        PairedComparison; with n = 0 every mean, delta, CI end, p and method is None.
    """
    pv = paired(a, b)
    boot_seq, test_seq = _seed_sequence(seed, key).spawn(2)
    r, c = _check_resamples(resamples), _check_confidence(confidence)
    n, d = pv.n, pv.diff
    ci: tuple[float | None, float | None] = (None, None)
    p: float | None = None
    ci_method = p_method = None
    drawn = 0
    delta = math.fsum(d.tolist()) / n if n else None
    groups = _groups(pv, clusters) if clusters is not None and n else None
    if groups is not None:
        sums, sizes = _cluster_sums(d, groups)
        mean = float(d.mean())
        if float(d.min()) == float(d.max()):
            ci, ci_method = (float(d[0]), float(d[0])), "exact"
        else:
            ci, ci_method = cluster_interval(sums, sizes, resamples=r, confidence=c, rng=np.random.default_rng(boot_seq),
                                             normal_from=normal_ci_from)
        d = sums  # the test's units: one sum of differences per cluster
    if n:
        # The centred moments, once: the switch's effective changes and the normal interval read them.
        if groups is None:
            mean = float(d.mean())
            x = d - mean
            sq = x * x
            m2, m4 = float(sq.sum()), float(np.dot(sq, sq))
            if float(d.min()) == float(d.max()):
                ci, ci_method = (float(d[0]), float(d[0])), "exact"
            elif m2 * m2 / m4 >= normal_ci_from:
                ci, ci_method = _normal_interval(mean, n, m2 / n, float(np.dot(sq, x)) / n, c), "normal"
            else:
                ci, ci_method = bootstrap_ci(d, resamples=r, confidence=c, rng=np.random.default_rng(boot_seq)), "bootstrap"
        e = d[d != 0.0]
        if not e.shape[0]:
            p, p_method = 1.0, "exact"
        elif not (_enumerates(e.shape[0], r) or _one_size(e)) and effective_changes(e) >= normal_p_from:
            p, p_method = normal_test(e), "normal"
        else:
            p, p_method, drawn = _sign_flip(e, r, np.random.default_rng(test_seq), alpha)
    return PairedComparison(
        n=n,
        n_excluded_a=pv.n_excluded_a,
        n_excluded_b=pv.n_excluded_b,
        n_neither=pv.n_neither,
        mean_a=math.fsum(pv.a.tolist()) / n if n else None,
        mean_b=math.fsum(pv.b.tolist()) / n if n else None,
        delta=delta,
        ci=ci,
        confidence=c,
        p_value=p,
        p_exact=p_method == "exact",
        resamples=r,
        ci_method=ci_method,  # type: ignore[arg-type]
        p_method=p_method,  # type: ignore[arg-type]
        p_draws=drawn,
    )
