"""compare_runs' gate and the merge decision (EVAL.md, "The merge decision").

`--gate verdict` (the default): fails when any metric of the merge verdict is shown worse,
and is not enough evidence (exit 4) when a gated metric is not settled. `--gate threshold`:
run_eval's gate (`regressions.gate_result`, one implementation) plus a relative MRR
drop. `--gate significant`: the threshold gate, letting through the regressions whose paired
test is not significant after correction (and failing a significant rise of error_rate beyond
its margin). `--fail-on-flip` adds to any of them. `decide` turns the gate into the outcome,
the exit code and the one headline every format leads with. Pure: the comparison's delta
rows and flips come in as arguments (`compare.compute` makes them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from evalkit.gate.models import Decision, GateReport, MergeVerdict, MetricVerdict
from evalkit.gate.regressions import gate_result
from evalkit.gate.thresholds import Thresholds
from evalkit.gate.values import EPS
from evalkit.gate.verdict import PASSING, default_margins, format_change
from evalkit.metrics.keys import HEADLINE_AT_K
from evalkit.metrics.retrieval import AT_K_METRICS

__all__ = [
    "DEFAULT_MRR_RELATIVE", "EXIT_CODES", "PairedRow", "decide", "default_gate", "gate_exit_code", "gate_mode",
    "gate_report",
]

# The merge decision's exit codes (DESIGN.md §10): 2 bad input, 3 an incomplete run and 70 an
# internal error are the CLI's own.
EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 4}
# `--gate non-inferior` (issue 30) is the verdict gate under its old name.
_GATE_ALIASES = {"non-inferior": "verdict"}
_OUTCOME_WORDS = {"pass": "PASS", "fail": "FAIL", "inconclusive": "NOT ENOUGH EVIDENCE"}
# Seed 001's "MRR drop > 10%" as compare_runs' relative MRR check reads it by default.
DEFAULT_MRR_RELATIVE = 0.10


class PairedRow(Protocol):
    """What the gate reads of one delta row of a comparison (`compare.models.DeltaRow`): the
    two runs' values, and the paired test's outcome."""

    @property
    def a(self) -> float | None: ...
    @property
    def b(self) -> float | None: ...
    @property
    def comparable(self) -> bool: ...
    @property
    def note(self) -> str | None: ...
    @property
    def significant(self) -> bool: ...
    @property
    def change(self) -> Literal["better", "worse", "unchanged"] | None: ...
    @property
    def p_value(self) -> float | None: ...
    @property
    def p_adjusted(self) -> float | None: ...
    @property
    def reported_delta(self) -> float | None: ...


Rows = Mapping[tuple[str, str, int | None], PairedRow]


def gate_report(
    a_metrics: Mapping[str, Any],
    b_metrics: Mapping[str, Any],
    rows: Rows,
    regressions_flipped: list[str],
    *,
    baseline_run_id: str | None,
    asked_k: tuple[int | None, int | None],
    mode: str,
    thresholds: Thresholds,
    mrr_relative_threshold: float,
    fail_on_flip: bool,
    allow_regressions: bool,
    allow_mixed_judges: bool,
    ignore_invariants: bool,
    correction: str,
    allow_missing_metrics: bool = False,
    verdict: MergeVerdict | None = None,
    slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    same_corpus: bool = False,
    allow_label_change: bool = False,
) -> GateReport:
    """The comparison's gate verdict.

    Args:
        a_metrics: the baseline's metrics.json body; b_metrics: the new run's (both go to
            gate_result).
        rows: the overall delta rows by (metric, scope, K), for the relative MRR drop and
            the significance of each regression.
        regressions_flipped: "id (metric)" of every pass -> fail flip.
        baseline_run_id: the baseline's run id, as the gate reports it.
        asked_k: how many chunks each run (baseline, new) asked its target for.
        mode: "threshold" (run_eval's gate), "significant" (a threshold regression fails
            only when its overall paired test is significant after correction, worse way; and
            a significant rise of error_rate beyond its margin fails) or "verdict" (every
            metric of `verdict` must be better, equivalent or non-inferior; the threshold
            regressions and the relative MRR drop do not decide).
        thresholds: the absolute thresholds; mrr_relative_threshold: largest allowed MRR
            drop as a share of the baseline's MRR (checked when that MRR is > 0).
        fail_on_flip: any pass -> fail flip fails the gate.
        allow_regressions, allow_mixed_judges, ignore_invariants, allow_missing_metrics, same_corpus,
            allow_label_change: as in gate_result.
        correction: "holm" | "bh", named in the messages.
        verdict: the merge verdict (its margins, and the verdict gate's labels).
        slices: (a, b) bodies with the `by_*` slices for `thresholds.by` (compare's cells,
            recomputed from the records at every K); None: the metrics.json bodies'.

    Returns:
        GateReport; `passed` is False exactly when `failures` is non-empty.
    """
    # A relative MRR threshold in `thresholds` (--gate-preset bob) is this check, per slice too:
    # it takes mrr_relative_threshold (the flag beside the preset wins) and the check below stands down.
    gated_relative_mrr = "mrr_avg" in dict(thresholds.relative)
    if gated_relative_mrr:
        thresholds = thresholds.with_relative({"mrr_avg": mrr_relative_threshold})
    g = gate_result(
        a_metrics, b_metrics, thresholds, baseline_run_id=baseline_run_id, allow_regressions=allow_regressions,
        allow_mixed_judges=allow_mixed_judges, ignore_invariants=ignore_invariants,
        allow_missing_metrics=allow_missing_metrics, asked_k=asked_k, slices=slices,
        same_corpus=same_corpus, allow_label_change=allow_label_change,
    )
    k = int(g["k"]) if g.get("k") is not None else None
    details = [dict(r) for r in g["regressions"]]
    skipped = list(g["skipped"])
    compared = list(g["compared"])
    reg_messages = {r["message"] for r in details}
    other_failures = [f for f in g["failures"] if f not in reg_messages]

    if mode == "verdict":
        return _verdict_gate(g, verdict, other_failures, regressions_flipped, fail_on_flip=fail_on_flip,
                             allow_regressions=allow_regressions, mrr_relative_threshold=mrr_relative_threshold)
    if not gated_relative_mrr:  # else gate_result checked it as mrr_avg_relative
        _relative_mrr_drop(rows.get(("mrr", "overall", k)), k, mrr_relative_threshold, details, skipped, compared)
    not_significant: list[str] = []
    if mode == "significant":
        details, not_significant = _significant_only(details, rows, k, correction)
        _significant_error_rise(rows, verdict, correction, details, compared)
    return _report(
        g, mode, [r["message"] for r in details], details, other_failures, regressions_flipped,
        fail_on_flip=fail_on_flip, allow_regressions=allow_regressions, mrr_relative_threshold=mrr_relative_threshold,
        skipped=skipped, compared=compared, not_significant=not_significant,
    )


def _relative_mrr_drop(
    mrr: PairedRow | None, k: int | None, threshold: float, details: list[dict[str, Any]],
    skipped: list[dict[str, str]], compared: list[str],
) -> None:
    """Seed 001's "MRR drop > 10%", read as relative to the baseline's MRR (the absolute 0.10
    is --regression-threshold-mrr): appended to `details`, `skipped` or `compared`."""
    if mrr is None or mrr.a is None or mrr.b is None:
        skipped.append({"metric": "mrr_relative_drop", "reason": "MRR at the gate's K is not in both runs"})
    elif not mrr.comparable:  # a field one target leaves out blinds MRR (gate.fields), or an ignored invariant
        skipped.append({"metric": "mrr_relative_drop", "reason": (mrr.note or "not comparable").removeprefix("not comparable: ")})
    elif mrr.a <= 0:
        skipped.append({"metric": "mrr_relative_drop", "reason": "the baseline's MRR is 0: a relative drop is undefined"})
    else:
        compared.append("mrr_relative_drop")
        drop = (mrr.a - mrr.b) / mrr.a
        if drop > threshold + EPS:
            details.append({
                "metric": "mrr_relative_drop", "baseline": mrr.a, "new": mrr.b, "delta": mrr.b - mrr.a,
                "threshold": threshold, "direction": "higher_is_better", "relative_drop": drop,
                "message": (
                    f"mrr@{k} dropped by {drop:.1%} of the baseline ({mrr.a:.4g} -> {mrr.b:.4g}; "
                    f"allowed {threshold:.0%})"
                ),
            })


def _significant_only(
    details: list[dict[str, Any]], rows: Rows, k: int | None, correction: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """`--gate significant`: (the regressions whose overall paired test is significant after
    correction, the worse way; one line per regression let through)."""
    kept = []
    let_through = []
    for r in details:
        name = r["metric"]
        metric, at = ("mrr", k) if name == "mrr_relative_drop" else _row_key(name, k)
        row = rows.get((metric, r.get("scope") or "overall", at if metric in AT_K_METRICS else None))
        if row is not None and row.significant and row.change == "worse":
            kept.append(r)
        else:
            why = row.note if row is not None and row.note else "no paired test"
            let_through.append(f"{r['message']} — not significant after {correction} ({why})")
    return kept, let_through


def _significant_error_rise(
    rows: Rows, verdict: MergeVerdict | None, correction: str, details: list[dict[str, Any]], compared: list[str]
) -> None:
    """`--gate significant`: a significant rise of error_rate beyond its margin fails (issue 30
    item 6: the paired quality metrics leave target errors out, so a regression made of errors
    shows only here)."""
    errors = rows.get(("error_rate", "overall", None))
    if errors is None or not errors.comparable or errors.p_value is None:
        return
    compared.append("error_rate")
    margin = _margin(verdict, "error_rate")
    rise = errors.reported_delta or 0.0
    if errors.significant and errors.change == "worse" and rise > margin + EPS:
        details.append({
            "metric": "error_rate", "baseline": errors.a, "new": errors.b, "delta": rise, "threshold": margin,
            "direction": "lower_is_better", "p_adjusted": errors.p_adjusted,
            "message": (f"error_rate rose by {rise:.4g} ({errors.a:.4g} -> {errors.b:.4g}; allowed {margin:g}), "
                        f"significant after {correction} (p adj. {errors.p_adjusted:.3g}): the new run failed "
                        "on cases the baseline answered"),
        })


def _report(
    g: dict, mode: str, regressions: list[str], details: list[dict[str, Any]], other_failures: list[str],
    regressions_flipped: list[str], *, fail_on_flip: bool, allow_regressions: bool, mrr_relative_threshold: float,
    skipped: list, compared: list[str], not_significant: list[str] | None = None, inconclusive: list[str] | None = None,
) -> GateReport:
    """The GateReport of any gate mode: its regressions, then gate_result's own failures, then
    the flips (with --fail-on-flip); inconclusive (the verdict gate) when nothing failed but a
    gated metric is not settled."""
    failures = regressions + other_failures
    if fail_on_flip and regressions_flipped:
        shown = ", ".join(regressions_flipped[:10]) + (" …" if len(regressions_flipped) > 10 else "")
        failures.append(f"{len(regressions_flipped)} case flip(s) pass -> fail (--fail-on-flip): {shown}")
    unsettled = list(inconclusive or [])
    outcome = "fail" if failures else "inconclusive" if unsettled else "pass"
    return GateReport(
        mode=mode,  # type: ignore[arg-type]
        passed=outcome == "pass",
        outcome=outcome,  # type: ignore[arg-type]
        inconclusive=unsettled,
        allowed=bool(allow_regressions),
        regressions=regressions,
        regression_details=details,
        not_significant=not_significant or [],
        flip_regressions=list(regressions_flipped) if fail_on_flip else [],
        skipped=skipped,
        compared=compared,
        nothing_compared=bool(g["nothing_compared"]),
        failures=failures,
        thresholds={**g["thresholds"], "mrr_relative": mrr_relative_threshold},
        k=g.get("k"),
        slices=g.get("slices"),
        preset=g.get("preset"),
    )


def _row_key(name: str, k: int | None) -> tuple[str, int | None]:
    """The delta row of a gated metric's name: `recall_frac_avg` -> (recall_frac, the gate's K),
    `recall_frac@10` -> (recall_frac, 10), `error_rate` -> (error_rate, None)."""
    base, sep, at = name.partition("@")
    if sep and at.isdigit():
        return base, int(at)
    return HEADLINE_AT_K.get(name, name), k


def _margin(verdict: MergeVerdict | None, metric: str) -> float:
    """A metric's margin in the verdict (a --margin given for it), else the registry's."""
    for v in verdict.metrics if verdict is not None else []:
        if v.metric == metric:
            return v.margin
    return default_margins()[metric]


def _failure(v: MetricVerdict) -> str:
    ci = "no interval" if v.ci is None else f"[{format_change(v.ci[0])}, {format_change(v.ci[1])}]"
    delta = format_change(v.delta)
    return f"{v.label}: {v.verdict}, Δ {delta} {ci} (margin {v.margin:g}) — {v.reason}"


def _verdict_gate(
    g: dict, verdict: MergeVerdict | None, other_failures: list[str], regressions_flipped: list[str], *,
    fail_on_flip: bool, allow_regressions: bool, mrr_relative_threshold: float,
) -> GateReport:
    """`--gate verdict`: a failure per metric shown worse (gated or not), plus gate_result's own
    failures (nothing comparable, Recall@K/MRR@K missing, invariants); an inconclusive line per
    gated metric not settled (better, equivalent, non-inferior and identical settle)."""
    if verdict is None or not verdict.available:  # pragma: no cover - compare_runs refuses this first
        raise ValueError("--gate verdict needs the merge verdict (per-case results on both sides)")
    worse = [v for v in verdict.metrics if v.verdict == "worse"]
    unsettled = [_failure(v) for v in verdict.metrics if v.gated and v.verdict not in PASSING and v.verdict != "worse"]
    if not verdict.metrics:
        unsettled.append("no metric could be compared case by case: " + (
            "; ".join(f"{x['metric']}: {x['reason']}" for x in verdict.not_compared) or "none has per-case values"))
    return _report(
        g, "verdict", [_failure(v) for v in worse], [v.model_dump(mode="json") for v in worse],
        other_failures, regressions_flipped, fail_on_flip=fail_on_flip, allow_regressions=allow_regressions,
        mrr_relative_threshold=mrr_relative_threshold, skipped=list(g["skipped"]),
        compared=[f"{v.metric}@{v.k}" if v.k is not None else v.metric for v in verdict.metrics], inconclusive=unsettled,
    )


def default_gate(thresholds: Thresholds, mrr_relative_threshold: float = DEFAULT_MRR_RELATIVE) -> str:
    """The gate that decides when `--gate` is not given, for compare_runs and run_eval alike:
    the threshold gate when any threshold differs from its default (a threshold flag,
    --gate-by, --gate-min-n, --gate-preset: their numbers decide nothing else), else the
    verdict."""
    moved = thresholds != Thresholds() or mrr_relative_threshold != DEFAULT_MRR_RELATIVE
    return "threshold" if moved else "verdict"


def gate_mode(
    gate: str | None, per_case: bool, thresholds: Thresholds | None = None,
    mrr_relative_threshold: float = DEFAULT_MRR_RELATIVE,
) -> tuple[str, str | None]:
    """(the gate that decides, a note or None): `--gate` as given (`non-inferior` is `verdict`),
    else `default_gate`; with a bare metrics.json on a side, the verdict falls back to the
    threshold gate (the note says so), where an explicit `--gate verdict` is refused."""
    if gate is not None:
        return _GATE_ALIASES.get(gate, gate), None
    chosen = default_gate(thresholds or Thresholds(), mrr_relative_threshold)
    if per_case or chosen == "threshold":
        return chosen, None
    return "threshold", ("a side has no per-case results (a bare metrics.json): the threshold gate decided, not the "
                         "verdict (save a full baseline with --save-baseline)")


def decide(
    gate: GateReport, verdict: MergeVerdict, *, on_inconclusive: str = "exit-4", allowed: bool = False
) -> Decision:
    """The outcome, its exit code and the one headline every format (terminal, markdown, HTML,
    JSON) leads with: the decision and its reason in one sentence, from whichever gate decided.

    Exit codes: 0 pass, 1 a regression shown, 4 not enough evidence; `on_inconclusive`
    ("pass" or "fail") maps 4 to 0 or 1; `allowed` (--allow-regressions) makes any of them 0.
    """
    outcome = gate.outcome
    code = EXIT_CODES[outcome]
    if outcome == "inconclusive" and on_inconclusive in ("pass", "fail"):
        code = EXIT_CODES[on_inconclusive]
    if allowed:
        code = 0
    word = _OUTCOME_WORDS[outcome]
    if gate.mode == "verdict":
        n_worse = sum(v.verdict == "worse" for v in verdict.metrics)
        if verdict.verdict is not None and (outcome != "fail" or n_worse):
            # the verdict decided; a failure beside it (a flip, a missing metric) is counted
            others = len(gate.failures) - n_worse
            headline = f"{word}: {verdict.verdict} — {verdict.summary}" + (
                f" (and {others} more failure(s))" if outcome == "fail" and others > 0 else "")
        else:
            headline = f"{word}: {_first(gate.failures or gate.inconclusive)}"
    else:
        shown = f"; the verdict, not deciding: {verdict.verdict}" if verdict.available and verdict.verdict else ""
        which = f"{gate.mode} gate" + (f", --gate-preset {gate.preset}" if gate.preset else "")
        if outcome == "fail":
            headline = f"{word} ({which}): {_first(gate.failures)}{shown}"
        else:
            headline = f"{word} ({which}): no metric regressed past its threshold{shown}"
    if outcome == "inconclusive" and on_inconclusive != "exit-4":
        headline += f" (--on-inconclusive {on_inconclusive}: exit {code})"
    if allowed and outcome != "pass":
        headline += " (allowed by --allow-regressions: exit 0)"
    return Decision(gate=gate.mode, outcome=outcome, exit_code=code, on_inconclusive=on_inconclusive,  # type: ignore[arg-type]
                    allowed=allowed, headline=headline)


def _first(lines: list[str]) -> str:
    if not lines:
        return "nothing to report"
    return lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")


def gate_exit_code(gate: Mapping[str, Any]) -> int:
    """What a stored gate object exits with: its `exit_code` (the verdict: 0, 1 or 4, after
    --on-inconclusive), else 0 passed / 1 failed (the threshold gate, and gates stored before
    issue 36)."""
    code = gate.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return 0 if gate.get("passed") else 1
