"""Agreement between raters: humans among themselves, and a judge against humans.

Numpy kernels over plain lists; no I/O. `judges/grades.py` feeds them a run's human grades
and judge scores; EVAL.md ("Agreement among graders") states the same formulas. Each one
equals a reference library's (tests/unit/test_agreement.py): Cohen's kappa and the confusion
matrix sklearn's, Fleiss' kappa statsmodels', Krippendorff's alpha the `krippendorff`
package's, Spearman's rho scipy's. Undefined values (no pairs, no variation) are None, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

__all__ = [
    "cohen_kappa", "confusion_matrix", "fleiss_kappa", "krippendorff_alpha", "pairwise_kappas", "spearman",
]

Weights = Literal["linear", "quadratic"] | None
Level = Literal["nominal", "ordinal", "interval"]


def _index(values: Sequence[Any], categories: Sequence[Any]) -> np.ndarray:
    where = {c: i for i, c in enumerate(categories)}
    try:
        return np.array([where[v] for v in values], dtype=np.intp)
    except KeyError as e:
        raise ValueError(f"value {e.args[0]!r} is not one of the categories {list(categories)}") from None


def confusion_matrix(a: Sequence[Any], b: Sequence[Any], categories: Sequence[Any]) -> list[list[int]]:
    """Joint counts: row i = rater a gave categories[i], column j = rater b gave categories[j].

    Raises:
        ValueError: the lists differ in length, or a value is not a category.
    """
    if len(a) != len(b):
        raise ValueError(f"rater lists differ in length: {len(a)} vs {len(b)}")
    k = len(categories)
    counts = np.zeros((k, k), dtype=np.int64)
    np.add.at(counts, (_index(a, categories), _index(b, categories)), 1)
    return counts.tolist()


def cohen_kappa(a: Sequence[Any], b: Sequence[Any], categories: Sequence[Any], *, weights: Weights = None) -> float | None:
    """Cohen's kappa of two raters over the same items, optionally weighted.

    kappa = 1 - Σ w_ij O_ij / Σ w_ij E_ij, O the confusion matrix, E_ij = row_i × col_j / n,
    and w_ij = 1 - [i = j] (unweighted), |i - j| (linear) or (i - j)² (quadratic), i and j
    the positions of the categories in `categories` (in scale order). The weights' scale
    cancels, so (i - j)² / (k - 1)² gives the same kappa.

    Returns:
        kappa; None when there is no pair or Σ w E = 0 (both raters used one and the same
        category for every item: chance agreement is total and kappa undefined).
    """
    if not len(a):
        if len(b):
            raise ValueError(f"rater lists differ in length: 0 vs {len(b)}")
        return None
    observed = np.asarray(confusion_matrix(a, b, categories), dtype=float)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    idx = np.arange(len(categories))
    diff = np.abs(idx[:, None] - idx[None, :]).astype(float)
    w = {None: (diff > 0).astype(float), "linear": diff, "quadratic": diff**2}[weights]
    denom = float((w * expected).sum())
    if denom == 0:
        return None
    return 1.0 - float((w * observed).sum()) / denom


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from an items × categories table of how many raters chose each category.

    Every item must have the same number of raters m ≥ 2. With N items,
    P_i = (Σ_j n_ij² - m) / (m (m - 1)), P̄ = mean P_i, p_j = Σ_i n_ij / (N m),
    P_e = Σ_j p_j², kappa = (P̄ - P_e) / (1 - P_e).

    Returns:
        kappa; None without items or when P_e = 1 (every rating in one category).

    Raises:
        ValueError: items with different numbers of raters, or fewer than two.
    """
    table = np.asarray(counts, dtype=float)
    if table.size == 0:
        return None
    raters = table.sum(axis=1)
    m = raters[0]
    if np.any(raters != m) or m < 2:
        raise ValueError(f"Fleiss' kappa needs the same number (≥ 2) of raters per item, got {sorted(set(raters.tolist()))}")
    p_item = ((table**2).sum(axis=1) - m) / (m * (m - 1))
    p_cat = table.sum(axis=0) / table.sum()
    p_e = float((p_cat**2).sum())
    if p_e == 1:
        return None
    return (float(p_item.mean()) - p_e) / (1 - p_e)


