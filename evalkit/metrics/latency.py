"""Latency budgets (issue 13 item 2): seed 002's `latencyBudget` soft gate, per case; and
the target's own phases (`debug.timings_ms`) as the record keeps them (issue 30 item 5).

Pure functions over plain values; no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KNOWN_SERVER_PHASES",
    "MAX_EXTRA_PHASES",
    "case_latency_budget",
    "case_phase_budgets",
    "extra_phases_ms",
    "latency_budget_score",
    "phase_budget_problem",
]

# The contract's named phases of `debug.timings_ms` (docs/api-contract.md); the record keeps
# them as `<phase>_ms` beside `total_ms` and `judge_ms`, which the harness measures itself.
KNOWN_SERVER_PHASES = ("folder_selection", "retrieval", "generation")
_OWN_PHASES = ("total", "judge")
# Any other phase a target reports (e.g. `rerank`) is kept under the same form, at most this
# many per answer (a target cannot grow every record without bound).
MAX_EXTRA_PHASES = 16
_PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


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


def extra_phases_ms(timings: Mapping[str, Any]) -> dict[str, float]:
    """The phases of a target's `debug.timings_ms` beyond KNOWN_SERVER_PHASES, as record
    `latency` keys: {"rerank_ms": 12.5}.

    A name is kept lower-cased when it is 1-40 of `a-z 0-9 _` starting with a letter (others
    are dropped), with a finite number >= 0 (others dropped); `total` and `judge`, which the
    harness measures itself, become `server_total` / `server_judge`. At most
    MAX_EXTRA_PHASES, in the target's order.
    """
    out: dict[str, float] = {}
    for raw, value in timings.items():
        name = str(raw).strip().lower()
        if name in KNOWN_SERVER_PHASES or not _PHASE_NAME.fullmatch(name):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            continue
        if name in _OWN_PHASES:
            name = f"server_{name}"
        out[f"{name}_ms"] = float(value)
        if len(out) == MAX_EXTRA_PHASES:
            break
    return out


def phase_budget_problem(phase: str) -> str | None:
    """Why `phase` cannot carry a `--latency-budget PHASE=MS`, or None when it can: any phase
    a target reports (`folder_selection`, `retrieval`, `generation`, or another such as
    `rerank`), not the request as a whole (`--latency-budget-ms`) nor the judge (ours)."""
    if phase == "total":
        return "the whole request's budget is --latency-budget-ms MS"
    if phase == "judge":
        return "the judge's time is the harness's, not the target's; budgets are on the target's phases"
    if not _PHASE_NAME.fullmatch(phase):
        return f"not a phase name: {phase!r} (1-40 of a-z 0-9 _, starting with a letter, as in debug.timings_ms)"
    return None


def case_phase_budgets(latency: Mapping[str, Any], budgets: Mapping[str, float], *, failed: bool = False) -> dict[str, Any] | None:
    """The record's `phase_budgets`: per budgeted phase {budget_ms, latency_ms, score, within},
    scored as `latency_budget_score` on the phase's time (`latency.<phase>_ms`).

    A phase the answer did not report has latency_ms, score and within null (excluded from
    the means, as a target that omits timings_ms loses its phase latencies). None when no
    phase budget is set or the target failed the case.
    """
    if not budgets or failed:
        return None
    out: dict[str, Any] = {}
    for phase, budget in budgets.items():
        t = latency.get(f"{phase}_ms")
        known = isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t)
        out[phase] = {
            "budget_ms": float(budget),
            "latency_ms": float(t) if known else None,
            "score": latency_budget_score(t, budget) if known else None,
            "within": float(t) <= float(budget) if known else None,
        }
    return out
