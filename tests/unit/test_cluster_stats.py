"""Paired tests and intervals that resample whole conversations (issue 40 item 5, EVAL.md
"Conversations"): the turns of one conversation are not independent, so a run of
conversations is compared with the conversation as the unit. Each expected value here is
computed independently: by enumerating every sign pattern, by the textbook cluster-robust
formula written out, or by a plain loop over the same random draws.
"""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist

import numpy as np
import pytest

from evalkit.gate.verdict import paired_interval, t_quantile
from evalkit.metrics.stats import cluster_interval, compare_paired

# Six conversations of 1-4 turns: 0/1 hits in run a and run b.
A = np.array([1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 1], dtype=float)
B = np.array([1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 0], dtype=float)
CONV = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 4, 4, 5, 5])


def test_one_case_per_cluster_is_the_case_test() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.random(300), rng.random(300)
    plain = compare_paired(a, b, seed=3, key="m")
    single = compare_paired(a, b, seed=3, key="m", clusters=np.arange(300))
    assert (plain.ci, plain.p_value, plain.ci_method, plain.p_method) == (single.ci, single.p_value, single.ci_method,
                                                                         single.p_method)


def test_the_p_value_counts_every_sign_pattern_of_the_conversations() -> None:
    got = compare_paired(A, B, seed=0, key="m", clusters=CONV)
    d = B - A
    sums = [d[CONV == g].sum() for g in range(6)]
    observed = abs(sum(sums))
    # Independent: all 2^6 flips of the conversations' sums, counted by hand.
    extreme = sum(abs(sum(s * x for s, x in zip(signs, sums))) >= observed - 1e-12
                  for signs in itertools.product((1, -1), repeat=6))
    assert got.p_value == extreme / 64 and got.p_method == "exact"
    # The estimate is still the mean over turns.
    assert got.delta == pytest.approx(d.mean())


def test_the_bootstrap_draws_whole_conversations() -> None:
    d = B - A
    sums = np.array([d[CONV == g].sum() for g in range(6)])
    sizes = np.array([(CONV == g).sum() for g in range(6)], dtype=float)
    (lo, hi), method = cluster_interval(sums, sizes, resamples=2000, confidence=0.9, rng=np.random.default_rng(11),
                                        normal_from=math.inf)
    assert method == "bootstrap"
    # Independent: the same generator's draws, one resample at a time, ratio of sums.
    rng = np.random.default_rng(11)
    idx = rng.integers(0, 6, size=(2000, 6))
    means = [sum(sums[j] for j in row) / sum(sizes[j] for j in row) for row in idx]
    assert (lo, hi) == tuple(np.quantile(means, [0.05, 0.95], method="linear"))


def test_the_normal_interval_is_cluster_robust() -> None:
    rng = np.random.default_rng(5)
    d = rng.normal(0.1, 1.0, 1000)
    groups = rng.integers(0, 200, 1000)
    sums = np.bincount(groups, weights=d)
    sizes = np.bincount(groups).astype(float)
    (lo, hi), method = cluster_interval(sums, sizes, confidence=0.95, rng=np.random.default_rng(0))
    assert method == "normal"
    # Independent: se = sqrt(sum u^2) / n and the Cornish-Fisher skew term, written out.
    n, mean = d.size, d.mean()
    u = [sum(d[groups == g]) - (groups == g).sum() * mean for g in range(200)]
    se = math.sqrt(sum(x * x for x in u)) / n
    gamma = sum(x ** 3 for x in u) / sum(x * x for x in u) ** 1.5
    z = NormalDist().inv_cdf(0.975)
    assert lo == pytest.approx(mean + se * (-z + gamma * (z * z - 1) / 6), rel=1e-12)
    assert hi == pytest.approx(mean + se * (z + gamma * (z * z - 1) / 6), rel=1e-12)


