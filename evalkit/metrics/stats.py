"""Paired statistics for comparing two runs case by case: bootstrap CI, sign-flip test, corrections.

Plain functions over numpy arrays; every random draw comes from an explicit
`numpy.random.Generator`. The unit of resampling is the *case*: run a and run b are
paired by case, d_i = b_i − a_i over the n cases both runs scored (`paired`), and the
statistic is the mean paired difference d̄ = (1/n) Σ d_i. `compare_paired` puts the pieces
together for one metric in one scope; the caller collects its p-values over every metric ×
slice and corrects them with `holm` (default) or `benjamini_hochberg`. EVAL.md, section
"Comparing two runs", is the spec; the docstrings say the same in short.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evalkit.errors import InputError, Problem

__all__ = [
    "DEFAULT_RESAMPLES",
    "PairedComparison",
    "PairedValues",
    "adjust_pvalues",
    "benjamini_hochberg",
    "bootstrap_ci",
    "compare_paired",
    "holm",
    "noise_sentence",
    "paired",
    "permutation_test",
    "rng_for",
    "significant",
]

DEFAULT_RESAMPLES = 10_000
# Elements of one (rows × n) draw matrix. Index matrix + gathered values are 16 bytes an
# element, so a chunk holds at most 32 MiB whatever n and the number of resamples.
_CHUNK_ELEMENTS = 1 << 21
# Sign-flipped sums within this fraction of Σ|d_i| of the observed one count as ties:
# the same sum computed in another order differs by float rounding only.
_TIE_RTOL = 1e-9

ArrayLike = Sequence[float | int | bool | None] | np.ndarray


@dataclass(frozen=True)
class PairedValues:
    """Two runs' values over the cases both scored, in case order.

    Attributes:
        a, b: float arrays of equal length n (booleans as 1/0).
        n_excluded_a: cases run a did not score while run b did (excluded because of a).
        n_excluded_b: cases run b did not score while run a did.
        n_neither: cases neither run scored (metric not applicable, or both failed).
    """

    a: np.ndarray
    b: np.ndarray
    n_excluded_a: int
    n_excluded_b: int
    n_neither: int

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

    `ci` is (lo, hi) at `confidence`; `p_exact` is True when the p-value came from
    enumerating every sign pattern (or every difference is 0), not from random draws.
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
    )


def bootstrap_ci(
    diff: ArrayLike, *, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95, rng: np.random.Generator
) -> tuple[float | None, float | None]:
    """Percentile bootstrap confidence interval of the mean paired difference.

    Resampling unit: the case. For r = 1..R, draw n case indices uniformly with
    replacement, I_r = rng.integers(0, n, size=n) (int64; drawn R·n at a time in chunks
    of whole rows, which gives the same numbers as R separate draws), and take the
    resample mean m_r = (1/n) Σ_j d[I_r[j]]. The interval is
    (Q(m, (1 − c)/2), Q(m, (1 + c)/2)), where Q is `numpy.quantile(..., method="linear")`
    (Hyndman–Fan type 7, as EVAL.md's percentiles): sort m_(0) ≤ … ≤ m_(R−1),
    h = (R − 1)·q, Q = m_(⌊h⌋) + (h − ⌊h⌋)·(m_(⌊h⌋+1) − m_(⌊h⌋)).

    Edge cases: n = 0 → (None, None); n = 1 → (d_1, d_1) without drawing.

    Args:
        diff: the paired differences d_i = b_i − a_i (finite; see `paired`).
        resamples: R, the number of bootstrap resamples.
        confidence: c, the coverage of the interval, in (0, 1).
        rng: the generator the indices are drawn from (see `rng_for`).

    Returns:
        (lo, hi) as floats, or (None, None) when there is no case.
    """
    d = _as_diff(diff)
    r, c = _check_resamples(resamples), _check_confidence(confidence)
    n = d.shape[0]
    if n == 0:
        return None, None
    if n == 1:
        return float(d[0]), float(d[0])
    means = np.empty(r, dtype=np.float64)
    rows = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, r, rows):
        stop = min(r, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = np.take(d, idx).sum(axis=1) / n
    lo, hi = np.quantile(means, [(1.0 - c) / 2.0, (1.0 + c) / 2.0], method="linear")
    return float(lo), float(hi)


def _enumerates(n: int, resamples: int) -> bool:
    """Whether permutation_test enumerates all 2^n sign patterns instead of drawing R."""
    return 0 < n < 63 and (1 << n) <= resamples


def permutation_test(diff: ArrayLike, *, resamples: int = DEFAULT_RESAMPLES, rng: np.random.Generator) -> float | None:
    """Two-sided paired randomization test (random sign flips) of "mean difference = 0".

    Under the null hypothesis the labels a/b of each case are exchangeable, so each d_i
    is as likely as −d_i. The statistic is T = |Σ d_i| (equivalently |d̄|). A sign
    pattern s ∈ {−1, +1}^n gives T_s = |Σ s_i d_i|; it counts as at least as extreme
    when T_s ≥ T − τ, with τ = 1e-9 · Σ|d_i| (float rounding of the same sum in
    another order is not a difference).

    - Exact, when 2^n ≤ R: all 2^n patterns are enumerated and
      p = #{s : T_s ≥ T − τ} / 2^n. No random draw. (R = 10,000: n ≤ 13.)
    - Monte Carlo, otherwise: for r = 1..R, draw W = ⌈n/64⌉ words
      w = rng.integers(0, 2**64, size=W, dtype=numpy.uint64) (drawn in chunks of whole
      rows: the same numbers as R separate draws); case i is flipped (s_i = −1) iff bit
      i mod 64 (least significant first) of w[⌊i/64⌋] is 1. Then
      p = (1 + #{r : T_r ≥ T − τ}) / (1 + R) (Phipson & Smyth 2010: the observed pattern
      counts once, so p > 0 and the test keeps its level).

    Edge cases: n = 0 → None; every d_i = 0 → 1.0 without drawing. With k nonzero
    differences the exact p is at least 2/2^k: fewer than 6 changed cases can never
    reach p ≤ 0.05, however large the change.

    Args:
        diff: the paired differences d_i = b_i − a_i (finite; see `paired`).
        resamples: R, the number of random sign patterns (and the exact-enumeration limit).
        rng: the generator the signs are drawn from (see `rng_for`).

    Returns:
        The p-value in (0, 1], or None when there is no case.
    """
    d = _as_diff(diff)
    r = _check_resamples(resamples)
    n = d.shape[0]
    if n == 0:
        return None
    scale = float(np.abs(d).sum())
    if scale == 0.0:
        return 1.0
    total = float(d.sum())
    threshold = abs(total) - _TIE_RTOL * scale
    # Flipping the cases in B turns Σ d_i into Σ d_i − 2 Σ_{i∈B} d_i; the empty flip is exactly `total`.
    if _enumerates(n, r):
        patterns = np.arange(1 << n, dtype=np.int64)
        bits = (patterns[:, None] >> np.arange(n, dtype=np.int64)) & 1
        extreme = np.count_nonzero(np.abs(total - 2.0 * (bits @ d)) >= threshold)
        return extreme / (1 << n)
    extreme, rows, words = 0, max(1, _CHUNK_ELEMENTS // n), -(-n // 64)
    for start in range(0, r, rows):
        # 64 sign flips per random word; a draw of whole words is the same split in chunks or not.
        packed = rng.integers(0, 2**64, size=(min(r, start + rows) - start, words), dtype=np.uint64)
        bits = np.unpackbits(packed.astype("<u8", copy=False).view(np.uint8), axis=1, count=n, bitorder="little")
        extreme += int(np.count_nonzero(np.abs(total - 2.0 * (bits.astype(np.float64) @ d)) >= threshold))
    return (1 + extreme) / (1 + r)


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


def compare_paired(
    a: ArrayLike,
    b: ArrayLike,
    *,
    seed: int,
    key: str = "",
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
) -> PairedComparison:
    """Paired comparison of one metric in one scope: run a (baseline) vs run b (new).

    Over the n cases both runs scored (`paired`): mean_a = Σ a_i / n, mean_b = Σ b_i / n,
    delta = Σ (b_i − a_i) / n (math.fsum), `ci` = `bootstrap_ci` of the differences and
    `p_value` = `permutation_test` of them. The means are over the paired cases, so they
    can differ from a run's own metrics.json value when the runs scored different cases.

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
        confidence: coverage of the bootstrap interval.

    Returns:
        PairedComparison; with n = 0 every mean, delta, CI end and p is None.
    """
    pv = paired(a, b)
    boot_seq, test_seq = _seed_sequence(seed, key).spawn(2)
    r, c = _check_resamples(resamples), _check_confidence(confidence)
    n, d = pv.n, pv.diff
    return PairedComparison(
        n=n,
        n_excluded_a=pv.n_excluded_a,
        n_excluded_b=pv.n_excluded_b,
        n_neither=pv.n_neither,
        mean_a=math.fsum(pv.a.tolist()) / n if n else None,
        mean_b=math.fsum(pv.b.tolist()) / n if n else None,
        delta=math.fsum(d.tolist()) / n if n else None,
        ci=bootstrap_ci(d, resamples=r, confidence=c, rng=np.random.default_rng(boot_seq)),
        confidence=c,
        p_value=permutation_test(d, resamples=r, rng=np.random.default_rng(test_seq)),
        p_exact=n > 0 and (_enumerates(n, r) or not d.any()),
        resamples=r,
    )
