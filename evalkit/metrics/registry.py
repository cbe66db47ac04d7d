"""The metric registry: every aggregate metric once, with what each consumer needs to know.

Aggregation (which means a cell holds, which a slice holds), re-scoring (which keys are
retrieval's), compare_runs (its rows, their order, direction and paired tests), the gate
(what it watches, with which threshold), `--threshold` (scale and direction), the matrix's
`--expect-order` and the ir_measures names all read this table; their lists are derived
below, not kept by hand. A metric added here appears in each of them by its flags.

Field by field (`Metric`):
- key: the metrics.json key of the cell's value (`recall_at_k_avg`, `groundedness_avg`).
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
- threshold: `--threshold` may name it (on `scale`; a ceiling when lower is better).
- default_threshold: a bare `--threshold 0.7` applies to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalkit.metrics.expectations import EXPECTATION_METRICS, LOWER_IS_BETTER_EXPECTATIONS

__all__ = ["METRICS", "Metric", "by_key"]

Direction = Literal["higher", "lower"]
Stage = Literal["retrieval", "judge", "answer_quality", "expectations", "abstention", "response", "run"]


@dataclass(frozen=True)
class Metric:
    key: str
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
    threshold: bool = True
    default_threshold: bool = False


def _at_k(key: str, name: str, seed: str, ir: str | None, **kw: object) -> Metric:
    return Metric(key, "higher", "retrieval", at_k=name, seed_name=seed, ir_measure=ir, **kw)  # type: ignore[arg-type]


def _expectation(name: str) -> Metric:
    lower = name in LOWER_IS_BETTER_EXPECTATIONS
    return Metric(name, "lower" if lower else "higher", "expectations", sliced=True, per_case="as_is", threshold=lower)


# The headline @K means first (recall, MRR, precision, nDCG, then the other recalls: the order
# lists of names are shown in), then everything else in compare_runs' report order (compare
# orders its @K rows by metrics.retrieval.AT_K_METRICS).
METRICS: tuple[Metric, ...] = (
    _at_k("recall_at_k_avg", "recall_any", "recall_at_k", "Success", sliced=True, gated="recall", default_threshold=True),
    _at_k("mrr_avg", "mrr", "mrr", "RR", sliced=True, gated="mrr", default_threshold=True),
    _at_k("precision_at_k_avg", "precision", "precision_at_k", "P"),
    _at_k("ndcg_at_k_avg", "ndcg", "ndcg_at_k", "nDCG", sliced=True, default_threshold=True),
    _at_k("recall_all_avg", "recall_all", "recall_all", None, sliced=True),
    _at_k("recall_frac_avg", "recall_frac", "recall_frac", "R", sliced=True),
    Metric("scope_miss_rate", "lower", "retrieval", sliced=True, per_case="as_is", gated="scope_miss"),
    Metric("attribution_hit_rate", "higher", "retrieval", sliced=True, per_case="as_is", gated="attribution",
           default_threshold=True),
    Metric("recency_pass_rate", "higher", "retrieval", sliced=True, per_case="as_is"),
    Metric("groundedness_avg", "higher", "judge", scale=5.0, sliced=True, per_case="as_is", gated="groundedness"),
    Metric("correctness_avg", "higher", "judge", scale=5.0, sliced=True, per_case="as_is", gated="correctness"),
    Metric("answer_quality_avg", "higher", "answer_quality", sliced=True, per_case="as_is", threshold=False),
    Metric("answer_relevance_avg", "higher", "answer_quality", threshold=False),
    Metric("answer_groundedness_avg", "higher", "answer_quality", threshold=False),
    Metric("answer_completeness_avg", "higher", "answer_quality", threshold=False),
    *(_expectation(name) for name in EXPECTATION_METRICS),
    Metric("abstention_accuracy", "higher", "abstention", mean=False, sliced=True, per_case="derived",
           gated="abstention", default_threshold=True),
    Metric("hallucination_rate_unanswerable", "lower", "abstention", mean=False, sliced=True, gated="hallucination"),
    Metric("false_abstention_rate", "lower", "abstention", mean=False, sliced=True, per_case="derived",
           gated="false_abstention"),
    Metric("abstention_precision", "higher", "abstention", mean=False),
    Metric("abstention_f1", "higher", "abstention", mean=False),
    Metric("abstention_decision_accuracy", "higher", "abstention", mean=False, per_case="derived"),
    # abstention_accuracy under another name: no row of its own in compare.
    Metric("abstention_recall", "higher", "abstention", mean=False, compared=False),
    Metric("has_citations_rate", "higher", "response", per_case="derived", threshold=False),
    Metric("response_valid_rate", "higher", "response", per_case="derived", threshold=False),
    Metric("latency_budget_score_avg", "higher", "run", default_threshold=True),
    Metric("within_budget_rate", "higher", "run", sliced=True),
    Metric("error_rate", "lower", "run", mean=False, sliced=True, per_case="derived"),
    Metric("timeout_rate", "lower", "run", mean=False, per_case="derived"),
    Metric("empty_response_rate", "lower", "run", mean=False, per_case="derived"),
)

_BY_KEY = {m.key: m for m in METRICS}


def by_key(key: str) -> Metric | None:
    """The registry entry of a metrics.json key, or None."""
    return _BY_KEY.get(key)
