"""When normal theory stands in for the draws (EVAL.md, "Normal theory for many changed cases").

The switches `NORMAL_CI_FROM` and `NORMAL_P_FROM` are chosen here: on many random paired
samples shaped like compare's metrics (binary, precision@5's fifths, MRR@10's reciprocal
ranks, nDCG-like and judge scores, lopsided and heavy-tailed changes), at and above each
switch, the normal interval and p-value must agree with what the resampling gives, within
stated tolerances. The resampled references use many more draws than compare does, so
their own noise is small beside the tolerances. Also here: the sparse draws against the
previous implementation (all n cases drawn), the exact sign test, the lattice unit and the
sequential Monte-Carlo test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from evalkit.metrics import stats
from evalkit.metrics.stats import (
    NORMAL_CI_FROM,
    NORMAL_P_FROM,
    bootstrap_ci,
    compare_paired,
    effective_changes,
    normal_ci,
    normal_test,
    permutation_test,
)
from tests.unit.test_stats import _key_words

R_REF = 50_000  # resamples of the bootstrap the normal interval is held to
R_REF_P = 100_000  # sign patterns of the Monte-Carlo p the normal p is held to
MRR_VALUES = [0.0, *(1 / r for r in range(1, 11))]


def _changes(kind: str, c: int, gen: np.random.Generator, lean: float) -> np.ndarray:
    """c nonzero paired differences of one metric's shape; `lean` in [0.5, 1) tilts them upward."""
    up = np.where(gen.random(c) < lean, 1.0, -1.0)
    if kind == "binary":
        return up
    if kind == "precision@5":  # two fifths-valued cases that differ
        a = gen.integers(0, 6, size=c)
        return up * np.abs(a - (a + gen.integers(1, 6, size=c)) % 6) / 5
    if kind == "mrr@10":
        a = gen.choice(MRR_VALUES, size=c)
        b = gen.choice(MRR_VALUES, size=c)
        d = np.abs(b - a)
        d[d == 0] = 1 / 2 - 1 / 3
        return up * d
    if kind == "ndcg":
        return up * gen.uniform(0.01, 1.0, size=c) ** 2
    if kind == "judge":  # 0-5 grades
        return up * gen.integers(1, 6, size=c)
    if kind == "lopsided":  # mostly small gains, a few large losses
        return np.where(gen.random(c) < 0.9, gen.uniform(0.1, 0.5, size=c), -gen.uniform(2.0, 5.0, size=c))
    if kind == "heavy":  # many tiny changes and a few whole ones
        d = gen.normal(0.0, 0.05, size=c)
        d[: max(1, c // 10)] = up[: max(1, c // 10)]
        return d
    raise ValueError(kind)


KINDS = ("binary", "precision@5", "mrr@10", "ndcg", "judge", "lopsided", "heavy")


def _sample(kind: str, c: int, n: int, seed: int, lean: float) -> np.ndarray:
    gen = np.random.default_rng(seed)
    d = np.zeros(n)
    d[gen.choice(n, size=c, replace=False)] = _changes(kind, c, gen, lean)
    return d


def _samples(switch: float, of_centered: bool) -> list[tuple[str, np.ndarray]]:
    """Samples whose effective changes are at least `switch`, from 1× to about 2× it, c/n from 1/50 to 9/10."""
    out = []
    seed = 0
    for kind in KINDS:
        for factor in (1.0, 2.0):
            for share, lean in ((0.02, 0.5), (0.2, 0.6), (0.9, 0.75)):
                c = int(switch * factor)
                while True:
                    seed += 1
                    d = _sample(kind, c, max(c + 1, int(c / share)), seed, lean)
                    eff = effective_changes(d - d.mean() if of_centered else d)
                    if eff >= switch * factor:
                        break
                    c = int(c * 1.3) + 1  # fewer effective than actual changes: more of them
                out.append((f"{kind} c={c} n={d.shape[0]} lean={lean}", d))
    return out


def _reference_p(d: np.ndarray, seed: int) -> tuple[float, float]:
    """The randomization p-value (exact for one-sized changes, else from R_REF_P sign patterns)
    and its standard error (0 when exact)."""
    p = permutation_test(d, resamples=R_REF_P, rng=np.random.default_rng(seed))
    exact = stats._one_size(d[d != 0])
    return p, 0.0 if exact else math.sqrt(p * (1 - p) / R_REF_P)


# ---------- the switches ----------


def test_normal_p_agrees_with_the_randomization_test_from_the_switch_on() -> None:
    # Tolerance: |p_normal − p| ≤ 0.01, and, where 0.001 ≤ p ≤ 0.05 (where decisions are
    # made), within 20% of p plus three standard errors of the reference's own draws. For
    # scale: compare's 10,000-pattern Monte-Carlo p has a standard error of 0.005 at p = 0.5,
    # 10% of p at p = 0.01 and 22% at p = 0.002.
    worst_abs, worst_rel = 0.0, 0.0
    for i, (name, d) in enumerate(_samples(NORMAL_P_FROM, of_centered=False)):
        (p_ref, se), p_norm = _reference_p(d, seed=i), normal_test(d)
        assert abs(p_norm - p_ref) <= 0.01, (name, p_ref, p_norm)
        if 0.001 <= p_ref <= 0.05:
            assert abs(p_norm - p_ref) <= 0.2 * p_ref + 3 * se, (name, p_ref, se, p_norm)
            worst_rel = max(worst_rel, abs(p_norm - p_ref) / p_ref)
        worst_abs = max(worst_abs, abs(p_norm - p_ref))
    print(f"normal p: worst |Δp| {worst_abs:.4f}, worst relative {worst_rel:.3f}")  # pytest -s shows the margins


def test_normal_interval_agrees_with_the_bootstrap_from_the_switch_on() -> None:
    # Tolerance: each end within 0.15·se of a 50,000-resample percentile bootstrap, se = the
    # bootstrap standard error √(m₂/n). For scale: a 10,000-resample bootstrap's ends move by
    # about 0.03·se from one seed to the next, and a binary metric's resample means sit on a
    # grid that can be a tenth of se wide.
    worst = 0.0
    for i, (name, d) in enumerate(_samples(NORMAL_CI_FROM, of_centered=True)):
        lo, hi = bootstrap_ci(d, resamples=R_REF, rng=np.random.default_rng(i))
        nlo, nhi = normal_ci(d)
        se = math.sqrt(float(np.var(d)) / d.shape[0])
        err = max(abs(nlo - lo), abs(nhi - hi)) / se
        assert err <= 0.15, (name, (lo, hi), (nlo, nhi), err)
        worst = max(worst, err)
    print(f"normal ci: worst end {worst:.3f} se")


def test_below_the_switch_the_normal_p_can_be_off() -> None:
    # property: why there is a switch. One whole change among 30 tiny ones weighs as 1.4
    # changes: the flipped sums are two humps at ±1, not a bell, and p is far from normal.
    d = np.concatenate([[1.0], np.random.default_rng(0).normal(0, 0.1, size=30), np.zeros(100)])
    assert effective_changes(d) < 2
    p_ref, _ = _reference_p(d, seed=0)
    assert abs(normal_test(d) - p_ref) > 0.1


def test_compare_paired_switches_on_the_effective_changes() -> None:
    gen = np.random.default_rng(8)
    a = gen.choice(MRR_VALUES, size=2_000)
    few, many = a.copy(), a.copy()
    few[:20] = gen.choice(MRR_VALUES, size=20)
    many[:600] = gen.choice(MRR_VALUES, size=600)
    small = compare_paired(a, few, seed=0, key="k")
    large = compare_paired(a, many, seed=0, key="k")
    assert (small.ci_method, small.p_method) == ("bootstrap", "monte_carlo")
    assert (large.ci_method, large.p_method, large.p_draws) == ("normal", "normal", 0)
    # the switches are arguments: at infinity everything is drawn, as before issue 36
    drawn = compare_paired(a, many, seed=0, key="k", normal_ci_from=math.inf, normal_p_from=math.inf)
    assert (drawn.ci_method, drawn.p_method) == ("bootstrap", "monte_carlo")


# ---------- the sparse draws against the previous implementation ----------


def _dense_bootstrap(d: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """compare's bootstrap before issue 36: n case indices per resample, all n cases drawn."""
    rng = np.random.default_rng(seed)
    n = d.shape[0]
    means = np.take(d, rng.integers(0, n, size=(resamples, n))).mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def _dense_sign_flip(d: np.ndarray, resamples: int, seed: int) -> float:
    """compare's Monte-Carlo sign-flip test before issue 36: a sign for each of the n cases, zeros too."""
    rng = np.random.default_rng(seed)
    signs = rng.integers(0, 2, size=(resamples, d.shape[0])) * 2 - 1
    t = abs(d.sum()) - 1e-9 * np.abs(d).sum()
    return (1 + int(np.count_nonzero(np.abs(signs @ d) >= t))) / (1 + resamples)


@pytest.mark.parametrize("kind", ["binary", "mrr@10", "judge", "lopsided"])
def test_sparse_bootstrap_agrees_with_drawing_every_case(kind: str) -> None:
    # The same distribution, other draws: the ends agree within both bootstraps' noise
    # (about 0.03·se each at 10,000 resamples; 0.15·se is 3.5 standard deviations of the gap).
    d = _sample(kind, 25, 600, seed=4, lean=0.7)
    se = math.sqrt(float(np.var(d)) / d.shape[0])
    new = bootstrap_ci(d, resamples=10_000, rng=np.random.default_rng(1))
    old = _dense_bootstrap(d, 10_000, seed=2)
    assert abs(new[0] - old[0]) <= 0.15 * se and abs(new[1] - old[1]) <= 0.15 * se, (new, old, se)


@pytest.mark.parametrize("kind", ["mrr@10", "ndcg", "judge", "lopsided"])
def test_sign_flip_over_changed_cases_agrees_with_flipping_every_case(kind: str) -> None:
    # Zeros add nothing to a flipped sum: the same test. Tolerance: 4 standard errors of the
    # difference of two 10,000-pattern estimates.
    d = _sample(kind, 40, 400, seed=5, lean=0.62)
    new = permutation_test(d, resamples=10_000, rng=np.random.default_rng(1))
    old = _dense_sign_flip(d, 10_000, seed=2)
    assert abs(new - old) <= 4 * math.sqrt(2 * old * (1 - old) / 10_000) + 1e-4, (new, old)


# ---------- exact counts ----------


def test_one_sized_changes_are_counted_by_the_binomial() -> None:
    # by hand: 30 up, 10 down: p = P(|2U − 40| ≥ 20) = 2·Σ_{u ≥ 30} C(40, u) / 2^40
    d = np.array([0.2] * 30 + [-0.2] * 10 + [0.0] * 60)
    expected = Fraction(2 * sum(math.comb(40, u) for u in range(30, 41)), 2**40)
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert permutation_test(d, rng=rng) == pytest.approx(float(expected), rel=1e-12)
    assert rng.bit_generator.state == before  # counted, not drawn
    got = compare_paired(np.zeros(100), d, seed=0)
    assert (got.p_method, got.p_exact, got.p_draws) == ("exact", True, 0)


def test_the_binomial_count_equals_enumeration() -> None:
    # property: the two exact ways agree where both apply (c ≤ 13 enumerates)
    for ups in range(0, 13):
        d = [1.0] * ups + [-1.0] * (12 - ups)
        enumerated = permutation_test(d, rng=np.random.default_rng(0))
        counted = min(1.0, 2 * stats._binomial_tail(max(ups, 12 - ups), 12, 0.5))
        assert counted == pytest.approx(enumerated, rel=1e-12)


def test_binomial_tail_by_hand() -> None:
    # by hand: P(X ≥ 2), X ~ Bin(3, 0.1) = 3·0.01·0.9 + 0.001 = 0.028
    assert stats._binomial_tail(2, 3, 0.1) == pytest.approx(3 * 0.01 * 0.9 + 0.001, rel=1e-12)
    assert stats._binomial_tail(0, 3, 0.1) == 1.0 and stats._binomial_tail(4, 3, 0.1) == 0.0
    # 100,000 trials, far in the tail: no overflow, the normal tail's order of magnitude
    assert 0 < stats._binomial_tail(51_000, 100_000, 0.5) < 1e-9


# ---------- the normal approximation's pieces ----------


@pytest.mark.parametrize(
    ("values", "unit"),
    [
        pytest.param([1.0, 2.0, 3.0], 1.0, id="integers"),
        pytest.param([0.2, 0.4, 0.6000000000000001], 0.2, id="fifths"),  # by hand: 1/5, float noise allowed
        pytest.param([0.5, 1 / 3], 1 / 6, id="halves-and-thirds"),  # by hand: lcm(2, 3) = 6
        pytest.param([2.0, 4.0], 2.0, id="gcd"),
        pytest.param([0.1 * math.pi, 0.3], 0.0, id="no-lattice"),
        pytest.param([1 / 67, 0.5], 0.0, id="beyond-64ths"),  # by hand: 1/134 would do, past q = 64
    ],
)
def test_lattice_unit(values: list[float], unit: float) -> None:
    assert stats._lattice_unit(np.array(values)) == pytest.approx(unit, rel=1e-12)


def test_normal_test_by_hand() -> None:
    # by hand: d = (0.2 × 60, −0.2 × 40): Σ = 4, V = 100 · 0.04 = 4, unit 0.2: z = (4 − 0.2)/2 = 1.9
    d = [0.2] * 60 + [-0.2] * 40 + [0.0] * 7
    assert normal_test(d) == pytest.approx(math.erfc(1.9 / math.sqrt(2)), rel=1e-12)
    assert normal_test([]) is None and normal_test([0.0, 0.0]) == 1.0


def test_normal_ci_by_hand() -> None:
    # by hand: d = (1, 0, 0, 0): mean 1/4, deviations 3/4 and three −1/4
    d = np.array([1.0, 0.0, 0.0, 0.0])
    n, mean = 4, 0.25
    m2 = (0.75**2 + 3 * 0.25**2) / n  # 3/16
    m3 = (0.75**3 - 3 * 0.25**3) / n  # 3/32
    se, gamma = math.sqrt(m2 / n), m3 / m2**1.5 / math.sqrt(n)
    z = 1.959963984540054
    expected = (mean + se * (-z + gamma * (z * z - 1) / 6), mean + se * (z + gamma * (z * z - 1) / 6))
    assert normal_ci(d) == pytest.approx(expected, rel=1e-12)
    assert normal_ci([0.5, 0.5]) == (0.5, 0.5) and normal_ci([]) == (None, None)


def test_effective_changes_by_hand() -> None:
    assert effective_changes([1.0, -1.0, 1.0, 0.0]) == 3.0  # by hand: (3)² / 3
    assert effective_changes([2.0, 1.0]) == pytest.approx(25 / 17)  # by hand: (4 + 1)² / (16 + 1)
    assert effective_changes([0.0, 0.0]) == 0.0


# ---------- the sequential Monte-Carlo test ----------


def test_sequential_test_stops_once_p_above_alpha_is_settled() -> None:
    # property: a null-like sample stops at the first look (100 patterns), with p from them
    d = _sample("mrr@10", 40, 400, seed=7, lean=0.5)
    got = compare_paired(np.zeros(400), d, seed=0, key="k", alpha=0.05)
    assert got.p_method == "monte_carlo" and got.p_draws == 100 and got.p_value > 0.2
    full = compare_paired(np.zeros(400), d, seed=0, key="k")
    assert full.p_draws == 10_000
    # the first 100 patterns are the same draws either way
    test_seq = np.random.SeedSequence(0, spawn_key=_key_words("k")).spawn(2)[1]
    first = permutation_test(d, resamples=100, rng=np.random.default_rng(test_seq))
    assert got.p_value == first


def test_sequential_test_keeps_drawing_a_significant_change() -> None:
    d = _sample("mrr@10", 40, 400, seed=7, lean=0.95)
    got = compare_paired(np.zeros(400), d, seed=0, key="k", alpha=0.05)
    full = compare_paired(np.zeros(400), d, seed=0, key="k")
    assert got.p_draws == 10_000 and got.p_value == full.p_value < 0.01


def test_sequential_test_keeps_its_level() -> None:
    # property: under the null (symmetric changes) the sequential p is ≤ α no more often than
    # α, as the fixed-R test's: P(Binomial(300, 0.05) > 26) = 2.4e-3
    alarms = 0
    for seed in range(300):
        gen = np.random.default_rng(seed)
        d = gen.choice([1.0, 0.5, 1 / 3, 0.25], size=30) * np.where(gen.random(30) < 0.5, 1, -1)
        p = compare_paired(np.zeros(30), d, seed=seed, key="k", alpha=0.05).p_value
        alarms += p <= 0.05
    assert alarms <= 26

