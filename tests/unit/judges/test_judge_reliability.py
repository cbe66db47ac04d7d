"""Quadratic-weighted kappa, disagreement, spot-check sampling and trial statistics."""

from __future__ import annotations

import math

import pytest

from evalkit.judges.reliability import (
    case_trial_stats,
    disagreement_rate,
    quadratic_weighted_kappa,
    reliability_summary,
    run_trial_stats,
    sample_indices,
    to_grade,
)


def test_kappa_perfect_agreement_is_one():
    # by hand: every pair on the diagonal -> Σ w O = 0 -> kappa = 1 - 0
    assert quadratic_weighted_kappa([0, 1, 2], [0, 1, 2]) == 1.0


def test_kappa_2x2_chance_level_is_zero():
    # by hand on grades {0, 5}: O = [[1, 1], [1, 1]], w(0,5) = 25/25 = 1, Σ w O = 2;
    # marginals 2, 2 / 2, 2 over n = 4 -> E = [[1, 1], [1, 1]], Σ w E = 2 -> 1 - 2/2
    assert quadratic_weighted_kappa([0, 0, 5, 5], [0, 5, 0, 5]) == pytest.approx(1 - 2 / 2)


def test_kappa_3x3_hand_example():
    # by hand on grades {1, 2, 3} of the 0-5 scale, w = (i - j)² / 25, n = 4:
    # O: (1,1), (2,3), (3,3), (3,2) -> Σ w O = (1 + 1) / 25
    # rows r1=1, r2=1, r3=2; cols c1=1, c2=1, c3=2; E_ij = r_i c_j / 4
    # Σ w E = (E12·1 + E13·4 + E21·1 + E23·1 + E31·4 + E32·1) / 25
    sum_we = (1 / 4 * 1 + 2 / 4 * 4 + 1 / 4 * 1 + 2 / 4 * 1 + 2 / 4 * 4 + 2 / 4 * 1) / 25
    assert quadratic_weighted_kappa([1, 2, 3, 3], [1, 3, 3, 2]) == pytest.approx(1 - (2 / 25) / sum_we)
    assert quadratic_weighted_kappa([1, 2, 3, 3], [1, 3, 3, 2]) == pytest.approx(7 / 11)


def test_kappa_undefined_cases():
    assert quadratic_weighted_kappa([], []) is None
    # by hand: one grade for everyone -> Σ w E = 0 -> undefined
    assert quadratic_weighted_kappa([3, 3], [3, 3]) is None
    with pytest.raises(ValueError):
        quadratic_weighted_kappa([1], [1, 2])


def test_kappa_is_symmetric():  # property
    a, b = [0, 1, 4, 5, 2], [1, 1, 3, 5, 0]
    assert quadratic_weighted_kappa(a, b) == pytest.approx(quadratic_weighted_kappa(b, a))


def test_disagreement_is_a_gap_of_more_than_one_point():
    # by hand: |5-3| = 2 > 1 counts, |4-4| = 0 and |2-3| = 1 do not -> 1/3
    assert disagreement_rate([5, 4, 2], [3, 4, 3]) == pytest.approx(1 / 3)
    assert disagreement_rate([], []) is None


def test_to_grade_rounds_halves_up_and_clips():
    assert [to_grade(x) for x in (4.5, 4.49, 2.5, -1, 7)] == [5, 4, 3, 0, 5]


def test_reliability_summary_pools_kinds():
    s = reliability_summary({"groundedness": [(5, 3), (4, 4)], "correctness": [(2, 3)]})
    # by hand: 1 of 3 pooled pairs differs by more than one point
    assert s["disagreement_rate"] == pytest.approx(1 / 3)
    assert s["n_pairs"] == 3
    assert s["by_judge"]["groundedness"]["disagreement_rate"] == pytest.approx(1 / 2)
    assert s["by_judge"]["correctness"]["mean_abs_diff"] == pytest.approx(1.0)


def test_sample_indices_is_seeded_sorted_and_bounded():
    a = sample_indices(100, 10, seed=7)
    assert a == sample_indices(100, 10, seed=7)
    assert a == sorted(a) and len(set(a)) == 10 and all(0 <= i < 100 for i in a)
    assert sample_indices(100, 10, seed=8) != a
    assert sample_indices(3, 10, seed=0) == [0, 1, 2]
    assert sample_indices(0, 5, seed=0) == []


def test_case_trial_stats():
    s = case_trial_stats([4, 5, 3])
    # by hand: mean 4, spread 5 - 3, sample std sqrt((0 + 1 + 1) / 2)
    assert s["mean"] == 4 and s["spread"] == 2 and s["std"] == pytest.approx(math.sqrt((0 + 1 + 1) / 2))
    assert case_trial_stats([3])["std"] == 0.0


def test_run_trial_stats():
    r = run_trial_stats([[4, 5, 3], [2, 2]])
    # by hand: case means 4 and 2, stds 1 and 0, spreads 2 and 0
    assert r["n"] == 2
    assert r["mean"] == pytest.approx((4 + 2) / 2)
    assert r["mean_case_std"] == pytest.approx((1 + 0) / 2)
    assert r["mean_case_spread"] == pytest.approx((2 + 0) / 2)
    # by hand: std of [4, 2] with ddof=1 is sqrt(2); / sqrt(2 cases)
    assert r["se_between_cases"] == pytest.approx(math.sqrt(2) / math.sqrt(2))
    # by hand: sqrt(1²/3 + 0²/2) / 2
    assert r["se_judge_noise"] == pytest.approx(math.sqrt(1 / 3 + 0 / 2) / 2)
    assert run_trial_stats([])["mean"] is None
