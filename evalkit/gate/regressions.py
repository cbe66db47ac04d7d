"""The threshold gate: did a gated metric get worse than the baseline by more than allowed?

Shared by run_eval (`--baseline RUN_ID`) and compare_runs (`--gate threshold`, `--gate
significant`): `gate_result` is the one implementation. Pure functions over two metrics.json
bodies (or their `aggregate_metrics`); no I/O. What is gated, by how much and where is
`thresholds.Thresholds` (the defaults: each gated metric's registry `margin`, listed in
EVAL.md, "The regression gate"); whether the pair may be compared at all is
`invariants.check_invariants`.

A metric regressed when it moved the bad way (the registry's direction) by more than its
threshold, with a 1e-9 tolerance (`values.EPS`), so that 0.85 -> 0.80 with threshold 0.05 is
not a regression because of float rounding; a relative threshold is read as a share of the
baseline's value (`recall_frac_avg dropped by 33.3% of the baseline (1 -> 0.6667; allowed
5%)`) and skipped where that value is 0.

Recall@K and MRR@K are compared at one K both runs measured (`values.comparison_k`: the
baseline's primary K first). A metric that either run did not compute (null, e.g.
groundedness of a retrieval-only run, scope miss with folder_mode off), or a retrieval
metric when the runs share no K, is skipped and listed with the reason, never counted as 0;
a skipped Recall@K or MRR@K, or a skipped metric named beyond the nine, fails the gate
unless `allow_missing_metrics`. Runs that asked their target for different K keep retrieval
comparable at a shared K, but their answer metrics (`invariants.ANSWER_METRICS`: what the
answerer saw changed) are skipped with that reason. Groundedness and correctness are also
skipped when one run was judged by the offline heuristic and the other by an LLM (their
scales are not comparable) unless mixed judges are allowed.

A gate that compared nothing (every metric skipped) has not passed: `passed` is False and
`nothing_compared` True, with the reasons, so `--k 10 --baseline B --retrieval-only`
against a K=5 baseline is a visible outcome, not a green one. With `Thresholds.by`
(`--gate-by domain`) every threshold applies within each slice of those groupings too, over
slices both runs have and whose n reaches `min_slice_n`; a slice regression names its slice
(`recall_frac_avg in domain:install dropped ...`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from evalkit.gate.fields import blinded, field_gaps
from evalkit.gate.invariants import (
    ANSWER_METRICS,
    asked_k_difference,
    asked_k_of,
    check_invariants,
    invariant_warnings,
)
from evalkit.gate.thresholds import (
    GATED,
    HEADLINE_GATED,
    Thresholds,
    gate_metric,
    gated_metrics,
)
from evalkit.gate.values import (
    EPS,
    OPERATIONAL,
    aggregate_of,
    comparison_k,
    measured_ks,
    number,
    primary_k,
    value_at,
)
from evalkit.metrics.registry import METRICS
from evalkit.store.runlog import Cell, Met

__all__ = ["Regression", "check_regressions", "gate_result", "skipped_metrics"]


@dataclass(frozen=True)
class Regression:
    """One metric that got worse by more than its threshold, overall or in one slice."""

    metric: str
    baseline: float
    new: float
    delta: float
    threshold: float
    direction: Literal["higher_is_better", "lower_is_better"]
    scope: str = "overall"  # or a slice: `domain:install` (--gate-by)
    n: int | None = None  # the slice's n for the metric (the smaller of the two runs')
    relative: bool = False  # `threshold` is a share of the baseline's value (Thresholds.relative)

    @property
    def relative_change(self) -> float | None:
        """The worsening as a share of the baseline's value (relative thresholds only)."""
        return abs(self.delta) / abs(self.baseline) if self.relative and self.baseline else None

    @property
    def message(self) -> str:
        worse = "dropped" if self.direction == "higher_is_better" else "rose"
        where = "" if self.scope == "overall" else f" in {self.scope}"
        n = "" if self.n is None else f"; n = {self.n}"
        if self.relative:
            return (
                f"{self.metric}{where} {worse} by {self.relative_change:.1%} of the baseline "
                f"({self.baseline:.4g} -> {self.new:.4g}; allowed {self.threshold * 100:.4g}%{n})"
            )
        return (
            f"{self.metric}{where} {worse} by {abs(self.delta):.4g} "
            f"({self.baseline:.4g} -> {self.new:.4g}; allowed {self.threshold:.4g}{n})"
        )

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "message": self.message}
        if self.relative:
            out["relative_change"] = self.relative_change
        return out