def krippendorff_alpha(units: Sequence[Sequence[float | None]], level: Level = "ordinal") -> float | None:
    """Krippendorff's alpha over units each rated by any number of raters (missing allowed).

    `units[u]` holds the values the raters gave unit u (None or NaN: not rated). Units
    with fewer than two values are not pairable and left out. From the coincidence matrix
    o_ck = Σ_u (pairs of values (c, k) in u, ordered, from different raters) / (m_u - 1),
    n_c = Σ_k o_ck and n = Σ_c n_c:
        alpha = 1 - (n - 1) Σ_ck o_ck δ²_ck / Σ_ck n_c n_k δ²_ck
    with δ²_ck = [c ≠ k] (nominal), (c - k)² (interval), or, ordinal,
    (Σ_{g from c to k} n_g - (n_c + n_k) / 2)² over the values in order.

    Returns:
        alpha; None when no unit is pairable or every pairable value is the same (the
        expected disagreement is 0).
    """
    rows = [[float(v) for v in unit if v is not None and not math.isnan(float(v))] for unit in units]
    rows = [r for r in rows if len(r) >= 2]
    if not rows:
        return None
    values = np.unique(np.concatenate([np.asarray(r) for r in rows]))
    k = len(values)
    o = np.zeros((k, k))
    for r in rows:
        c = np.bincount(np.searchsorted(values, r), minlength=k).astype(float)
        # pairs from different raters: all ordered pairs minus each value with itself
        o += (np.outer(c, c) - np.diag(c)) / (len(r) - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if level == "nominal":
        d2 = 1.0 - np.eye(k)
    elif level == "interval":
        d2 = (values[:, None] - values[None, :]) ** 2
    elif level == "ordinal":
        cum = np.cumsum(n_c)
        i, j = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        between = cum[hi] - cum[lo] + n_c[lo]  # Σ n_g for g from lo to hi, both included
        d2 = (between - (n_c[i] + n_c[j]) / 2) ** 2
    else:
        raise ValueError(f"level must be nominal, ordinal or interval, got {level!r}")
    expected = float((np.outer(n_c, n_c) * d2).sum())
    if expected == 0:
        return None
    return 1.0 - float(n - 1) * float((o * d2).sum()) / expected


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    order = np.argsort(x, kind="mergesort")
    s = x[order]
    ranks = np.empty(len(x))
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or s[end] != s[start]:
            ranks[order[start:end]] = (start + end + 1) / 2  # mean of start+1 .. end
            start = end
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's correlation of the average ranks (ties share their mean rank).

    Returns:
        rho; None with fewer than two pairs or when either side is constant.
    """
    if len(a) != len(b):
        raise ValueError(f"lists differ in length: {len(a)} vs {len(b)}")
    if len(a) < 2:
        return None
    ra, rb = _ranks(np.asarray(a, dtype=float)), _ranks(np.asarray(b, dtype=float))
    ra -= ra.mean()
    rb -= rb.mean()
    denom = math.sqrt(float((ra**2).sum()) * float((rb**2).sum()))
    if denom == 0:
        return None
    return float((ra * rb).sum()) / denom


def pairwise_kappas(
    ratings: Mapping[str, Mapping[Any, Any]], categories: Sequence[Any], *, weights: Weights = "quadratic", min_items: int = 2,
) -> list[dict[str, Any]]:
    """Cohen's kappa of every pair of raters over the items both rated.

    Args:
        ratings: rater -> {item: category}.
        categories: the scale, in order.
        weights: as `cohen_kappa`.
        min_items: pairs sharing fewer items are left out.

    Returns:
        [{"graders": [r1, r2], "n": shared items, "kappa": ...}], raters in sorted order.
    """
    names = sorted(ratings)
    out = []
    for i, r1 in enumerate(names):
        for r2 in names[i + 1:]:
            shared = [item for item in ratings[r1] if item in ratings[r2]]
            if len(shared) < min_items:
                continue
            a = [ratings[r1][x] for x in shared]
            b = [ratings[r2][x] for x in shared]
            out.append({"graders": [r1, r2], "n": len(shared), "kappa": cohen_kappa(a, b, categories, weights=weights)})
    return out
