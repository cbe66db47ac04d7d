"""The regression gate: did a headline metric get worse than the baseline by more than allowed?

Shared by run_eval (`--baseline RUN_ID`) and compare_runs. Pure functions over two
metrics.json bodies (or their `aggregate_metrics`); no I/O.

Every threshold is an absolute change on the metric's own scale:

| metric (metrics.json key)        | regression when             | flag                                    | default |
| -------------------------------- | --------------------------- | --------------------------------------- | ------- |
| recall_at_k_avg (Recall@K)       | new < baseline - threshold  | --regression-threshold-recall           | 0.05    |
| mrr_avg (MRR@K)                  | new < baseline - threshold  | --regression-threshold-mrr              | 0.10    |
| scope_miss_rate                  | new > baseline + threshold  | --regression-threshold-scope-miss       | 0.10    |
| attribution_hit_rate             | new < baseline - threshold  | --regression-threshold-attribution      | 0.05    |
| groundedness_avg (0-5)           | new < baseline - threshold  | --regression-threshold-groundedness     | 0.5     |
| correctness_avg (0-5)            | new < baseline - threshold  | --regression-threshold-correctness      | 0.5     |
| abstention_accuracy              | new < baseline - threshold  | --regression-threshold-abstention       | 0.05    |
| hallucination_rate_unanswerable  | new > baseline + threshold  | --regression-threshold-hallucination    | 0.05    |
| false_abstention_rate            | new > baseline + threshold  | --regression-threshold-false-abstention | 0.05    |

A metric that either run did not compute (null, e.g. groundedness of a retrieval-only run,
scope miss with folder_mode off), or that the baseline did not measure at the new run's
primary K, is skipped and listed with the reason, never counted as 0. Groundedness and
correctness are also skipped when one run was judged by the offline heuristic and the
other by an LLM (their scales are not comparable) unless mixed judges are allowed.

A gate that compared nothing (every metric skipped) has not passed: `passed` is False and
`nothing_compared` True, with the reasons, so `--k 10 --baseline B --retrieval-only`
against a K=5 baseline is a visible outcome, not a green one.

Before any metric is compared, `check_invariants` says whether the two runs may be compared
at all (seed 000 §10.1): same eval set (dataset version) and number of cases, same judge
model, judge prompt version and judge temperature (when both runs were judged), and the
same debug payload fields (a field one target leaves out blinds a metric the other has).
A broken invariant fails the gate unless `ignore_invariants`.
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
    correctness: float = 0.5
    attribution: float = 0.05
    abstention: float = 0.05
    hallucination: float = 0.05
    false_abstention: float = 0.05


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
    ("attribution_hit_rate", None, "attribution", "higher_is_better"),
    ("groundedness_avg", None, "groundedness", "higher_is_better"),
    ("correctness_avg", None, "correctness", "higher_is_better"),
    ("abstention_accuracy", None, "abstention", "higher_is_better"),
    ("hallucination_rate_unanswerable", None, "hallucination", "lower_is_better"),
    ("false_abstention_rate", None, "false_abstention", "lower_is_better"),
)
# Judge scores on the heuristic's scale and an LLM's are not comparable.
_JUDGED = frozenset({"groundedness_avg", "correctness_avg"})


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
    """The metric at K: from `at_k[K]`, or the headline key when K is this run's primary K.

    None when the run did not measure K, so Recall@5 is never set against Recall@20.
    """
    if at_k_key is None or k is None:
        return _number(agg.get(key))
    cell = (agg.get("at_k") or {}).get(k)
    if isinstance(cell, Mapping) and at_k_key in cell:
        return _number(cell[at_k_key])
    return _number(agg.get(key)) if _primary_k(agg) == k else None


def _judge_is_heuristic(agg: Mapping[str, Any]) -> bool | None:
    judge = agg.get("judge")
    return bool(judge.get("heuristic")) if isinstance(judge, Mapping) else None


def _judge_is_mixed(agg: Mapping[str, Any]) -> bool:
    judge = agg.get("judge")
    return bool(judge.get("mixed")) if isinstance(judge, Mapping) else False


def _skip_reason(
    base: Mapping[str, Any], new: Mapping[str, Any], key: str, at_k_key: str | None, k: str | None,
    allow_mixed_judges: bool,
) -> str | None:
    """Why a gated metric cannot be compared, or None when it can."""
    if key in _JUDGED and not allow_mixed_judges:
        hb, hn = _judge_is_heuristic(base), _judge_is_heuristic(new)
        if hb is not None and hn is not None and hb != hn:
            return "one run was judged by the offline heuristic, the other by an LLM"
        mixed = [name for name, agg in (("baseline", base), ("new run", new)) if _judge_is_mixed(agg)]
        if mixed:
            return f"the {' and the '.join(mixed)}'s answers were judged by several judges (a partial re-judge)"
    if _value(new, key, at_k_key, k) is None:
        return "not computed in the new run"
    if _value(base, key, at_k_key, k) is None:
        if at_k_key and k is not None and _number(base.get(key)) is not None:
            return f"the baseline did not measure K={k} (its primary K is {_primary_k(base)})"
        return "not computed in the baseline"
    return None


def check_invariants(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> list[str]:
    """Why two runs must not be compared (seed 000 §10.1); empty when they may be.

    Reads each metrics.json's `dataset_version`, `total_tests` and `invariants` block
    ({"judge": {provider, model, prompt_version(s), temperature} | [those] | None,
    "debug_fields_missing": [paths]}); a run without a value (an older metrics.json, a
    retrieval-only run's judge) is not held against the other. One line per broken
    invariant, baseline first.
    """
    out: list[str] = []
    vb, vn = baseline_metrics.get("dataset_version"), new_metrics.get("dataset_version")
    if vb and vn and vb != vn:
        out.append(f"eval sets differ (dataset_version {vb[:12]}… vs {vn[:12]}…)")
    nb, nn = baseline_metrics.get("total_tests"), new_metrics.get("total_tests")
    if isinstance(nb, int) and isinstance(nn, int) and nb != nn:
        out.append(f"case counts differ ({nb} vs {nn}): a filtered or partial run")
    ib = baseline_metrics.get("invariants") if isinstance(baseline_metrics.get("invariants"), Mapping) else {}
    inn = new_metrics.get("invariants") if isinstance(new_metrics.get("invariants"), Mapping) else {}
    out += _judge_violations(ib.get("judge"), inn.get("judge"))
    db, dn = ib.get("debug_fields_missing"), inn.get("debug_fields_missing")
    if isinstance(db, list) and isinstance(dn, list) and set(db) != set(dn):
        only_b, only_n = sorted(set(dn) - set(db)), sorted(set(db) - set(dn))
        parts = []
        if only_b:
            parts.append(f"the new run's target leaves out {', '.join(only_b)}")
        if only_n:
            parts.append(f"the baseline's target left out {', '.join(only_n)}")
        out.append(f"debug payload fields differ: {'; '.join(parts)}")
    return out


def _judge_fields(judge: Any) -> dict[str, set[str]] | None:
    """{"model": {...}, "prompt_version": {...}, "temperature": {...}} over one or several judges."""
    judges = judge if isinstance(judge, list) else [judge]
    judges = [j for j in judges if isinstance(j, Mapping)]
    if not judges:
        return None
    out: dict[str, set[str]] = {"model": set(), "prompt_version": set(), "temperature": set()}
    for j in judges:
        out["model"].add(f"{j.get('provider')}:{j.get('model')}" if j.get("model") else str(j.get("provider")))
        pv = j.get("prompt_versions") if j.get("prompt_versions") is not None else j.get("prompt_version")
        out["prompt_version"].add(repr(sorted(pv.items())) if isinstance(pv, Mapping) else str(pv))
        out["temperature"].add(str(j.get("temperature")))
    return out


def _judge_violations(jb: Any, jn: Any) -> list[str]:
    fb, fn = _judge_fields(jb), _judge_fields(jn)
    if fb is None or fn is None:
        return []
    out = []
    for key, label in (("model", "judge model"), ("prompt_version", "judge prompt version"), ("temperature", "judge temperature")):
        if fb[key] != fn[key]:
            out.append(f"{label} differs ({', '.join(sorted(fb[key]))} vs {', '.join(sorted(fn[key]))})")
    return out


def check_regressions(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
    *,
    allow_mixed_judges: bool = False,
) -> list[Regression]:
    """Compare two runs' headline metrics.

    Args:
        baseline_metrics: metrics.json of the baseline run (or its aggregate_metrics).
        new_metrics: metrics.json of the new run (or its aggregate_metrics).
        thresholds: allowed absolute worsening per metric; defaults as in the module table.
        allow_mixed_judges: compare groundedness even when one run's judge was the heuristic.

    Returns:
        The regressions, in the order recall, MRR, scope miss, groundedness. Empty = passed.
    """
    thresholds = thresholds or Thresholds()
    base, new = _aggregate(baseline_metrics), _aggregate(new_metrics)
    k = _primary_k(new)
    out: list[Regression] = []
    for key, at_k_key, attr, direction in _GATED:
        if _skip_reason(base, new, key, at_k_key, k, allow_mixed_judges) is not None:
            continue
        b = _value(base, key, at_k_key, k)
        n = _value(new, key, at_k_key, k)
        if b is None or n is None:  # pragma: no cover - _skip_reason said comparable
            continue
        limit = float(getattr(thresholds, attr))
        delta = n - b
        worse = -delta if direction == "higher_is_better" else delta
        if worse > limit + _EPS:
            out.append(Regression(key, b, n, delta, limit, direction))  # type: ignore[arg-type]
    return out


def skipped_metrics(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], *, allow_mixed_judges: bool = False
) -> list[dict[str, str]]:
    """Gated metrics the gate could not check: [{"metric", "reason"}]."""
    base, new = _aggregate(baseline_metrics), _aggregate(new_metrics)
    k = _primary_k(new)
    out = []
    for key, at_k_key, _, _ in _GATED:
        reason = _skip_reason(base, new, key, at_k_key, k, allow_mixed_judges)
        if reason is not None:
            out.append({"metric": key, "reason": reason})
    return out


def gate_result(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
    *,
    baseline_run_id: str | None = None,
    allow_regressions: bool = False,
    allow_mixed_judges: bool = False,
    ignore_invariants: bool = False,
) -> dict[str, Any]:
    """The `gate` object written to metrics.json and printed by `--json`.

    Returns:
        {"passed", "allowed", "nothing_compared", "baseline_run_id", "k", "thresholds",
        "invariants": {"ok", "violations", "ignored"}, "regressions": [{metric, baseline,
        new, delta, threshold, direction, message}], "compared": [metric], "skipped":
        [{metric, reason}], "failures": [str]}. `passed` is False when there is a
        regression, when nothing could be compared, or when an invariant is broken and not
        ignored; `failures` says why in one line each. `allowed` records --allow-regressions.
    """
    thresholds = thresholds or Thresholds()
    regressions = check_regressions(baseline_metrics, new_metrics, thresholds, allow_mixed_judges=allow_mixed_judges)
    violations = check_invariants(baseline_metrics, new_metrics)
    skipped = skipped_metrics(baseline_metrics, new_metrics, allow_mixed_judges=allow_mixed_judges)
    skipped_keys = {s["metric"] for s in skipped}
    compared = [key for key in gated_metrics() if key not in skipped_keys]
    failures = [r.message for r in regressions]
    if not compared:
        reasons = "; ".join(f"{s['metric']}: {s['reason']}" for s in skipped)
        failures.append(f"nothing comparable — {reasons}")
    if violations and not ignore_invariants:
        failures += [f"invariant broken: {v}" for v in violations]
    return {
        "passed": not failures,
        "allowed": bool(allow_regressions),
        "nothing_compared": not compared,
        "baseline_run_id": baseline_run_id,
        "k": _primary_k(_aggregate(new_metrics)),
        "thresholds": asdict(thresholds),
        "invariants": {"ok": not violations, "violations": violations, "ignored": bool(ignore_invariants and violations)},
        "regressions": [r.to_dict() for r in regressions],
        "compared": compared,
        "skipped": skipped,
        "failures": failures,
    }