# Judge scores on the heuristic's scale and an LLM's are not comparable (the registry's judge stage).
_JUDGED = frozenset(m.key for m in METRICS if m.stage == "judge")


@dataclass(frozen=True)
class _Spec:
    """One metric the gate checks: the name it reports, where its value is, its threshold."""

    name: str  # recall_at_k_avg, recall_frac_avg, recall_frac@10
    key: str  # the registry key (recall_frac_avg)
    at_k: str | None  # the @K metric's name when the value is read at a K
    k: str | None  # the K the name fixes (recall_frac@10), else None: the gate's K
    threshold: float
    direction: str  # higher_is_better | lower_is_better
    named: bool  # given beyond the nine: a skip fails the gate, as a skipped Recall@K does
    relative: bool = False  # threshold is a share of the baseline's value

    @property
    def label(self) -> str:
        """The name `compared` and `skipped` list it by: a relative one as `<name>_relative`."""
        return f"{self.name}_relative" if self.relative else self.name


def _specs(thresholds: Thresholds) -> list[_Spec]:
    """The nine, then each metric of `thresholds.metrics` (one naming a built-in replaces it),
    then each relative threshold (which replaces the absolute one of its metric)."""
    out: dict[str, _Spec] = {
        key: _Spec(key, key, at_k, None, float(getattr(thresholds, attr)), direction, False)
        for key, at_k, attr, direction in GATED
    }
    for name, value in thresholds.metrics:
        gname, entry, k = gate_metric(name)
        builtin = out.get(gname)
        out[gname] = _Spec(
            gname, entry.key, entry.at_k, k, float(value), f"{entry.direction}_is_better",
            named=builtin is None or builtin.named,
        )
    for name, share in thresholds.relative:
        gname, entry, k = gate_metric(name)
        spec = _Spec(gname, entry.key, entry.at_k, k, float(share), f"{entry.direction}_is_better", True, relative=True)
        out.pop(gname, None)  # one reading per metric: a relative threshold replaces its absolute one
        out[spec.label] = spec
    return list(out.values())


def _judge_is_heuristic(agg: Mapping[str, Any]) -> bool | None:
    judge = agg.get("judge")
    return bool(judge.get("heuristic")) if isinstance(judge, Mapping) else None


def _judge_is_mixed(agg: Mapping[str, Any]) -> bool:
    judge = agg.get("judge")
    return bool(judge.get("mixed")) if isinstance(judge, Mapping) else False


def _skip_reason(
    base: Mapping[str, Any], new: Mapping[str, Any], key: str, at_k_key: str | None, k: str | None,
    allow_mixed_judges: bool, not_comparable: str | None = None, blind: Mapping[str, str] | None = None,
) -> str | None:
    """Why a gated metric cannot be compared, or None when it can. `blind`: {metric: reason}
    of the fields one target leaves out (`fields.blinded`)."""
    if not_comparable is not None and key in ANSWER_METRICS:
        return not_comparable
    if blind and key in blind:
        return blind[key]
    if at_k_key is not None and k is None:
        kb, kn = measured_ks(base), measured_ks(new)
        return (f"no K measured by both runs (baseline K={', '.join(kb) or '?'}, new run K={', '.join(kn) or '?'}); "
                "re-score one with score_retrieval --k")
    if key in _JUDGED and not allow_mixed_judges:
        hb, hn = _judge_is_heuristic(base), _judge_is_heuristic(new)
        if hb is not None and hn is not None and hb != hn:
            return "one run was judged by the offline heuristic, the other by an LLM"
        mixed = [name for name, agg in (("baseline", base), ("new run", new)) if _judge_is_mixed(agg)]
        if mixed:
            return f"the {' and the '.join(mixed)}'s answers were judged by several judges (a partial re-judge)"
    if at_k_key is not None and k is not None and k not in measured_ks(new):
        return f"the new run did not measure K={k} (its K: {', '.join(measured_ks(new)) or '?'})"
    if value_at(new, key, at_k_key, k) is None:
        return "not computed in the new run"
    if value_at(base, key, at_k_key, k) is None:
        if at_k_key and k is not None and number(base.get(key)) is not None:
            return f"the baseline did not measure K={k} (its primary K is {primary_k(base)})"
        return "not computed in the baseline"
    return None


