"""A metric's value as the deciders read it from a metrics.json body (or its
`aggregate_metrics`): cells may be plain numbers or {"value": x, "n": n} dicts, @K metrics
live under `at_k[K]` or at the headline key for the run's primary K, and the operational
metrics sit in their own block. Pure; no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.metrics.registry import OPERATIONAL_KEYS
from evalkit.store.runlog import Cell, Met

__all__ = ["EPS", "OPERATIONAL", "aggregate_of", "comparison_k", "measured_ks", "number", "primary_k", "value_at"]

# Changes and floors are compared with this tolerance, so that 0.85 -> 0.80 with threshold
# 0.05 is not a regression because of float rounding.
EPS = 1e-9
# Read from a cell's operational_metrics block when the cell does not hold them at its top.
OPERATIONAL = frozenset(OPERATIONAL_KEYS)


def aggregate_of(metrics: Mapping[str, Any]) -> Mapping[str, Any]:
    """metrics.json's `aggregate_metrics`, or `metrics` itself when it already is one."""
    agg = metrics.get(Met.AGGREGATE)
    return agg if isinstance(agg, Mapping) else metrics


def number(value: Any) -> float | None:
    """A cell's value as a float; None for null, a bool or anything not a number."""
    # Cells may be plain numbers or {"value": x, "n": n} dicts; bools are not metrics.
    if isinstance(value, Mapping):
        value = value.get("value", value.get("mean"))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def primary_k(agg: Mapping[str, Any]) -> str | None:
    """The run's primary K (the headline keys' K) as a string, or None."""
    k = agg.get("k")
    return str(k) if isinstance(k, int) and not isinstance(k, bool) else None


def value_at(agg: Mapping[str, Any], key: str, at_k_key: str | None, k: str | None) -> float | None:
    """The metric at K: from `at_k[K]`, or the headline key when K is this run's primary K.

    None when the run did not measure K, so Recall@5 is never set against Recall@20.
    """
    if at_k_key is None or k is None:
        if key not in agg and key in OPERATIONAL:  # a full cell holds these in its operational_metrics
            return number((agg.get(Cell.OPERATIONAL) or {}).get(key))
        return number(agg.get(key))
    cell = (agg.get(Cell.AT_K) or {}).get(k)
    if isinstance(cell, Mapping) and at_k_key in cell:
        return number(cell[at_k_key])
    return number(agg.get(key)) if primary_k(agg) == k else None


def measured_ks(agg: Mapping[str, Any]) -> list[str]:
    """The K a run has numbers for, primary first."""
    out = [k for k in (agg.get(Cell.AT_K) or {}) if isinstance(k, str)]
    primary = primary_k(agg)
    if primary is not None:
        out = [primary, *[k for k in out if k != primary]]
    return out


def comparison_k(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> str | None:
    """The K at which the gate compares Recall@K and MRR@K: the baseline's primary K when the
    new run measured it too, else the new run's primary K when the baseline measured it, else
    the first other K both measured; None when they share no K."""
    base, new = measured_ks(aggregate_of(baseline_metrics)), measured_ks(aggregate_of(new_metrics))
    for k in (base[:1] + new[:1] + new[1:]):
        if k in base and k in new:
            return k
    return None
