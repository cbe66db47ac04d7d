"""Absolute floors on a run's own numbers (issue 13 item 4): `--threshold 0.7` /
`--threshold recall_at_k_avg=0.8` (seed 002's MVP/Beta/GA 70/80/90 % strategy), beside the
baseline gate; no baseline needed. `parse_thresholds` reads the flag (config validates it
before anything runs), `threshold_check` checks a metrics.json against it. Pure; no I/O, no
numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from evalkit.gate.thresholds import parse_threshold_value
from evalkit.gate.values import EPS, OPERATIONAL, aggregate_of, number
from evalkit.metrics.custom import custom_value, is_custom_name
from evalkit.metrics.keys import HEADLINE_AT_K, canonical_key
from evalkit.metrics.registry import METRICS
from evalkit.metrics.retrieval import AT_K_METRICS
from evalkit.store.runlog import Cell

__all__ = ["ALL_DEFAULT", "DEFAULT_THRESHOLD_METRICS", "measured_value", "parse_thresholds", "threshold_check",
           "threshold_metric_names"]

# The key under which a bare `--threshold 0.7` is stored in RunSettings.thresholds.
ALL_DEFAULT = "*"
# What a bare threshold applies to: the headline scores on [0, 1] where higher is better.
# Not precision (bounded by |gold| / K, it measures the labels as much as the retriever),
# not the judges' 0-5 means (another scale), not the lower-is-better rates.
DEFAULT_THRESHOLD_METRICS: tuple[str, ...] = tuple(m.key for m in METRICS if m.default_threshold)
# metrics.json aggregate key -> (largest value of its scale, direction). "min": the value
# must be >= the threshold; "max" (lower is better): the value must be <= the threshold.
_THRESHOLD_SCALE: dict[str, tuple[float, str]] = {
    m.key: (m.scale, "max" if m.direction == "lower" else "min") for m in METRICS if m.threshold
}
# Per-K names (`ndcg@10`): metrics.keys.metric_key over retrieval.AT_K_METRICS, all on [0, 1].
_AT_K_NAMES = AT_K_METRICS
_AT_K_HEADLINE = {at_k: headline for headline, at_k in HEADLINE_AT_K.items()}
# Why a metric can be unmeasured, said next to "not measured".
_NOT_MEASURED_HINT = {
    "latency_budget_score_avg": "no latency budget applied: set --latency-budget-ms or a case's constraints.latency_budget_ms",
    "within_budget_rate": "no latency budget applied: set --latency-budget-ms or a case's constraints.latency_budget_ms",
    "groundedness_avg": "no judge ran (retrieval-only?) or every case was excluded",
    "correctness_avg": "no judge ran (retrieval-only?) or every case was excluded",
    "abstention_accuracy": "no unanswerable case with a known abstention",
    "hallucination_rate_unanswerable": "no unanswerable case with a known abstention",
    "false_abstention_rate": "no answerable case with a known abstention",
    "scope_miss_rate": "folder mode off, or no answerable case",
}


def _threshold_scale(name: str) -> tuple[float, str] | None:
    """(scale max, direction) of a threshold-able metric name; None when unknown."""
    if name in _THRESHOLD_SCALE:
        return _THRESHOLD_SCALE[name]
    base, sep, k = name.partition("@")
    if sep and base in _AT_K_NAMES and k.isdigit() and int(k) >= 1:
        return (1.0, "min")
    return None


def threshold_metric_names() -> list[str]:
    """Every metric name a threshold may name (the registry's `threshold`; the per-K form
    shown as `name@K`)."""
    return [*_THRESHOLD_SCALE, *(f"{m}@K" for m in _AT_K_NAMES)]


def parse_thresholds(value: Any, ks: Sequence[int] | None = None) -> dict[str, float]:
    """Thresholds as given (CLI strings, a number, a dict) -> {metric: threshold}.

    Accepted: a number (`0.7`: every DEFAULT_THRESHOLD_METRICS the run measures, stored
    under ALL_DEFAULT "*"), a string "0.7" / "70%" / "name=0.8" / "name=80%", a list of
    those (repeated --threshold), or a dict {name: value} ("*" for the bare form). Later
    entries win. A name is a metrics.json aggregate key ("recall_at_k_avg", "mrr_avg",
    "abstention_accuracy", ...) or a per-K key ("ndcg@10"; K must be one of the run's `ks`).
    A value must lie on its metric's scale: [0, 1] for rates and retrieval means, [0, 5]
    for groundedness_avg / correctness_avg.

    Raises:
        ValueError: one message naming every bad entry, with a suggestion for an unknown
            name (difflib over threshold_metric_names()).
    """
    import difflib

    if value is None:
        return {}
    if isinstance(value, Mapping):
        items: list[tuple[str, Any]] = [(str(k), v) for k, v in value.items()]
    else:
        entries = [value] if isinstance(value, str | int | float) else list(value)
        items = []
        for entry in entries:
            if isinstance(entry, str) and "=" in entry:
                name, _, val = entry.partition("=")
                items.append((name.strip(), val.strip()))
            else:
                items.append((ALL_DEFAULT, entry))
    out: dict[str, float] = {}
    problems: list[str] = []
    # ir_measures' names ("nDCG@10", "R@5") are read as ours.
    items = [(name if name == ALL_DEFAULT else canonical_key(name), raw) for name, raw in items]
    for name, raw in items:
        try:
            v = parse_threshold_value(raw)
        except (TypeError, ValueError):
            problems.append(f"{name if name != ALL_DEFAULT else 'threshold'}: not a number: {raw!r} (e.g. 0.7 or 70%)")
            continue
        if v != v:
            problems.append(f"{name}: not a number: {raw!r}")
            continue
        if name == ALL_DEFAULT:
            scale = (1.0, "min")
        elif is_custom_name(name):
            # A project's own metric: its scale and direction are in the run's metrics.json,
            # read by threshold_check; here only its sign can be checked.
            scale = (math.inf, "min")
        else:
            scale = _threshold_scale(name)
            if scale is None:
                if name in _AT_K_HEADLINE:  # "mrr": the headline key, or the per-K form
                    k0 = int(ks[0]) if ks else 5
                    hint = f"; did you mean {_AT_K_HEADLINE[name]!r} (at the primary K) or '{name}@{k0}'?"
                else:
                    names = [n for n in threshold_metric_names() if not n.endswith("@K")]
                    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                problems.append(
                    f"unknown metric {name!r}{hint} (a metrics.json aggregate key such as recall_at_k_avg, "
                    f"mrr_avg, ndcg_at_k_avg, or a per-K key such as ndcg@10)"
                )
                continue
            base, sep, k = name.partition("@")
            if sep and ks is not None and int(k) not in {int(x) for x in ks}:
                problems.append(
                    f"{name}: the run measures K = {', '.join(str(x) for x in ks)} only; add --k {int(k)} or use "
                    f"{base}@{ks[0]}"
                )
                continue
        top = scale[0]
        if not 0.0 <= v <= top:
            pct = f" or {v:g}%" if top == 1.0 and 1.0 < v <= 100.0 else ""
            what = "threshold" if name == ALL_DEFAULT else name
            problems.append(f"{what}: {v:g} is off the metric's scale [0, {top:g}] (did you mean {v / 100:g}{pct}?)"
                            if pct else f"{what}: {v:g} is off the metric's scale [0, {top:g}]")
            continue
        out[name] = v
    if problems:
        raise ValueError("; ".join(problems))
    return out


def _measured(agg: Mapping[str, Any], name: str) -> tuple[float | None, int]:
    """(value, n) of `name` in an aggregate_metrics cell; (None, 0) when not there."""
    base, sep, k = name.partition("@")
    if sep:
        block = (agg.get(Cell.AT_K) or {}).get(k)
        if not isinstance(block, Mapping) or base not in block:
            return None, 0
        n = (block.get("n_by_metric") or {}).get(base, block.get("n", 0))
        return number(block.get(base)), int(n or 0)
    if name in OPERATIONAL:
        op = agg.get(Cell.OPERATIONAL) or {}
        return number(op.get(name)), int(op.get("n") or 0)
    n = (agg.get("n") or {}).get(name)
    return number(agg.get(name)), int(n or 0) if isinstance(n, int | float) else 0


def measured_value(metrics: Mapping[str, Any], name: str) -> tuple[float | None, int]:
    """(value, n) of a metric `--threshold` may name, in metrics.json (or its aggregate cell):
    an aggregate key, a per-K key (`ndcg@10`), an operational rate, or a project's own metric
    (`rubric/helpfulness`); (None, 0) when the run did not measure it."""
    agg = aggregate_of(metrics)
    if is_custom_name(name):
        value, n, _ = custom_value(agg, name)
        return value, n
    return _measured(agg, canonical_key(name))


def threshold_check(metrics: Mapping[str, Any], thresholds: Mapping[str, float]) -> dict[str, Any]:
    """Check a run's metrics against absolute thresholds (issue 13 item 4).

    A named metric passes when value >= threshold ("min"; value <= threshold for a
    lower-is-better rate, "max"), with a 1e-9 tolerance, so 0.7 against 0.7 passes. A
    named metric the run did not measure (null, or n = 0) fails: "not measured" is never
    a pass. The bare form ("*": 0.7) applies to each DEFAULT_THRESHOLD_METRICS the run
    measured and not named on its own; the ones it did not measure are listed in
    `not_measured` (no budget, no unanswerable case...) and fail nothing, but a bare
    threshold that found nothing measured at all fails.

    Args:
        metrics: metrics.json (or its aggregate_metrics).
        thresholds: {metric: threshold} as from parse_thresholds ("*" for the bare form).

    Returns:
        {"passed", "thresholds" (as given), "checked": [{metric, value, n, threshold,
        direction, passed}], "not_measured": [{metric, threshold, reason}], "failures":
        [one line each]}.
    """
    agg = aggregate_of(metrics)
    named = [(name, float(t)) for name, t in thresholds.items() if name != ALL_DEFAULT]
    bare = thresholds.get(ALL_DEFAULT)
    explicit = {name for name, _ in named}
    wanted: list[tuple[str, float, bool]] = [(name, t, True) for name, t in named]
    if bare is not None:
        wanted = [(name, float(bare), False) for name in DEFAULT_THRESHOLD_METRICS if name not in explicit] + wanted
    checked: list[dict[str, Any]] = []
    not_measured: list[dict[str, Any]] = []
    failures: list[str] = []
    for name, t, strict in wanted:
        scale = _threshold_scale(name) or (1.0, "min")
        direction = scale[1]
        value, n = _measured(agg, name)
        if is_custom_name(name):
            value, n, definition = custom_value(agg, name)
            if definition is not None:
                direction = "max" if definition.get("direction") == "lower" else "min"
                top = float(definition.get("scale") or 1.0)
                if t > top:
                    failures.append(f"{name}: the threshold {t:g} is off the metric's scale [0, {top:g}]")
                    continue
        if value is None or n == 0:
            reason = _NOT_MEASURED_HINT.get(name, "null or n = 0 in this run")
            not_measured.append({"metric": name, "threshold": t, "reason": reason})
            if strict:
                failures.append(f"{name}: not measured by this run ({reason}); threshold {t:g} cannot pass")
            continue
        ok = value >= t - EPS if direction == "min" else value <= t + EPS
        checked.append(
            {"metric": name, "value": value, "n": n, "threshold": t, "direction": direction, "passed": ok}
        )
        if not ok:
            word = "below" if direction == "min" else "above"
            failures.append(f"{name} {value:.4g} is {word} the threshold {t:g} (n = {n})")
    bare_names = {name for name, _, strict in wanted if not strict}
    if bare_names and not any(c["metric"] in bare_names for c in checked):
        failures.append(
            f"threshold {float(bare):g}: none of {', '.join(DEFAULT_THRESHOLD_METRICS)} was measured by this run"
        )
    return {
        "passed": not failures,
        "thresholds": dict(thresholds),
        "checked": checked,
        "not_measured": not_measured,
        "failures": failures,
    }