def test_the_verdict_interval_uses_conversations_as_the_unit() -> None:
    d = B - A
    iv = paired_interval(d, scale=1.0, confidence=0.9, clusters=CONV)
    # Independent: CR1 variance with G = 6 conversations and t with G - 1 degrees of freedom.
    n, g, mean = d.size, 6, d.mean()
    u = [d[CONV == c].sum() - (CONV == c).sum() * mean for c in range(g)]
    var_mean = g / (g - 1) * sum(x * x for x in u) / n ** 2
    half = t_quantile(0.95, g - 1) * math.sqrt(var_mean + 1.0 / (n * (g - 1)))
    assert (iv.lo, iv.hi) == pytest.approx((max(mean - half, -1.0), min(mean + half, 1.0)))
    # One case per conversation: the case interval.
    assert paired_interval(d, scale=1.0, confidence=0.9, clusters=np.arange(n)) == paired_interval(d, scale=1.0, confidence=0.9)
    # Wider than treating 14 turns as independent: the clustering costs degrees of freedom.
    flat = paired_interval(d, scale=1.0, confidence=0.9)
    assert iv.hi - iv.lo > flat.hi - flat.lo


def test_the_detectable_change_is_that_of_whole_conversations() -> None:
    # Honest power with conversations: 60 conversations of 4 turns, a change made of whole
    # conversations losing a hit on every turn (the most spread a change of that size can
    # have). The printed mde, shown with 80% power by construction, must be shown at least
    # about that often by the conversation interval itself: simulated here with plain draws.
    from evalkit.gate.verdict import minimum_detectable

    g, m = 60, 4
    n, confidence = g * m, 1 - 2 * 0.05 / 8
    conv = np.repeat(np.arange(g), m)
    mde = minimum_detectable(0.0, n, confidence, 1.0, cluster_size=m)
    as_cases = minimum_detectable(0.0, n, confidence, 1.0)
    assert mde is not None and as_cases is not None
    # The conversations' figure is the larger: four correlated turns are not four cases.
    assert mde > 1.5 * as_cases
    rng = np.random.default_rng(11)
    trials, shown, shown_at_case_mde = 2000, 0, 0
    for _ in range(trials):
        lost = np.repeat(rng.random(g) < mde, m).astype(float)
        shown += paired_interval(-lost, scale=1.0, confidence=confidence, clusters=conv).hi < 0
        lost = np.repeat(rng.random(g) < as_cases, m).astype(float)
        shown_at_case_mde += paired_interval(-lost, scale=1.0, confidence=confidence, clusters=conv).hi < 0
    assert shown / trials >= 0.75, shown / trials
    # The per-case figure promised power it did not have.
    assert shown_at_case_mde / trials < 0.5, shown_at_case_mde / trials


def test_the_verdict_counts_more_conversations_to_settle() -> None:
    # An inconclusive conversation verdict says how many more conversations would settle it,
    # and its cases_needed settles it when drawn as whole conversations (simulated).
    from evalkit.gate.verdict import Member, build_verdict

    g, m = 40, 3
    conv = np.repeat(np.arange(g), m)
    rng = np.random.default_rng(2)
    per_conv = rng.choice([-1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0], g)
    d = np.repeat(per_conv, m)
    v = build_verdict([Member("recall_any", 5, "higher_is_better", 0.05, "registry", d, None, "r", clusters=conv)],
                      [], alpha=0.05).metrics[0]
    assert v.cases_per_conversation == pytest.approx(m)
    assert v.verdict == "inconclusive" and v.more_cases is not None
    assert v.more_conversations == math.ceil(v.more_cases / m)
    assert f"about {v.more_conversations:,} conversations" in v.reason
    total_g = math.ceil(v.cases_needed / m)
    settled = 0
    for _ in range(1000):
        draw = rng.choice(per_conv, total_g)
        x = paired_interval(np.repeat(draw, m), scale=1.0, confidence=1 - 0.05 * 2, clusters=np.repeat(np.arange(total_g), m))
        settled += x.lo > -0.05 or x.hi < 0
    assert settled / 1000 >= 0.72, settled / 1000
