"""The metric registry: every aggregate metric once, with what each consumer needs to know.

Aggregation (which means a cell holds, which a slice holds), re-scoring (which keys are
retrieval's), compare_runs (its rows, their order, direction and paired tests), the gate
(what it watches, with which threshold), `--threshold` (scale and direction), the matrix's
`--expect-order` and the ir_measures names all read this table; their lists are derived
below, not kept by hand. A metric added here appears in each of them by its flags.

Field by field (`Metric`):
- key: the metrics.json key of the cell's value (`recall_at_k_avg`, `groundedness_avg`).
- label: what every report (terminal, summary.md, HTML) calls it; `{k}` is the K shown.
- short: its header in a table of slices (summary.md's and the HTML's by-category tables).
- at_k: for a mean of an @K metric, that metric's name (`recall_any`): the cell's value is
  the metric at the primary K; compare reports it per K under this name.
- seed_name: the seed's per-record name of the @K metric (records without `at_k`).
- ir_measure: ir_measures' name of the @K metric (`Success`, `R`, `nDCG`).
- direction: which way is better (compare's better/worse, the gate, threshold ceilings).
- scale: the largest value (1 for rates, 5 for the 0-5 judge means).
- stage: which step computes it: retrieval | judge | answer_quality | expectations |
  abstention | response | run.
- mean: aggregate_records averages its per-case values (`MEAN_METRICS`).
- sliced: a slice cell (by_tag, by_category, ...) holds it (`SLICE_METRICS`).
- compared: compare_runs reports a row for it.
- per_case: compare_runs pairs it case by case: "as_is" (the per-case value as the record
  gives it), "derived" (compare derives it per case: abstention, citations, error kinds);
  None: no paired test (a ratio over a subset that moves between runs).
- gated: the `Thresholds` attribute when the regression gate watches it.
- margin: the largest worsening, on the metric's scale, that the merge verdict tolerates
  (non-inferiority margin, compare_runs' `--margin`). Every metric with a paired test has one:
  the verdict judges each of them. A gated metric's margin is also the default of its
  `--regression-threshold-*` (`Thresholds`).
- verdict_gated: in the verdict's default gated set (EVAL.md, "The merge decision"): the
  merge passes only when the metric is shown no worse than its margin. Any metric shown worse
  fails the merge, gated or not.
- threshold: `--threshold` may name it (on `scale`; a ceiling when lower is better).
- default_threshold: a bare `--threshold 0.7` applies to it.
- summary: a run summary (terminal, summary.md, HTML) lists it "always" ("—" when not
  measured) or only when "measured" (n > 0); only compared metrics are listed.
- block: the block of a metrics.json cell that holds it (`operational_metrics`), None: the
  cell itself.
- answer_side: it depends on what the answerer was given (the chunks a target was asked
  for), so it is not comparable between runs that asked for different K.
- views: the report tables that show it (`View`): each table's columns or rows are
  `shown_in(view)`, in `REPORT_ORDER`, so no report keeps its own list of metric keys.
- flip: the name compare_runs gives its pass/fail flips (`attribution_hit`), None: it has
  none (recall_any@K flips under its own name).

One name per number: inside the code a metric is called by `Metric.name`, its @K name
(`recall_any`) for an @K metric, else its key. The seeds' names are spoken only at the
edges they dictate: results.jsonl's `retrieval_metrics.recall_at_k` (seed 000, `seed_name`),
metrics.json's `recall_at_k_avg` (seed 000, `key`), `RunResult.data["recall_at_k"]` (seed
001's programmatic API, the same hit rate), the gate flag `--regression-threshold-recall`
(seed 000, `gated`) and ir_measures' `Success@5` (`ir_measure`); EVAL.md ("One number, its
names") lists them.

Every report names a metric by `label_of` (or, for a table's column, `short_label_of`); an
@K metric's name (`recall_any`, as compare's rows and the per-K tables give it) is read as
its headline key, so `label_of("recall_any", 5) == label_of("recall_at_k_avg", 5)`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from evalkit.metrics.expectations import (
    EXPECTATION_METRICS,
    LOWER_IS_BETTER_EXPECTATIONS,
)
from evalkit.store.runlog import Cell, Rec

__all__ = [
    "ANSWER_SIDE_KEYS",
    "HEADLINE_KEYS",
    "METRICS",
    "OPERATIONAL_KEYS",
    "REPORT_ORDER",
    "SUMMARY_KEYS",
    "Metric",
    "View",
    "by_key",
    "label_of",
    "registry_hash",
    "short_label_of",
    "shown_in",
]

Direction = Literal["higher", "lower"]
# The report tables that show a selection of metrics (`Metric.views`):
#   cards            the HTML run report's headline cards
#   slice_columns    the HTML run report's by-slice tables (a column when a slice has a value)
#   category_columns summary.md's by-category table
#   case_columns     the HTML run report's case table (each case's own value)
#   worst_columns    summary.md's worst cases (each case's own value)
#   trend            the HTML trend report's charts
#   compact          the @K means where a row has room for three: the terminal summary's rows
#                    at every other K, the config matrix's columns (matrix.json's `values`)
#   trials           the `--trials` table (terminal and summary.md)
#   domain_drift     the HTML comparison's per-domain table (seed 001's drift view)
View = Literal[
    "cards", "slice_columns", "category_columns", "case_columns", "worst_columns", "trend", "compact", "trials",
    "domain_drift",
]
Stage = Literal["retrieval", "judge", "answer_quality", "expectations", "abstention", "response", "run"]


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    direction: Direction
    stage: Stage
    scale: float = 1.0
    at_k: str | None = None
    seed_name: str | None = None
    ir_measure: str | None = None
    mean: bool = True
    sliced: bool = False
    compared: bool = True
    per_case: Literal["as_is", "derived"] | None = None
    gated: str | None = None
    margin: float | None = None
    verdict_gated: bool = False
    threshold: bool = True
    default_threshold: bool = False
    short: str = ""  # a table column's header (summary.md and HTML by-slice tables); "" = label
    summary: Literal["always", "measured"] = "measured"
    block: Literal["operational_metrics"] | None = None
    answer_side: bool = False
    views: tuple[View, ...] = ()
    flip: str | None = None

    @property
    def name(self) -> str:
        """What the code calls it: the @K name (`recall_any`) of an @K metric, else its key."""
        return self.at_k or self.key


# The headline @K means, as the reports name them at the primary K.
_LABELS = {
    "recall_at_k_avg": "Recall@{k} (any)",
    "mrr_avg": "MRR@{k}",
    "precision_at_k_avg": "Precision@{k}",
    "ndcg_at_k_avg": "nDCG@{k}",
    "recall_all_avg": "Recall_all@{k}",
    "recall_frac_avg": "Recall_frac@{k}",
    "map_avg": "MAP@{k}",
    "rprec_avg": "R-precision@{k}",
}
# Seed 004's expectation metrics, as the reports name them.
_EXPECTATION_LABELS = {
    "must_include_recall": "Must-include recall (retrieved)",
    "must_include_mrr": "Must-include MRR (retrieved)",
    "must_include_precision": "Must-include precision (retrieved)",
    "must_exclude_hit_rate": "Must-exclude hit rate (retrieved)",
    "must_exclude_violation_rate": "Must-exclude violation rate (retrieved)",
    "ordering_accuracy": "Ordering accuracy (retrieved)",
    "fact_retention": "Fact retention (token budget)",
    "answer_must_include_recall": "Must-include recall (answer)",
    "answer_must_exclude_violation_rate": "Must-exclude violation rate (answer)",
    "answer_ordering_accuracy": "Ordering accuracy (answer)",
}


def _at_k(key: str, name: str, seed: str | None, ir: str | None, **kw: object) -> Metric:
    # A run summary lists every headline @K mean, measured or not.
    return Metric(key, _LABELS[key], "higher", "retrieval", at_k=name, seed_name=seed, ir_measure=ir, summary="always", **kw)  # type: ignore[arg-type]


def _expectation(name: str) -> Metric:
    lower = name in LOWER_IS_BETTER_EXPECTATIONS
    return Metric(
        name,
        _EXPECTATION_LABELS[name],
        "lower" if lower else "higher",
        "expectations",
        sliced=True,
        per_case="as_is",
        margin=0.05,
    )


def _operational(key: str, label: str, **kw: object) -> Metric:
    # The target's failures: in a cell's `operational_metrics`, over every case.
    return Metric(key, label, "lower", "run", mean=False, summary="always", block=Cell.OPERATIONAL, **kw)  # type: ignore[arg-type]


# The tables that list the headline means (recall, MRR, nDCG) and each case's own values.
_HEADLINE_VIEWS: tuple[View, ...] = (
    "cards", "slice_columns", "category_columns", "case_columns", "trend", "compact", "trials", "domain_drift",
)
_JUDGE_VIEWS: tuple[View, ...] = (
    "cards", "slice_columns", "category_columns", "case_columns", "worst_columns", "trend", "trials", "domain_drift",
)

# The headline @K means first (recall, MRR, precision, nDCG, then the other recalls: the order
# lists of names are shown in), then everything else in compare_runs' report order (compare
# orders its @K rows by metrics.retrieval.AT_K_METRICS).
METRICS: tuple[Metric, ...] = (
    _at_k(
        "recall_at_k_avg",
        "recall_any",
        "recall_at_k",
        "Success",
        sliced=True,
        gated="recall",
        margin=0.05,
        verdict_gated=True,
        default_threshold=True,
        short="Recall@{k}",
        views=(*_HEADLINE_VIEWS, "worst_columns"),
    ),
    _at_k(
        "mrr_avg", "mrr", "mrr", "RR", sliced=True, gated="mrr", margin=0.10, verdict_gated=True, default_threshold=True,
        short="MRR@{k}", views=(*_HEADLINE_VIEWS, "worst_columns"),
    ),
    _at_k("precision_at_k_avg", "precision", "precision_at_k", "P", margin=0.05, short="Precision@{k}", views=("trials",)),
    _at_k(
        "ndcg_at_k_avg", "ndcg", "ndcg_at_k", "nDCG", sliced=True, margin=0.05, default_threshold=True, short="nDCG@{k}",
        views=_HEADLINE_VIEWS,
    ),
    _at_k(
        "recall_all_avg", "recall_all", "recall_all", None, sliced=True, margin=0.05, short="Recall_all@{k}",
        views=("slice_columns",),
    ),
    # Seed 001's recall ("Recall drop > 5%"): gated beside the hit rate.
    _at_k(
        "recall_frac_avg", "recall_frac", "recall_frac", "R", sliced=True, margin=0.05, verdict_gated=True,
        short="Recall_frac@{k}", views=("slice_columns", "domain_drift"),
    ),
    # trec_eval's core measures (issue 43): map_cut_K and Rprec on the ranking cut at K, each
    # gold support credited once. Not in slices or cards: the headline rows and compare have them.
    _at_k("map_avg", "map", None, "AP", margin=0.05, short="MAP@{k}"),
    _at_k("rprec_avg", "rprec", None, None, margin=0.05, short="R-prec@{k}"),
    Metric(
        "scope_miss_rate",
        "Scope miss rate",
        "lower",
        "retrieval",
        sliced=True,
        per_case="as_is",
        gated="scope_miss",
        margin=0.10,
        verdict_gated=True,
        summary="always",
    ),
    Metric(
        "attribution_hit_rate",
        "Attribution hit rate",
        "higher",
        "retrieval",
        sliced=True,
        per_case="as_is",
        gated="attribution",
        margin=0.05,
        verdict_gated=True,
        default_threshold=True,
        short="Attribution",
        summary="always",
        answer_side=True,
        views=("slice_columns", "trials", "domain_drift"),
        flip="attribution_hit",
    ),
    Metric(
        "recency_pass_rate", "Recency pass rate", "higher", "retrieval", sliced=True, per_case="as_is", margin=0.05,
        summary="always", views=("slice_columns",),
    ),
    Metric(
        "groundedness_avg",
        "Groundedness (0-5)",
        "higher",
        "judge",
        scale=5.0,
        sliced=True,
        per_case="as_is",
        gated=Rec.GROUNDEDNESS,
        margin=0.5,
        verdict_gated=True,
        short="Groundedness",
        summary="always",
        answer_side=True,
        views=_JUDGE_VIEWS,
        flip=Rec.GROUNDEDNESS,
    ),
    Metric(
        "correctness_avg",
        "Correctness (0-5)",
        "higher",
        "judge",
        scale=5.0,
        sliced=True,
        per_case="as_is",
        gated=Rec.CORRECTNESS,
        margin=0.5,
        verdict_gated=True,
        short="Correctness",
        summary="always",
        answer_side=True,
        views=_JUDGE_VIEWS,
        flip=Rec.CORRECTNESS,
    ),
    Metric(
        "answer_quality_avg",
        "Answer quality (0-1)",
        "higher",
        "answer_quality",
        sliced=True,
        per_case="as_is",
        margin=0.05,
        answer_side=True,
    ),
    Metric("answer_relevance_avg", "Answer relevance (0-1)", "higher", "answer_quality"),
    Metric("answer_groundedness_avg", "Answer groundedness (0-1)", "higher", "answer_quality"),
    Metric("answer_completeness_avg", "Answer completeness (0-1)", "higher", "answer_quality"),
    # Issue 42 item 6 (no gold needed): the share of the retrieved chunks a judge finds relevant
    # to the question, per case; its mean is a macro context precision@K, measured on cases
    # with gold or without. Answer-side: it is over the K chunks the target was asked for.
    Metric(
        "context_relevance_avg", "Context relevance (0-1)", "higher", "judge", sliced=True, per_case="as_is",
        margin=0.05, short="Context rel.", answer_side=True,
    ),
    *(_expectation(name) for name in EXPECTATION_METRICS),
    Metric(
        "abstention_accuracy",
        "Abstention accuracy",
        "higher",
        "abstention",
        mean=False,
        sliced=True,
        per_case="derived",
        gated="abstention",
        margin=0.05,
        default_threshold=True,
        short="Abstention acc.",
        summary="always",
        answer_side=True,
        views=("cards", "slice_columns", "category_columns", "trend", "trials", "domain_drift"),
    ),
    Metric(
        "hallucination_rate_unanswerable",
        "Hallucination rate (unanswerable)",
        "lower",
        "abstention",
        mean=False,
        sliced=True,
        gated="hallucination",
        margin=0.05,
        short="Hallucination",
        summary="always",
        answer_side=True,
        views=("cards", "slice_columns"),
    ),
    Metric(
        "false_abstention_rate",
        "False abstention rate (answerable)",
        "lower",
        "abstention",
        mean=False,
        sliced=True,
        per_case="derived",
        gated="false_abstention",
        margin=0.05,
        short="False abstention",
        summary="always",
        answer_side=True,
        views=("slice_columns", "trials", "domain_drift"),
    ),
    Metric("abstention_precision", "Abstention precision", "higher", "abstention", mean=False, answer_side=True),
    Metric("abstention_f1", "Abstention F1", "higher", "abstention", mean=False, answer_side=True),
    Metric(
        "abstention_decision_accuracy",
        "Abstention decision accuracy",
        "higher",
        "abstention",
        mean=False,
        per_case="derived",
        margin=0.05,
        answer_side=True,
        flip="abstention_correct",
    ),
    # abstention_accuracy under another name: no row of its own in compare.
    Metric("abstention_recall", "Abstention recall", "higher", "abstention", mean=False, compared=False),
    Metric(
        "has_citations_rate", "Has citations rate (answered)", "higher", "response", per_case="derived", margin=0.05,
        summary="always", views=("trials",),
    ),
    Metric(
        "response_valid_rate", "Response valid rate (schema)", "higher", "response", per_case="derived", margin=0.05,
        views=("trials",),
    ),
    Metric("latency_budget_score_avg", "Latency budget score", "higher", "run", default_threshold=True, views=("trials",)),
    Metric("within_budget_rate", "Within latency budget", "higher", "run", sliced=True),
    # In the merge verdict with its own margin: a regression made of target errors (which the
    # paired quality metrics leave out) fails it (issue 30 item 6).
    _operational(
        "error_rate", "Error rate", sliced=True, per_case="derived", margin=0.05, verdict_gated=True,
        views=("cards", "slice_columns", "category_columns", "trials"),
    ),
    _operational("timeout_rate", "Timeout rate", per_case="derived", margin=0.05),
    _operational("empty_response_rate", "Empty response rate", per_case="derived", margin=0.05),
)

_BY_KEY = {m.key: m for m in METRICS}
# An @K metric's name (`recall_any`) -> its headline entry: compare's rows and the per-K
# tables name @K metrics so, and show them with the headline's label at their K.
_BY_AT_K = {m.at_k: m for m in METRICS if m.at_k is not None}
# The headline @K rows of every run summary (terminal, HTML), in this order, at the primary K.
HEADLINE_KEYS = (
    "recall_at_k_avg",
    "recall_all_avg",
    "recall_frac_avg",
    "precision_at_k_avg",
    "mrr_avg",
    "ndcg_at_k_avg",
    "map_avg",
    "rprec_avg",
)
# What a run summary (terminal, summary.md, HTML) lists, in this order: the headline @K
# means, then every other metric compare reports, each "always" or when "measured".
SUMMARY_KEYS = (*HEADLINE_KEYS, *(m.key for m in METRICS if m.compared and m.at_k is None))
# The order every report lists metrics in: the headline @K means in HEADLINE_KEYS' order, then
# every other metric in registry order. (METRICS keeps its own order: registry_hash reads it.)
REPORT_ORDER = (*HEADLINE_KEYS, *(m.key for m in METRICS if m.at_k is None))
# Held in a cell's `operational_metrics` block, not in the cell itself.
OPERATIONAL_KEYS = tuple(m.key for m in METRICS if m.block == Cell.OPERATIONAL)
# What depends on the chunks the answerer was given (not comparable across an asked K).
ANSWER_SIDE_KEYS = tuple(m.key for m in METRICS if m.answer_side)


# The fields of an entry that say what its number means (issue 30, seed 004's "metric
# definitions are contract"): not its label, table header, summary listing, gate threshold
# or margin, which change how a number is shown or judged, never the number.
DEFINITION_FIELDS = ("key", "direction", "stage", "scale", Cell.AT_K, "seed_name", "ir_measure", "mean", "per_case",
                     "block", "answer_side")


def registry_hash(metrics: tuple[Metric, ...] = METRICS) -> str:
    """sha256 (hex) of every metric's DEFINITION_FIELDS, in registry order: a run records it
    (with evalkit's version) as the scorer its numbers were computed by, and compare_runs
    refuses two runs scored by different ones. Adding, removing or redefining a metric
    changes it; relabelling one or moving a threshold does not."""
    rows = [[getattr(m, f) for f in DEFINITION_FIELDS] for m in metrics]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def shown_in(view: View) -> tuple[Metric, ...]:
    """The metrics a report table shows (`Metric.views`), in `REPORT_ORDER`."""
    return tuple(_BY_KEY[key] for key in REPORT_ORDER if view in _BY_KEY[key].views)


def by_key(key: str) -> Metric | None:
    """The registry entry of a metrics.json key, or None."""
    return _BY_KEY.get(key)


def _entry(name: str) -> Metric | None:
    return _BY_KEY.get(name) or _BY_AT_K.get(name)


def short_label_of(key: str, k: int | str | None = None) -> str:
    """A table column's header for `key` (its short label, else its label), at K `k`.

    `key` is a metrics.json key or an @K metric's name (`ndcg`); an unknown name is
    returned as given (with `@k` when a K is given)."""
    metric = _entry(key)
    if metric is None:
        return key if k is None else f"{key}@{k}"
    return (metric.short or metric.label).replace("{k}", "K" if k is None else str(k))


def label_of(key: str, k: int | str | None = None, *, heuristic: bool = False) -> str:
    """The label every report shows for `key` (at K `k`), marked "(heuristic)" for a judge
    score the offline heuristic gave.

    `key` is a metrics.json key or an @K metric's name (`recall_any`, read as its headline
    key `recall_at_k_avg`); a name the registry does not have is returned as given (with
    `@k` when a K is given), so a report never hides a number it cannot name.
    """
    metric = _entry(key)
    if metric is None:
        return key if k is None else f"{key}@{k}"
    label = metric.label.replace("{k}", "K" if k is None else str(k))
    if heuristic and metric.stage in ("judge", "answer_quality"):
        label += " (heuristic)"
    return label
