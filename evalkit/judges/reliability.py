"""How far to trust the judge: spot-check agreement and trial-to-trial variance.

Pure functions over plain numbers. EVAL.md, section "Judges", states the formulas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

SCALE = (0, 5)
DISAGREEMENT_GAP = 1
# Seed 000: "High disagreement (>20%) suggests judge instability" -- past it, a warning.
DISAGREEMENT_ALERT = 0.2
DISAGREEMENT_WARNING = "judge_disagreement"


def disagreement_warning(block: Any) -> dict[str, Any] | None:
    """The metrics.json warning for a `judge_reliability` block whose disagreement rate is
    above DISAGREEMENT_ALERT (strictly, as the seed's ">20%"), or None.

    `{"kind": "judge_disagreement", "severity": "warning", "message", "n", "of", "ids"}`:
    n disagreeing pairs of `of`, ids the disagreeing cases (at most 20)."""
    if not isinstance(block, dict):
        return None
    rate = block.get("disagreement_rate")
    if not isinstance(rate, int | float) or isinstance(rate, bool) or rate <= DISAGREEMENT_ALERT:
        return None
    second = block.get("second_judge") if isinstance(block.get("second_judge"), dict) else {}
    who = second.get("model") or second.get("provider") or "the second judge"
    ids = [i for i in block.get("disagreeing_case_ids") or [] if isinstance(i, str)]
    return {
        "kind": DISAGREEMENT_WARNING,
        "severity": "warning",
        "message": (
            f"the judge and {who} disagree on {rate:.0%} of the spot-checked verdicts"
            + (" (a spot check of an earlier judging session)" if block.get("carried_over") else "")
            + f" (more than "
            f"{DISAGREEMENT_ALERT:.0%}: the judge is unstable); read the judge scores with care, and look at the "
            "disagreeing cases before trusting a change in them"
        ),
        "n": block.get("n_disagreements"),
        "of": block.get("n_pairs"),
        "ids": ids[:20],
    }


def to_grade(score: float, lo: int = SCALE[0], hi: int = SCALE[1]) -> int:
    """Round a 0-5 score to an integer grade, halves up (4.5 -> 5), clipped to the scale."""
    return int(min(hi, max(lo, math.floor(score + 0.5))))


def quadratic_weighted_kappa(a: Sequence[int], b: Sequence[int], *, lo: int = SCALE[0], hi: int = SCALE[1]) -> float | None:
    """Cohen's kappa with quadratic weights between two raters on the integer scale lo..hi.

    kappa = 1 - Σ w_ij O_ij / Σ w_ij E_ij, with w_ij = (i - j)² / (hi - lo)², O the observed
    joint counts and E_ij = row_i × col_j / n the counts expected from the marginals.

    Returns:
        kappa in [-1, 1]; None when there are no pairs or Σ w E = 0 (both raters gave one
        and the same grade to every item, so chance agreement is total and kappa undefined).
    """
    if len(a) != len(b):
        raise ValueError(f"rater lists differ in length: {len(a)} vs {len(b)}")
    if not a:
        return None
    k = hi - lo + 1
    observed = np.zeros((k, k))
    for x, y in zip(a, b, strict=True):
        observed[int(x) - lo, int(y) - lo] += 1
    n = observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / n
    idx = np.arange(k)
    weights = (idx[:, None] - idx[None, :]) ** 2 / (k - 1) ** 2
    denom = float((weights * expected).sum())
    if denom == 0:
        return None
    return 1.0 - float((weights * observed).sum()) / denom


def disagreement_rate(a: Sequence[float], b: Sequence[float], *, gap: float = DISAGREEMENT_GAP) -> float | None:
    """Share of pairs whose scores differ by more than `gap` (seed: "> 1 point"); None if no pairs."""
    if not a:
        return None
    return sum(1 for x, y in zip(a, b, strict=True) if abs(x - y) > gap) / len(a)


def sample_indices(n_items: int, n: int, seed: int) -> list[int]:
    """A seeded random subset of min(n, n_items) indices, sorted (np.random.default_rng(seed))."""
    size = min(max(0, n), n_items)
    if size == 0:
        return []
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(n_items, size=size, replace=False))


def reliability_summary(
    pairs: dict[str, list[tuple[float, float]]], binary: dict[str, list[tuple[bool, bool]]] | None = None
) -> dict[str, Any]:
    """Agreement of the main and the second judge, per judge kind and pooled.

    Seed 000: a pair disagrees on a "score difference > 1 point or different binary
    classification". Score pairs disagree when |a - b| > DISAGREEMENT_GAP; binary pairs
    (the abstention classifier's `abstained`, the conflict judge's `acknowledged`) when
    a != b.

    Args:
        pairs: kind -> [(main score, second score)] over spot-checked cases both judged.
        binary: kind -> [(main decision, second decision)] likewise.

    Returns:
        {"disagreement_rate", "weighted_kappa", "n_pairs", "n_disagreements", "by_judge":
        {kind: {...}}}: the pooled rate and counts use every pair of every kind, score and
        binary; kappa is on the score pairs' integer grades (to_grade) only.
    """
    by_judge: dict[str, Any] = {}
    all_a: list[float] = []
    all_b: list[float] = []
    n_disagree = 0
    for kind, ps in pairs.items():
        a = [p[0] for p in ps]
        b = [p[1] for p in ps]
        all_a += a
        all_b += b
        differ = sum(1 for x, y in ps if abs(x - y) > DISAGREEMENT_GAP)
        n_disagree += differ
        by_judge[kind] = {
            "disagreement_rate": disagreement_rate(a, b),
            "weighted_kappa": quadratic_weighted_kappa([to_grade(x) for x in a], [to_grade(x) for x in b]),
            "mean_abs_diff": (sum(abs(x - y) for x, y in ps) / len(ps)) if ps else None,
            "n": len(ps),
            "n_disagree": differ,
        }
    n_binary = 0
    for kind, bs in (binary or {}).items():
        differ = sum(1 for x, y in bs if bool(x) != bool(y))
        n_binary += len(bs)
        n_disagree += differ
        by_judge[kind] = {"disagreement_rate": differ / len(bs) if bs else None, "n": len(bs), "n_disagree": differ}
    n_pairs = len(all_a) + n_binary
    return {
        "disagreement_rate": n_disagree / n_pairs if n_pairs else None,
        "weighted_kappa": quadratic_weighted_kappa([to_grade(x) for x in all_a], [to_grade(x) for x in all_b]),
        "n_pairs": n_pairs,
        "n_disagreements": n_disagree,
        "by_judge": by_judge,
    }


def case_trial_stats(scores: Sequence[float]) -> dict[str, Any]:
    """One case's trials: mean, spread = max - min, sample std (ddof=1; 0 for one trial)."""
    n = len(scores)
    if n == 0:
        return {"n": 0, "scores": [], "mean": None, "spread": None, "std": None}
    mean = sum(scores) / n
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "scores": list(scores), "mean": mean, "spread": max(scores) - min(scores), "std": std}


