"""The comparison result: one pydantic model that every renderer reads (STYLE §6.10).

`Comparison.model_dump(mode="json")` is `compare_runs.py --format json`; the rich and
markdown reports in `evalkit/report/compare.py` print the same numbers and compute none.
Top-level names are a contract (DESIGN.md §9): CI scripts read `invariants`, `deltas`,
`flips`, `unscoreable`, `config_diff`, `drift` and `gate`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from evalkit.gate.models import Decision, Direction, GateReport, MergeVerdict
from evalkit.store.runlog import Rec

__all__ = [
    "ChunkRef",
    "Comparison",
    "CorpusReport",
    "DeltaRow",
    "DriftCase",
    "DriftReport",
    "Flip",
    "Flips",
    "InvariantReport",
    "LatencyReport",
    "LatencyRow",
    "NotComparable",
    "RunUnscoreable",
    "SourceInfo",
    "StageCell",
    "StageTransitions",
    "StatsSettings",
]


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
    indexing coverage): `evalkit.gate.invariants.CORPUS_KEYS` of metrics.json's
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
    unit: Literal["case", "conversation"] = Field(
        "case", description="what the intervals and tests resample: the case, or for runs of conversations the whole "
        "conversation (its turns are not independent; EVAL.md, \"Conversations\")"
    )
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

    id: str = Field(description=Rec.CASE_ID)
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
    turn: str | None = Field(None, description='a conversation\'s turn: where it sits ("c1 · turn 2 of 3"); null otherwise')
    history_a: list[list[str]] = Field(default_factory=list, description="[role, text] the turn was sent in run a (200 chars each)")
    history_b: list[list[str]] = Field(default_factory=list, description="the same in run b")


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
    pairwise_judge: list[dict[str, Any]] = Field(
        default_factory=list,
        description="per pairwise judge with verdicts about these runs (run b's pairwise_judge.jsonl; --pairwise-judge "
        "asks one): {judge, a, b, equal, stale, cases, n_flipped, flip_rate, n_verbosity_probed, n_prefers_padded, "
        "verbosity_rate}; not part of the gate or the verdict",
    )
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
