"""What the deciders answer, as pydantic models: the merge verdict (`MergeVerdict`, one
`MetricVerdict` per metric), compare_runs' gate (`GateReport`) and the merge decision
(`Decision`). `compare.models.Comparison` holds them, so every renderer reads them from there
(STYLE §6.10); their field names are part of compare_runs' JSON contract (DESIGN.md §9).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["Decision", "Direction", "GateMode", "GateReport", "MergeVerdict", "MetricVerdict", "Outcome", "VerdictLabel"]


Direction = Literal["higher_is_better", "lower_is_better"]
VerdictLabel = Literal["identical", "better", "equivalent", "non-inferior", "worse", "inconclusive"]
# What the merge decision is (EVAL.md, "The merge decision"): its exit code is 0, 1 or 4.
Outcome = Literal["pass", "fail", "inconclusive"]
GateMode = Literal["verdict", "threshold", "significant"]


class MetricVerdict(BaseModel):
    """One metric of the merge verdict: its adjusted paired interval against its margin
    (EVAL.md, "The verdict")."""

    metric: str = Field(description='the delta row\'s metric name ("recall_any", "attribution_hit_rate", "error_rate")')
    k: int | None = Field(description="cut-off for @K metrics (the gate's K unless --margin named another), else null")
    label: str = Field(description='the registry\'s label at K ("Recall@5 (any)")')
    direction: Direction = Field(description="which way is better")
    margin: float = Field(description="δ: the largest worsening tolerated, on the metric's scale")
    margin_source: Literal["registry", "--margin"] = Field(description="where δ came from")
    n: int = Field(description="paired cases (both runs scored the case; a target error is not scored, error_rate counts it)")
    n_changed: int = Field(description="of the n, cases whose value differs between the runs")
    delta: float | None = Field(description="mean paired difference b − a: the delta row's paired_delta")
    ci: list[float] | None = Field(
        description="[lo, hi] of delta at the verdict's confidence (1 − 2α/m: each bound a one-sided test at α/m, Bonferroni over the family), "
        "t-interval whose variance counts one more full-scale change; null below 2 paired cases"
    )
    sd: float | None = Field(description="s, the per-case standard deviation behind ci, mde and cases_needed")
    verdict: VerdictLabel = Field(description="identical | better | equivalent | non-inferior | worse | inconclusive")
    reason: str = Field(description="one sentence: why this label")
    gated: bool = Field(
        False, description="in the gated set: the merge passes only if it is shown no worse than its margin (an "
        "inconclusive gated metric is 'not enough evidence'); any metric shown worse fails the merge"
    )
    resolution: float | None = Field(
        None, description="how far one case can move the metric at this n (scale / n): a margin below the interval's "
        "smallest half-width cannot be judged by this set whatever the runs do"
    )
    judgeable: bool = Field(
        True, description="false when even a run with no changed case could not be shown within the margin at this n"
    )
    mde: float | None = Field(
        description="the smallest true change this eval set shows as a change (ci excluding 0) with 80% power, the "
        "spread counting the change itself (a change of size Δ made of cases that each move by the whole scale adds "
        "Δ·(scale − Δ) to the variance); null when no change on the metric's scale could be shown"
    )
    cases_needed: int | None = Field(
        description="inconclusive only: paired cases that would settle it either way (shown no worse than the margin, "
        "or shown worse) with 80% power if the observed change and sd held; null otherwise"
    )
    more_cases: int | None = Field(description="cases_needed − n")
    interval: Literal["paired", "ppi++"] = Field(
        "paired", description="paired: the t-interval of the paired differences; ppi++: both runs have human grades, and "
        "the interval is of the difference of their PPI++-corrected means (EVAL.md, \"Corrected means\")"
    )
    cases_per_conversation: float | None = Field(
        None, description="conversation runs: the mean paired turns per conversation m̄; the interval, mde and "
        "cases_needed are those of whole conversations (G − 1 degrees of freedom, the design effect in sd); null when "
        "every case is its own unit"
    )
    more_conversations: int | None = Field(
        None, description="conversation runs: more_cases as conversations of m̄ turns (rounded up); null otherwise"
    )
    test: str | None = Field(description="the delta row's paired test (rows sharing it share the interval)")


class MergeVerdict(BaseModel):
    """The merge verdict: one label per metric and one for the merge (EVAL.md, "The verdict")."""

    available: bool = Field(description="false when a side has no per-case results (a metrics.json baseline)")
    verdict: VerdictLabel | None = Field(
        None, description="worse if any metric is; else inconclusive if a gated metric is; else identical if every "
        "metric is; else better if any is; else equivalent if every gated metric is (or identical); else "
        "non-inferior; null with no metric"
    )
    summary: str = Field(
        description='why, in one line, after the label: the deciding metric, its delta and interval, and its reason '
        '("Attribution hit rate -0.137 [-0.205, -0.069]: worse beyond the margin: ...")'
    )
    alpha: float = Field(description="family-wise level of the verdict (--alpha)")
    power: float = Field(0.8, description="the power mde and cases_needed are computed for")
    family_size: int = Field(
        0, description="m: distinct paired tests among the metrics with an interval and at least one changed case"
    )
    confidence: float = Field(description="of each interval: 1 − 2α/m (each bound one-sided at α/m)")
    metrics: list[MetricVerdict] = Field(default_factory=list, description="every metric both runs computed per case, at the gate's K")
    gated: list[str] = Field(default_factory=list, description="the gated set's metric names (recall_any@5, error_rate, ...)")
    not_compared: list[dict[str, str]] = Field(
        default_factory=list, description="[{metric, reason}] metrics that could not enter the verdict, and why"
    )


class Decision(BaseModel):
    """The merge decision: what the exit code says, and the one sentence every format leads with."""

    gate: GateMode = Field(description="what decided: the verdict (default), or the threshold / significant gate")
    outcome: Outcome = Field(description="pass | fail (a regression shown) | inconclusive (not enough evidence)")
    exit_code: int = Field(description="0 pass, 1 fail, 4 not enough evidence (--on-inconclusive may map it to 0 or 1)")
    on_inconclusive: Literal["exit-4", "pass", "fail"] = Field("exit-4", description="--on-inconclusive")
    allowed: bool = Field(False, description="--allow-regressions: a failed gate still exits 0")
    headline: str = Field(description="the decision and its reason in one sentence, the first line of every format")


class GateReport(BaseModel):
    """compare_runs' gate in any mode: the threshold gate (`regressions.gate_result`) plus compare's own
    checks, or the verdict (`decision.gate_report`)."""

    mode: GateMode = Field(
        description="verdict (the default: no metric shown worse, every gated metric shown no worse than its margin) | "
        "threshold (run_eval's thresholds) | significant (threshold regressions whose paired test is significant, and "
        "a significant rise of error_rate)"
    )
    passed: bool = Field(description="outcome == pass")
    outcome: Outcome = Field("pass", description="pass | fail | inconclusive (the verdict gate only: a gated metric not settled)")
    inconclusive: list[str] = Field(default_factory=list, description="the verdict gate: one line per gated metric not settled")
    allowed: bool = Field(False, description="--allow-regressions: a failed gate still exits 0")
    regressions: list[str] = Field(default_factory=list, description="one line per regression that fails the gate")
    regression_details: list[dict[str, Any]] = Field(default_factory=list, description="gate_result's regression objects (+ mrr_relative_drop)")
    not_significant: list[str] = Field(default_factory=list, description="threshold regressions --gate significant let through")
    flip_regressions: list[str] = Field(default_factory=list, description="--fail-on-flip: cases that went pass -> fail")
    skipped: list[dict[str, str]] = Field(default_factory=list, description="[{metric, reason}] the gate could not check")
    compared: list[str] = Field(default_factory=list)
    nothing_compared: bool = False
    failures: list[str] = Field(default_factory=list, description="why passed is false, one line each")
    thresholds: dict[str, float] = Field(default_factory=dict)
    k: str | None = None
    slices: dict[str, Any] | None = Field(None, description="--gate-by: {by, min_n, compared: {scope: [metric]}}")
    preset: str | None = Field(None, description="--gate-preset: the named gate the thresholds came from")