def _regression(spec: _Spec, b: float, n: float, scope: str = "overall", count: int | None = None) -> Regression | None:
    """A Regression when `spec`'s metric got worse from b to n by more than its threshold: on
    the metric's scale, or for a relative threshold as a share of b (the caller skips b = 0)."""
    delta = n - b
    worse = -delta if spec.direction == "higher_is_better" else delta
    limit = spec.threshold * abs(b) if spec.relative else spec.threshold
    if worse > limit + EPS:
        return Regression(spec.name, b, n, delta, spec.threshold, spec.direction, scope, count,  # type: ignore[arg-type]
                          relative=spec.relative)
    return None


# Why a relative threshold cannot judge a baseline value of 0 (any change is infinitely many of it).
_ZERO_BASE = "the baseline's value is 0: a relative change is undefined"


def _slice_value(cell: Any, spec: _Spec, k: str | None, primary: str | None) -> tuple[float | None, int]:
    """(value, n) of a gated metric in a slice cell; (None, 0) when the cell does not hold it.

    An @K metric comes from the cell's `at_k[K]` (compare's slices hold every K), else from
    its headline key when K is the run's primary K: metrics.json's slices hold the registry's
    sliced metrics at the primary K only, each with its n."""
    if not isinstance(cell, Mapping):
        return None, 0
    ns = cell.get("n") if isinstance(cell.get("n"), Mapping) else {}
    if spec.at_k is not None:
        block = (cell.get(Cell.AT_K) or {}).get(k) if k is not None else None
        if isinstance(block, Mapping) and spec.at_k in block:
            n = (block.get("n_by_metric") or {}).get(spec.at_k, block.get("n"))
            return number(block[spec.at_k]), int(n) if isinstance(n, int | float) else 0
        if k is None or primary != k:
            return None, 0
    if spec.key in cell:
        n = ns.get(spec.key)
        return number(cell.get(spec.key)), int(n) if isinstance(n, int | float) else 0
    op = cell.get(Cell.OPERATIONAL)
    if spec.key in OPERATIONAL and isinstance(op, Mapping) and spec.key in op:
        n = op.get("n")
        return number(op[spec.key]), int(n) if isinstance(n, int | float) else 0
    return None, 0


@dataclass
class _Outcome:
    """What the gate found: overall regressions and skips, then (with --gate-by) per slice."""

    regressions: list[Regression]
    skipped: list[dict[str, str]]  # overall: [{metric, reason}]
    compared: list[str]
    failing_skips: list[dict[str, str]]  # skipped metrics whose skip fails the gate (named ones)
    slice_skipped: list[dict[str, str]]  # [{metric, scope, reason}]
    slices: dict[str, Any] | None


def _check_slices(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
    specs: list[tuple[_Spec, str | None]], thresholds: Thresholds,
) -> tuple[list[Regression], list[dict[str, str]], dict[str, Any]]:
    """--gate-by: each compared metric within each slice of each grouping that both runs have,
    with the slice's own n (the smaller run's), skipping (and listing) n < min_slice_n."""
    body_a, body_b = slices if slices is not None else (baseline_metrics, new_metrics)
    pa, pb = primary_k(aggregate_of(baseline_metrics)), primary_k(aggregate_of(new_metrics))
    min_n = thresholds.min_slice_n
    regressions: list[Regression] = []
    skipped: list[dict[str, str]] = []
    compared: dict[str, list[str]] = {}
    for grouping in thresholds.by:
        ga, gb = body_a.get(f"by_{grouping}"), body_b.get(f"by_{grouping}")
        if not isinstance(ga, Mapping) or not isinstance(gb, Mapping) or not ga or not gb:
            which = [w for w, g in (("the baseline", ga), ("the new run", gb)) if not isinstance(g, Mapping) or not g]
            skipped.append({"metric": "*", "scope": f"{grouping}:*",
                            "reason": f"{' and '.join(which)} {'have' if len(which) > 1 else 'has'} no {grouping} slices"})
            continue
        held: set[str] = set()
        for key in sorted(set(ga) | set(gb)):
            scope = f"{grouping}:{key}"
            if key not in ga or key not in gb:
                only = "the new run" if key in gb else "the baseline"
                skipped.append({"metric": "*", "scope": scope, "reason": f"the slice is in {only} only"})
                continue
            for spec, k in specs:
                va, na = _slice_value(ga[key], spec, k, pa)
                vb, nb = _slice_value(gb[key], spec, k, pb)
                if va is None or vb is None or not na or not nb:
                    continue  # not in this slice (no unanswerable case in it, ...)
                held.add(spec.label)
                n = min(na, nb)
                if n < min_n:
                    skipped.append({"metric": spec.label, "scope": scope, "reason": f"n = {n} is below --gate-min-n {min_n}"})
                    continue
                if spec.relative and va == 0:
                    skipped.append({"metric": spec.label, "scope": scope, "reason": _ZERO_BASE})
                    continue
                compared.setdefault(scope, []).append(spec.label)
                reg = _regression(spec, va, vb, scope, n)
                if reg is not None:
                    regressions.append(reg)
        for spec, k in specs:
            if spec.label in held:
                continue
            if spec.at_k is not None and (pa != k or pb != k):
                why = f"the {grouping} slices hold each run's primary K ({pa}, {pb}), not K={k}"
            else:
                why = f"no {grouping} slice of both runs holds it"
            skipped.append({"metric": spec.label, "scope": f"{grouping}:*", "reason": why})
    return regressions, skipped, {"by": list(thresholds.by), "min_n": min_n, "compared": compared}


