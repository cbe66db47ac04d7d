"""The comparison result: one pydantic model that every renderer reads (STYLE §6.10).

`Comparison.model_dump(mode="json")` is `compare_runs.py --format json`; the rich and
markdown reports in `evalkit/report/compare.py` print the same numbers and compute none.
Top-level names are a contract (DESIGN.md §9): CI scripts read `invariants`, `deltas`,
`flips`, `unscoreable`, `config_diff`, `drift` and `gate`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "ChunkRef",
    "Comparison",
    "CorpusReport",
    "Decision",
    "DeltaRow",
    "DriftCase",
    "DriftReport",
    "Flip",
    "Flips",
    "GateReport",
    "InvariantReport",
    "LatencyReport",
    "LatencyRow",
    "MergeVerdict",
    "MetricVerdict",
    "NotComparable",
    "RunUnscoreable",
    "SourceInfo",
    "StageCell",
    "StageTransitions",
    "StatsSettings",
]

Direction = Literal["higher_is_better", "lower_is_better"]
VerdictLabel = Literal["identical", "better", "equivalent", "non-inferior", "worse", "inconclusive"]
# What the merge decision is (EVAL.md, "The merge decision"): its exit code is 0, 1 or 4.
Outcome = Literal["pass", "fail", "inconclusive"]
GateMode = Literal["verdict", "threshold", "significant"]


class NotComparable(BaseModel):
    """Which numbers a broken (and ignored) invariant makes meaningless."""

    reason: str = Field(description="the broken invariant, as listed in `violations`")
    metrics: list[str] = Field(description='metric names it affects; ["*"] means every number')


class InvariantReport(BaseModel):
    """Seed 000 §10.1: may the two runs be compared at all?"""

    ok: bool = Field(description="no invariant is broken")
    violations: list[str] = Field(default_factory=list, description="one line per broken invariant, run a first")
    ignored: bool = Field(False, description="--ignore-invariants let a broken invariant through")
    not_comparable: list[NotComparable] = Field(default_factory=list, description="what each violation makes incomparable")
    warnings: list[str] = Field(
        default_factory=list,
        description="what may explain a difference without refusing the pair: the notes or index changed (an invariant "
        "with --same-corpus), a scorer only one run recorded",
    )


class CorpusReport(BaseModel):
    """The notes and index each run searched, from its target's index stats (seed 000's
    indexing coverage): `evalkit.compare.gate.CORPUS_KEYS` of metrics.json's
    `aggregate_metrics.indexing_coverage`."""

    available: bool = Field(False, description="at least one run's target served index stats")
    a: dict[str, Any] = Field(default_factory=dict, description="run a's index stats ({} when its target served none)")
    b: dict[str, Any] = Field(default_factory=dict)
    changed: list[str] = Field(default_factory=list, description="keys whose values differ (both runs have stats)")
    same_corpus: bool = Field(False, description="--same-corpus: a change is an invariant violation, not a warning")


class StatsSettings(BaseModel):
    """How significance was decided (EVAL.md, "Comparing two runs")."""

    seed: int = Field(description="--seed of every bootstrap and randomization draw")
    resamples: int = Field(description="bootstrap resamples and random sign patterns per test")
    confidence: float = Field(description="coverage of the bootstrap interval (ci95: 0.95)")
    alpha: float = Field(description="significance level after correction")
    correction: Literal["holm", "bh"] = Field(description="holm (family-wise) or bh (false discovery rate, --fdr)")
    family_size: int = Field(description="tests in the multiple-testing family (m)")
    n_tested: int = Field(description="delta rows with a paired test (in the family or not)")
    n_significant: int = Field(description="delta rows significant after correction")
    normal_from: dict[str, int] = Field(
        default_factory=dict, description='{"ci": 30, "p": 100}: the effective changed cases from which a test\'s '
        'interval, and its p-value, come from normal theory instead of draws (EVAL.md, "Normal theory for many changed cases")'
    )
    methods: dict[str, dict[str, int]] = Field(
        default_factory=dict, description='distinct paired tests per method: {"ci": {method: count}, "p": {method: count}}'
    )


class DeltaRow(BaseModel):
    """One metric in one scope at one K: run a (baseline) vs run b (new)."""

    metric: str = Field(description='metric name: "recall_any", "mrr", "groundedness_avg", ...')
    ir_measure: str | None = Field(
        None, description='the same metric in ir_measures\' vocabulary ("nDCG@10", "R@5", "RR@10"); null when it has none'
    )
    scope: str = Field(description='"overall" or "<grouping>:<value>", e.g. "category:multi_hop", "tag:work"')
    k: int | None = Field(description="cut-off for @K metrics, else null")
    a: float | None = Field(description="run a's aggregate value (as metrics.json computes it)")
    b: float | None = Field(description="run b's aggregate value")
    delta: float | None = Field(description="b - a; null when either is null")
    n_a: int = Field(description="cases behind a")
    n_b: int = Field(description="cases behind b")
    n: int | None = Field(description="cases both runs scored (the paired test's n); null without a test")
    n_excluded_a: int | None = Field(None, description="cases run a could not score while b did (excluded pairwise)")
    n_excluded_b: int | None = Field(None, description="cases run b could not score while a did")
    n_changed: int | None = Field(None, description="of the n paired cases, those whose value differs between the runs")
    paired_delta: float | None = Field(None, description="mean paired difference over the n cases (what ci95 is about)")
    paired_a: float | None = Field(None, description="run a's mean over the n paired cases: paired_delta = paired_b − paired_a")
    paired_b: float | None = Field(None, description="run b's mean over the n paired cases")
    ci95: list[float | None] | None = Field(
        None, description="interval [lo, hi] of paired_delta: the percentile bootstrap's, drawn or by normal theory (ci_method)"
    )
    p_value: float | None = Field(
        None, description="paired randomization (sign-flip) test, two-sided: counted, drawn or by normal theory (p_method)"
    )
    p_exact: bool | None = Field(None, description="p from counting every sign pattern, not from draws or an approximation")
    ci_method: Literal["exact", "bootstrap", "normal"] | None = Field(
        None, description="exact (every paired difference the same: no spread) | bootstrap (--resamples resamples) | "
        "normal (normal theory with the bootstrap's skewness, from stats.normal_from.ci effective changed cases on)"
    )
    p_method: Literal["exact", "monte_carlo", "normal"] | None = Field(
        None, description="exact (every sign pattern counted) | monte_carlo (p_draws random sign patterns) | normal "
        "(normal approximation of the sign-flip test, from stats.normal_from.p effective changed cases on)"
    )
    p_draws: int | None = Field(
        None, description="monte_carlo only: the sign patterns drawn; fewer than --resamples when drawing stopped "
        "once p > alpha was settled (the row cannot be significant)"
    )
    p_adjusted: float | None = Field(None, description="p after Holm / Benjamini-Hochberg over the family; null if not in it")
    test: str | None = Field(None, description='the paired test shown ("metric@K|scope" of the first row with this data); rows with the same paired data share it')
    in_family: bool = Field(False, description="counted in the multiple-testing family")
    significant: bool = Field(False, description="p_adjusted <= alpha")
    direction: Direction | None = Field(None, description="which way is better; null when neither is")
    change: Literal["better", "worse", "unchanged"] | None = Field(
        None, description="the sign of the reported delta (paired_delta where there is a paired test, else delta) read with direction"
    )
    comparable: bool = Field(True, description="false when an ignored invariant makes this number meaningless")
    note: str | None = Field(None, description='why not significant ("not distinguishable from noise at n=51", ...)')

    @property
    def reported_delta(self) -> float | None:
        """The Δ every report shows: the paired mean difference where there is a paired test
        (what ci95 and p are about), else b - a of the aggregates."""
        return self.paired_delta if self.paired_delta is not None else self.delta


class ChunkRef(BaseModel):
    """A note section: where a chunk or a gold support lives."""

    rel_path: str | None = None
    heading_path: str | None = None


class Flip(BaseModel):
    """A case that went pass -> fail (regression) or fail -> pass (improvement) on one metric."""

    id: str = Field(description="test_case_id")
    metric: str = Field(description="recall_any@K | attribution_hit | abstention_correct | groundedness | correctness")
    a: float | None = Field(description="the case's value in run a (1/0 for pass/fail, 0-5 for a judge)")
    b: float | None = Field(description="the case's value in run b")
    size: float = Field(description="|b - a| on a 0-1 scale (a judge's points / 5); flips sort by it")
    question: str | None = None
    first_hit_rank_a: int | None = Field(None, description="position of the first gold match in run a's top K; null: none")
    first_hit_rank_b: int | None = None
    top_a: list[ChunkRef] = Field(default_factory=list, description="run a's top chunks (what was retrieved)")
    top_b: list[ChunkRef] = Field(default_factory=list, description="run b's top chunks")
    gold: list[ChunkRef] = Field(default_factory=list, description="the case's gold supports")
    abstained_a: bool | None = None
    abstained_b: bool | None = None


class Flips(BaseModel):
    """Per-case pass/fail changes (EVAL.md, "Flips")."""

    available: bool = Field(True, description="false when a side has no per-case records (a metrics.json baseline)")
    k: int | None = Field(None, description="the K of recall flips (run b's primary K)")
    regressions: list[Flip] = Field(default_factory=list)
    improvements: list[Flip] = Field(default_factory=list)
    counts: dict[str, dict[str, int]] = Field(default_factory=dict, description="{metric: {regressions, improvements}}")


class StageCell(BaseModel):
    """One cell of the stage transition matrix: the paired cases at stage `a` in run a and
    stage `b` in run b."""

    a: str = Field(description="the cases' failure stage in run a (the baseline); one of `order`")
    b: str = Field(description="their failure stage in run b")
    n: int = Field(description="paired cases in this cell (len(ids))")
    ids: list[str] = Field(description="every case in this cell, by test_case_id")


class StageTransitions(BaseModel):
    """Per-case failure stage, baseline -> candidate (EVAL.md, "Failure stages"): where each
    paired case went wrong in each run. The cells' n sum to the paired case count."""

    available: bool = Field(True, description="false when a side has no per-case records (a metrics.json baseline)")
    k: int | None = Field(None, description="the K of the retrieval check (the comparison's primary K); null: no shared K, check skipped")
    order: list[str] = Field(default_factory=list, description="every stage, in report order (the matrix's rows and columns)")
    n: int = Field(0, description="paired cases: the sum of the cells' n")
    a: dict[str, int] = Field(default_factory=dict, description="{stage: paired cases} in run a (the matrix's row totals)")
    b: dict[str, int] = Field(default_factory=dict, description="{stage: paired cases} in run b (the column totals)")
    cells: list[StageCell] = Field(
        default_factory=list, description="the non-empty cells, by run a's stage then run b's, each in `order`"
    )


