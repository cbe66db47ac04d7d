"""evalkit/metrics/agreement.py against hand computations and the reference libraries
(sklearn, statsmodels, krippendorff, scipy: the dev extra; each check skips without its
library). Issue 42, item 1."""

from __future__ import annotations

import numpy as np
import pytest

from evalkit.metrics import agreement as ag

SCALE = [1, 2, 3, 4]


def _random_raters(seed: int, n_items: int, n_raters: int, p_missing: float = 0.0) -> list[list[float | None]]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 5, size=n_items)
    out = []
    for _ in range(n_items):
        out.append([])
    for u in range(n_items):
        for _ in range(n_raters):
            v = int(np.clip(truth[u] + rng.integers(-1, 2), 1, 4))
            out[u].append(None if rng.random() < p_missing else float(v))
    return out


def test_cohen_kappa_by_hand():
    # by hand: a = [1, 1, 2, 2], b = [1, 2, 2, 2]: p_o = 3/4; marginals a (2, 2), b (1, 3):
    # p_e = (2*1 + 2*3) / 16 = 1/2; kappa = (3/4 - 1/2) / (1 - 1/2) = 1/2
    assert ag.cohen_kappa([1, 1, 2, 2], [1, 2, 2, 2], [1, 2]) == pytest.approx(1 / 2)
    assert ag.cohen_kappa([], [], [1, 2]) is None
    assert ag.cohen_kappa([3, 3], [3, 3], SCALE) is None  # undefined, not 0
    with pytest.raises(ValueError, match="not one of the categories"):
        ag.cohen_kappa([5], [1], SCALE)


def test_fleiss_and_alpha_by_hand():
    # by hand: 2 items, 2 raters, categories (a, b): item 1 both a, item 2 one each.
    # P_1 = (4 - 2) / 2 = 1, P_2 = (1 + 1 - 2) / 2 = 0, P̄ = 1/2; p = (3/4, 1/4), P_e = 10/16
    # kappa = (1/2 - 10/16) / (1 - 10/16) = -1/3
    assert ag.fleiss_kappa([[2, 0], [1, 1]]) == pytest.approx(-1 / 3)
    with pytest.raises(ValueError, match="same number"):
        ag.fleiss_kappa([[2, 0], [1, 2]])
    # nominal alpha, same data as values (0, 0), (0, 1): o = [[2, 1], [1, 0]], n_c = (3, 1), n = 4
    # D_o ∝ (n - 1) Σ o δ = 3 * 2 = 6; D_e = Σ n_c n_k δ = 2 * 3 = 6; alpha = 1 - 6/6 = 0
    assert ag.krippendorff_alpha([[0, 0], [0, 1]], "nominal") == pytest.approx(0.0)
    assert ag.krippendorff_alpha([[1, None], [2]], "ordinal") is None  # nothing pairable
    assert ag.krippendorff_alpha([[2, 2], [2, 2, None]], "interval") is None  # no variation


def test_spearman_and_confusion_by_hand():
    # by hand: ranks a = (1, 2, 3), b = (1, 2.5, 2.5) -> centred (-1, 0, 1), (-1, .5, .5): rho = 1.5 / sqrt(2 * 1.5)
    assert ag.spearman([1, 2, 3], [0, 5, 5]) == pytest.approx(1.5 / np.sqrt(3))
    assert ag.spearman([1], [2]) is None and ag.spearman([1, 1], [1, 2]) is None
    assert ag.confusion_matrix([1, 2, 2], [2, 2, 1], [1, 2, 3]) == [[0, 1, 0], [1, 1, 0], [0, 0, 0]]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_cohen_kappa_equals_sklearn(seed: int, weights):
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, size=40)
    b = np.clip(a + rng.integers(-2, 3, size=40), 0, 5)
    labels = list(range(6))
    # reference: sklearn.metrics.cohen_kappa_score with the full scale as labels
    assert ag.cohen_kappa(a.tolist(), b.tolist(), labels, weights=weights) == pytest.approx(
        sk.cohen_kappa_score(a, b, labels=labels, weights=weights), abs=1e-12)
    assert ag.confusion_matrix(a.tolist(), b.tolist(), labels) == sk.confusion_matrix(a, b, labels=labels).tolist()


@pytest.mark.parametrize("seed", range(5))
def test_fleiss_kappa_equals_statsmodels(seed: int):
    ir = pytest.importorskip("statsmodels.stats.inter_rater")
    units = _random_raters(seed, 30, 3)
    table, _ = ir.aggregate_raters(np.array(units, dtype=int), n_cat=None)
    # reference: statsmodels' fleiss_kappa on the same items × categories table
    assert ag.fleiss_kappa(table.tolist()) == pytest.approx(ir.fleiss_kappa(table, method="fleiss"), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_equals_krippendorff(seed: int, level: str):
    kd = pytest.importorskip("krippendorff")
    units = _random_raters(seed, 25, 4, p_missing=0.3)
    data = np.array([[np.nan if v is None else v for v in u] for u in units]).T  # raters × units
    # reference: krippendorff.alpha over the raters × units matrix, NaN = missing
    assert ag.krippendorff_alpha(units, level) == pytest.approx(
        kd.alpha(reliability_data=data, level_of_measurement=level), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_spearman_equals_scipy(seed: int):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, size=30).astype(float)
    b = a + rng.normal(0, 1.5, size=30).round()
    # reference: scipy.stats.spearmanr (average ranks for ties)
    assert ag.spearman(a.tolist(), b.tolist()) == pytest.approx(stats.spearmanr(a, b)[0], abs=1e-12)


def test_pairwise_kappas_over_shared_items():
    ratings = {"ann": {"x": 1, "y": 2, "z": 3}, "bob": {"x": 1, "y": 2}, "cy": {"z": 3}}
    out = ag.pairwise_kappas(ratings, SCALE, weights=None)
    # ann-bob share x and y (perfect agreement); ann-cy share only z: under min_items, left out
    assert out == [{"graders": ["ann", "bob"], "n": 2, "kappa": pytest.approx(1.0)}]