def _evaluate(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], thresholds: Thresholds, *,
    allow_mixed_judges: bool, not_comparable: str | None, slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
) -> _Outcome:
    base, new = aggregate_of(baseline_metrics), aggregate_of(new_metrics)
    k = comparison_k(baseline_metrics, new_metrics)
    out = _Outcome([], [], [], [], [], None)
    checked: list[tuple[_Spec, str | None]] = []
    blind = blinded(field_gaps(baseline_metrics, new_metrics))
    for spec in _specs(thresholds):
        at = spec.k if spec.k is not None else k
        reason = _skip_reason(base, new, spec.key, spec.at_k, at, allow_mixed_judges, not_comparable, blind)
        b, n = value_at(base, spec.key, spec.at_k, at), value_at(new, spec.key, spec.at_k, at)
        if reason is None and spec.relative and b == 0:
            reason = _ZERO_BASE
        if reason is not None:
            out.skipped.append({"metric": spec.label, "reason": reason})
            if spec.named and reason != _ZERO_BASE:  # a zero baseline cannot drop: nothing was missed
                out.failing_skips.append(out.skipped[-1])
            continue
        if b is None or n is None:  # pragma: no cover - _skip_reason said comparable
            continue
        out.compared.append(spec.label)
        checked.append((spec, at))
        reg = _regression(spec, b, n)
        if reg is not None:
            out.regressions.append(reg)
    if thresholds.by:
        regs, out.slice_skipped, out.slices = _check_slices(baseline_metrics, new_metrics, slices, checked, thresholds)
        out.regressions += regs
    return out


def check_regressions(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
    *,
    allow_mixed_judges: bool = False,
    not_comparable: str | None = None,
    slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> list[Regression]:
    """Compare two runs' gated metrics (Recall@K and MRR@K at `comparison_k`).

    Args:
        baseline_metrics: metrics.json of the baseline run (or its aggregate_metrics).
        new_metrics: metrics.json of the new run (or its aggregate_metrics).
        thresholds: allowed absolute worsening per metric; defaults: the registry's `margin`;
            `thresholds.metrics` adds metrics, `thresholds.by` checks each slice too.
        allow_mixed_judges: compare groundedness even when one run's judge was the heuristic.
        not_comparable: why the answer metrics are not comparable (asked K differs), or None.
        slices: (baseline, new) bodies holding the `by_*` slices, when not the metrics.json
            bodies themselves (compare_runs: slices recomputed from the records, every K).

    Returns:
        The regressions: overall in the registry's order, then any other gated metric,
        then per slice (grouping, slice, metric). Empty = passed.
    """
    return _evaluate(
        baseline_metrics, new_metrics, thresholds or Thresholds(), allow_mixed_judges=allow_mixed_judges,
        not_comparable=not_comparable, slices=slices,
    ).regressions


def skipped_metrics(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], *, allow_mixed_judges: bool = False,
    not_comparable: str | None = None, thresholds: Thresholds | None = None,
) -> list[dict[str, str]]:
    """Gated metrics the gate could not check overall: [{"metric", "reason"}]."""
    return _evaluate(
        baseline_metrics, new_metrics, replace(thresholds or Thresholds(), by=()), allow_mixed_judges=allow_mixed_judges,
        not_comparable=not_comparable, slices=None,
    ).skipped