def run_trial_stats(cases: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Judge variance over a run from each case's trial scores.

    - mean: mean over cases of the per-case mean score.
    - mean_case_std / mean_case_spread: mean over cases of the per-case std / spread.
    - se_between_cases: std of the per-case means (ddof=1) / sqrt(n): the usual SE of the
      run mean, mixing question sampling and judge noise.
    - se_judge_noise: sqrt(Σ_i s_i² / T_i) / n, the part of the run mean's SE due to the
      judge alone (s_i = case std, T_i = its number of trials).
    Cases without a successful trial are left out; None when no case is left.
    """
    per_case = [case_trial_stats(list(c)) for c in cases if len(c) > 0]
    n = len(per_case)
    if n == 0:
        return {"n": 0, "mean": None, "mean_case_std": None, "mean_case_spread": None, "se_between_cases": None, "se_judge_noise": None}
    means = [c["mean"] for c in per_case]
    mean = sum(means) / n
    se_between = math.sqrt(sum((m - mean) ** 2 for m in means) / (n - 1)) / math.sqrt(n) if n > 1 else None
    se_noise = math.sqrt(sum(c["std"] ** 2 / c["n"] for c in per_case)) / n
    return {
        "n": n,
        "mean": mean,
        "mean_case_std": sum(c["std"] for c in per_case) / n,
        "mean_case_spread": sum(c["spread"] for c in per_case) / n,
        "se_between_cases": se_between,
        "se_judge_noise": se_noise,
    }