class RunUnscoreable(BaseModel):
    """Cases one run could not score, excluded pairwise (never turned into 0)."""

    n_cases: int = Field(description="records in the run")
    target_errors: int = Field(0, description="cases with a target error other than empty_answer: every metric excluded")
    target_error_kinds: dict[str, int] = Field(default_factory=dict)
    judge_errors: dict[str, int] = Field(default_factory=dict, description="{judge: cases} whose judge failed: that judge's score excluded")
    empty_answers: int = Field(0, description="empty answers (scored, not excluded: the system's failure)")
    ids_target_error: list[str] = Field(default_factory=list, description="first 20 ids")
    ids_judge_error: list[str] = Field(default_factory=list, description="first 20 ids")
    only_in_this_run: int = Field(0, description="cases the other run does not have (unpaired)")
    available: bool = Field(True, description="false when counted from a metrics.json (no records)")


class LatencyRow(BaseModel):
    metric: str
    a: float | None
    b: float | None
    delta: float | None
    n_a: int | None = None
    n_b: int | None = None


class LatencyReport(BaseModel):
    """Latency and cost, with the reasons the latency numbers may not be comparable."""

    comparable: bool = Field(description="same concurrency, target kind and hardware")
    warnings: list[str] = Field(default_factory=list)
    differences: dict[str, list[Any]] = Field(default_factory=dict, description="{setting: [a, b]} behind the warnings")
    rows: list[LatencyRow] = Field(default_factory=list)