def gate_result(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
    *,
    baseline_run_id: str | None = None,
    allow_regressions: bool = False,
    allow_mixed_judges: bool = False,
    ignore_invariants: bool = False,
    allow_missing_metrics: bool = False,
    asked_k: tuple[int | None, int | None] | None = None,
    slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    same_corpus: bool = False,
    allow_label_change: bool = False,
) -> dict[str, Any]:
    """The `gate` object written to metrics.json and printed by `--json`; run_eval's
    `--baseline` gate and compare_runs' gate are this function on the same pair.

    Recall@K and MRR@K are compared at `comparison_k`; a gate that could not compare one of
    them, or a metric named in `thresholds.metrics`, fails unless `allow_missing_metrics`.
    Runs that asked their target for different K (`asked_k`: baseline, new; default
    `asked_k_of` each) are compared on retrieval at a K both measured, and their answer
    metrics (ANSWER_METRICS) are skipped with the reason. With `thresholds.by`, every
    compared metric is checked in each slice too (`slices`: see check_regressions).
    `same_corpus` (`--same-corpus`) makes a changed corpus an invariant (check_invariants);
    `allow_label_change` (`--allow-label-change`) lets the same cases with other labels through,
    with a warning.

    Returns:
        {"passed", "allowed", "nothing_compared", "baseline_run_id", "k", "thresholds",
        "preset", "invariants": {"ok", "violations", "ignored", "warnings"}, "regressions": [{metric,
        baseline, new, delta, threshold, direction, scope, n, message}], "compared":
        [metric], "skipped": [{metric, reason} overall, then {metric, scope, reason} per
        slice], "slices": {by, min_n, compared: {scope: [metric]}} or None, "failures":
        [str]}. `passed` is False when there is a regression, when nothing could be
        compared, or when an invariant is broken and not ignored; `failures` says why in one
        line each. `allowed` records --allow-regressions.
    """
    thresholds = thresholds or Thresholds()
    asked = asked_k if asked_k is not None else (asked_k_of(baseline_metrics), asked_k_of(new_metrics))
    partial = asked_k_difference(*asked)
    found = _evaluate(
        baseline_metrics, new_metrics, thresholds, allow_mixed_judges=allow_mixed_judges, not_comparable=partial,
        slices=slices,
    )
    violations = check_invariants(baseline_metrics, new_metrics, same_corpus=same_corpus,
                                  allow_label_change=allow_label_change)
    compared = found.compared
    failures = [r.message for r in found.regressions]
    if not compared:
        reasons = "; ".join(f"{s['metric']}: {s['reason']}" for s in found.skipped)
        failures.append(f"nothing comparable — {reasons}")
    elif not allow_missing_metrics:
        failures += [
            f"{s['metric']} not compared: {s['reason']} (--allow-missing-metrics gates without it)"
            for s in found.skipped if s["metric"] in HEADLINE_GATED or s in found.failing_skips
        ]
    if violations and not ignore_invariants:
        failures += [f"invariant broken: {v}" for v in violations]
    k = comparison_k(baseline_metrics, new_metrics)
    return {
        "passed": not failures,
        "allowed": bool(allow_regressions),
        "nothing_compared": not compared,
        "baseline_run_id": baseline_run_id,
        "k": k if k is not None else primary_k(aggregate_of(new_metrics)),
        "not_comparable": (
            [{"reason": partial, "metrics": [m for m in gated_metrics() if m in ANSWER_METRICS]}] if partial else []
        ) + [{"reason": gap.reason, "metrics": list(gap.metrics)} for gap in field_gaps(baseline_metrics, new_metrics)
             if gap.metrics],
        "thresholds": thresholds.as_dict(),
        "preset": thresholds.preset,
        Met.INVARIANTS: {
            "ok": not violations, "violations": violations, "ignored": bool(ignore_invariants and violations),
            "warnings": invariant_warnings(baseline_metrics, new_metrics, same_corpus=same_corpus,
                                           allow_label_change=allow_label_change),
        },
        "regressions": [r.to_dict() for r in found.regressions],
        "compared": compared,
        "skipped": [*found.skipped, *found.slice_skipped],
        "slices": found.slices,
        "failures": failures,
    }
