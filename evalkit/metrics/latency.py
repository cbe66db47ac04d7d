"""Latency budgets (issue 13 item 2): seed 002's `latencyBudget` soft gate, per case.

Pure functions over plain values; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["case_latency_budget", "latency_budget_score"]


def latency_budget_score(t_ms: float, budget_ms: float) -> float:
    """Seed 002's latencyBudget score of one case.

    score = 1                                   if t <= B  (within budget, inclusive)
          = max(0, 1 - (t - B) / B)             if t >  B

    with t the case's latency and B its budget, both in ms. So the score falls linearly
    from 1 at t = B to 0 at t = 2B and stays 0 beyond: B = 2000 ms, t = 1500 -> 1.0,
    t = 3000 -> 0.5, t = 4000 -> 0.0, t = 5000 -> 0.0.

    Raises:
        ValueError: B <= 0, or t or B not a finite number (t < 0 is clamped to 0).
    """
    if not (isinstance(budget_ms, int | float) and math.isfinite(budget_ms) and budget_ms > 0):
        raise ValueError(f"a latency budget must be a positive number of ms, got {budget_ms!r}")
    if not (isinstance(t_ms, int | float) and math.isfinite(t_ms)):
        raise ValueError(f"a latency must be a finite number of ms, got {t_ms!r}")
    t = max(0.0, float(t_ms))
    if t <= budget_ms:
        return 1.0
    return max(0.0, 1.0 - (t - budget_ms) / budget_ms)


def case_latency_budget(
    case: Mapping[str, Any], total_ms: float | None, run_budget_ms: float | None, *, failed: bool = False
) -> dict[str, Any] | None:
    """The record's `latency_budget`: {budget_ms, source, latency_ms, score, within}.

    The budget is the case's own `constraints.latency_budget_ms` when set ("case"), else
    the run's `--latency-budget-ms` ("run"). t is the case's `latency.total_ms`: the wall
    time of the whole request to the target, retries included (the time seed 002 takes
    around its task), or the logged time of a replayed answer. `within` is t <= budget.

    Returns:
        None when no budget applies, when the target failed the case (`failed`: it has no
        latency to judge; excluded from the means and counted in n_errors, as abstention
        is), or when t is unknown.
    """
    constraints = case.get("constraints")
    own = constraints.get("latency_budget_ms") if isinstance(constraints, Mapping) else None
    budget, source = (own, "case") if own is not None else (run_budget_ms, "run")
    if budget is None or failed or total_ms is None:
        return None
    score = latency_budget_score(total_ms, budget)
    return {
        "budget_ms": float(budget),
        "source": source,
        "latency_ms": float(total_ms),
        "score": score,
        "within": float(total_ms) <= float(budget),
    }