class DriftCase(BaseModel):
    """One case whose answer text changed."""

    id: str
    question: str | None = None
    similarity: float = Field(description="difflib ratio of the two answers' words (1 = same)")
    words_removed: int
    words_added: int
    diff: str = Field(description="word diff: [-removed-] {+added+}, long unchanged runs elided with …")
    answer_a: str | None = None
    answer_b: str | None = None
    references_added: list[ChunkRef] = Field(default_factory=list)
    references_removed: list[ChunkRef] = Field(default_factory=list)


class DriftReport(BaseModel):
    """Answer drift (seed 001): cases both runs answered whose answer text changed."""

    available: bool = True
    n_compared: int = Field(0, description="cases both runs answered")
    n_changed: int = Field(0, description="of those, answers that differ (whitespace-insensitive)")
    ids: list[str] = Field(default_factory=list, description="every changed case, most changed first")
    cases: list[DriftCase] = Field(default_factory=list, description="the first --show-drift of them, with diffs")


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
    """The regression gate: evalkit.compare.gate.gate_result plus compare's own checks."""

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


class SourceInfo(BaseModel):
    """Where one side of the comparison came from."""

    run_id: str
    kind: Literal["run", "baseline", "metrics"] = Field(description="run folder | baseline.json | metrics.json only")
    path: str
    has_records: bool = Field(description="per-case values available (paired tests, flips, drift)")


