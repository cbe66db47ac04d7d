"""The regression gate: did a headline metric get worse than the baseline by more than allowed?

Shared by run_eval (`--baseline RUN_ID`) and compare_runs. Pure functions over two
metrics.json bodies (or their `aggregate_metrics`); no I/O.

Every threshold is an absolute change on the metric's own scale:

| metric (metrics.json key)  | regression when                          | flag                                  | default |
| -------------------------- | ---------------------------------------- | ------------------------------------- | ------- |
| recall_at_k_avg (Recall@K) | new < baseline - threshold               | --regression-threshold-recall         | 0.05    |
| mrr_avg (MRR@K)            | new < baseline - threshold               | --regression-threshold-mrr            | 0.10    |
| scope_miss_rate            | new > baseline + threshold               | --regression-threshold-scope-miss     | 0.10    |
| groundedness_avg (0-5)     | new < baseline - threshold               | --regression-threshold-groundedness   | 0.5     |

A metric that either run did not compute (null, e.g. groundedness of a retrieval-only run,
scope miss with folder_mode off) is skipped and listed as skipped, never counted as 0.
Changes are compared with a 1e-9 tolerance so that 0.85 -> 0.80 with threshold 0.05 is
not a regression because of float rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

_EPS = 1e-9


@dataclass(frozen=True)
class Thresholds:
    """Largest allowed absolute worsening per metric (see the module table)."""

    recall: float = 0.05
    mrr: float = 0.10
    scope_miss: float = 0.10
    groundedness: float = 0.5


@dataclass(frozen=True)
class Regression:
    """One metric that got worse by more than its threshold."""

    metric: str
    baseline: float
    new: float
    delta: float
    threshold: float
    direction: Literal["higher_is_better", "lower_is_better"]

    @property
    def message(self) -> str:
        worse = "dropped" if self.direction == "higher_is_better" else "rose"
        return (
            f"{self.metric} {worse} by {abs(self.delta):.4g} "
            f"({self.baseline:.4g} -> {self.new:.4g}; allowed {self.threshold:.4g})"
        )

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


# (metrics.json key, at_k key, Thresholds attribute, direction)
_GATED: tuple[tuple[str, str | None, str, str], ...] = (
    ("recall_at_k_avg", "recall_any", "recall", "higher_is_better"),
    ("mrr_avg", "mrr", "mrr", "higher_is_better"),
    ("scope_miss_rate", None, "scope_miss", "lower_is_better"),
    ("groundedness_avg", None, "groundedness", "higher_is_better"),
)


def gated_metrics() -> list[str]:
    """The metric keys the gate looks at, in report order."""
    return [key for key, *_ in _GATED]


def _aggregate(metrics: Mapping[str, Any]) -> Mapping[str, Any]:
    agg = metrics.get("aggregate_metrics")
    return agg if isinstance(agg, Mapping) else metrics


def _number(value: Any) -> float | None:
    # Cells may be plain numbers or {"value": x, "n": n} dicts; bools are not metrics.
    if isinstance(value, Mapping):
        value = value.get("value", value.get("mean"))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _primary_k(agg: Mapping[str, Any]) -> str | None:
    k = agg.get("k")
    return str(k) if isinstance(k, int) and not isinstance(k, bool) else None


def _value(agg: Mapping[str, Any], key: str, at_k_key: str | None, k: str | None) -> float | None:
    # When the two runs have different primary K, compare at the new run's K if both
    # runs measured it (aggregate_metrics.at_k), so Recall@5 is never set against Recall@10.
    if at_k_key and k is not None:
        cell = (agg.get("at_k") or {}).get(k)
        if isinstance(cell, Mapping) and at_k_key in cell:
            return _number(cell[at_k_key])
    return _number(agg.get(key))


def check_regressions(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
) -> list[Regression]:
    """Compare two runs' headline metrics.

    Args:
        baseline_metrics: metrics.json of the baseline run (or its aggregate_metrics).
        new_metrics: metrics.json of the new run (or its aggregate_metrics).
        thresholds: allowed absolute worsening per metric; defaults as in the module table.

    Returns:
        The regressions, in the order recall, MRR, scope miss, groundedness. Empty = passed.
    """
    thresholds = thresholds or Thresholds()
    base, new = _aggregate(baseline_metrics), _aggregate(new_metrics)
    k = _primary_k(new)
    out: list[Regression] = []
    for key, at_k_key, attr, direction in _GATED:
        b = _value(base, key, at_k_key, k)
        n = _value(new, key, at_k_key, k)
        if b is None or n is None:
            continue
        limit = float(getattr(thresholds, attr))
        delta = n - b
        worse = -delta if direction == "higher_is_better" else delta
        if worse > limit + _EPS:
            out.append(Regression(key, b, n, delta, limit, direction))  # type: ignore[arg-type]
    return out


def skipped_metrics(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> list[str]:
    """Gated metrics that one of the runs did not compute (null), so the gate could not check them."""
    base, new = _aggregate(baseline_metrics), _aggregate(new_metrics)
    k = _primary_k(new)
    return [
        key
        for key, at_k_key, _, _ in _GATED
        if _value(base, key, at_k_key, k) is None or _value(new, key, at_k_key, k) is None
    ]


def gate_result(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
    *,
    baseline_run_id: str | None = None,
    allow_regressions: bool = False,
) -> dict[str, Any]:
    """The `gate` object written to metrics.json and printed by `--json`.

    Returns:
        {"passed", "allowed", "baseline_run_id", "thresholds", "regressions": [{metric, baseline,
        new, delta, threshold, direction, message}], "skipped": [metric]}. `passed` is False
        whenever there is a regression; `allowed` records --allow-regressions.
    """
    thresholds = thresholds or Thresholds()
    regressions = check_regressions(baseline_metrics, new_metrics, thresholds)
    return {
        "passed": not regressions,
        "allowed": bool(allow_regressions),
        "baseline_run_id": baseline_run_id,
        "thresholds": asdict(thresholds),
        "regressions": [r.to_dict() for r in regressions],
        "skipped": skipped_metrics(baseline_metrics, new_metrics),
    }