class Comparison(BaseModel):
    """Everything compare_runs reports, computed once."""

    schema_version: int = 1
    run_id_1: str = Field(description="run a, the baseline")
    run_id_2: str = Field(description="run b, the new run")
    decision: Decision | None = Field(
        None, description="the merge decision: outcome (pass | fail | inconclusive), exit code and the one-sentence headline"
    )
    verdict: MergeVerdict = Field(description="the merge verdict: better, equivalent, non-inferior, worse or inconclusive")
    sources: dict[str, SourceInfo]
    n: dict[str, int] = Field(description="{a, b, paired, only_a, only_b}: cases per run and paired by test_case_id")
    ks: dict[str, Any] = Field(description="{compared: [K], primary: K, only_a: [K], only_b: [K]}")
    stats: StatsSettings
    invariants: InvariantReport
    deltas: list[DeltaRow]
    flips: Flips
    unscoreable: dict[str, RunUnscoreable]
    latency: LatencyReport
    config_diff: dict[str, list[Any]] = Field(description="{dotted.key: [a, b]} for every differing config.json key")
    config_diff_available: bool = True
    corpus: CorpusReport = Field(
        default_factory=CorpusReport, description="each run's index version, document and chunk counts and coverage"
    )
    drift: DriftReport
    stages: StageTransitions = Field(
        default_factory=lambda: StageTransitions(available=False),
        description="failure stage per paired case, run a -> run b, with the cases behind each cell"
    )
    gate: GateReport
    notes: list[str] = Field(default_factory=list)

    def significant_deltas(self) -> list[DeltaRow]:
        """Rows significant after correction, in report order."""
        return [row for row in self.deltas if row.significant]

    @property
    def identical(self) -> bool:
        """Both runs have per-case results and score the same: no paired case changed on any
        metric, no case flipped, and every delta row is 0 (or measured by neither run)."""
        if not self.flips.available or self.flips.regressions or self.flips.improvements or not self.n.get("paired"):
            return False
        tested = [row for row in self.deltas if row.n]
        return bool(tested) and all(not row.n_changed for row in tested) and all(
            row.reported_delta is None or abs(row.reported_delta) <= 1e-12 for row in self.deltas
        )
