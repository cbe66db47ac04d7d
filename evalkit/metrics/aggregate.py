"""Aggregate results.jsonl records into the metrics.json body, overall and by group.

Records stream in (a generator is fine); each is reduced once to the values it
contributes, then added to every cell it belongs to: overall, each of its tags, its
category, difficulty, domain and answerable/unanswerable. The overall cell is complete
(every K, latency, cost, ...); a slice holds only the headline metrics at the primary K,
so metrics.json stays small enough to commit (EVAL.md, section "Aggregation"). A mean
over nothing is None, never 0, and every number carries the n it was computed on. Sums
use math.fsum, so the result does not depend on the order records arrive in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalkit.metrics.abstention import AbstentionTally
from evalkit.metrics.keys import metric_key
from evalkit.metrics.retrieval import AT_K_METRICS, validate_ks

__all__ = [
    "GROUPINGS",
    "LATENCY_PHASES",
    "MEAN_METRICS",
    "SLICE_METRICS",
    "aggregate_records",
    "extract_case",
    "flatten_cell",
    "percentile",
    "recorded_suite_ms",
    "summarize_indexing_coverage",
]

# Output name in a cell -> key in the primary-K block of retrieval_metrics.at_k.
_PRIMARY = {
    "recall_at_k_avg": "recall_any",
    "mrr_avg": "mrr",
    "precision_at_k_avg": "precision",
    "ndcg_at_k_avg": "ndcg",
    "recall_all_avg": "recall_all",
    "recall_frac_avg": "recall_frac",
}
# The seed's per-record names, used when a record has no `at_k` block.
_SEED_NAMES = {
    "recall_any": "recall_at_k",
    "mrr": "mrr",
    "precision": "precision_at_k",
    "ndcg": "ndcg_at_k",
    "recall_all": "recall_all",
    "recall_frac": "recall_frac",
}
MEAN_METRICS = (
    *_PRIMARY,
    "scope_miss_rate",
    "attribution_hit_rate",
    "recency_pass_rate",
    "groundedness_avg",
    "correctness_avg",
)
# What a slice (by_tag, by_category, ...) holds: the headline metrics at the primary K,
# each with its n; every K, latency and cost stay in the overall cell. Not precision:
# bounded by |gold| / K, across slices it compares their labels more than the retriever.
SLICE_METRICS = (
    "recall_at_k_avg",
    "mrr_avg",
    "ndcg_at_k_avg",
    "recall_all_avg",
    "recall_frac_avg",
    "scope_miss_rate",
    "attribution_hit_rate",
    "recency_pass_rate",
    "groundedness_avg",
    "correctness_avg",
    "abstention_accuracy",
    "hallucination_rate_unanswerable",
    "false_abstention_rate",
    "error_rate",
)
LATENCY_PHASES = ("folder_selection", "retrieval", "generation", "judge")
_JUDGES = ("groundedness", "correctness")
GROUPINGS = ("by_tag", "by_category", "by_difficulty", "by_domain", "by_answerable")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation between closest ranks.

    Same as numpy.percentile(values, q) with its default method="linear" (Hyndman & Fan
    type 7): sort x_0..x_{n-1}; h = (n - 1) * q / 100; result = x_⌊h⌋ + (h - ⌊h⌋) *
    (x_⌊h⌋+1 - x_⌊h⌋). None for no values.
    """
    if not values:
        return None
    xs = sorted(values)
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def _num(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
        return float(v)
    return None


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def summarize_indexing_coverage(cov: Mapping | None) -> dict | None:
    """The seed's aggregate `indexing_coverage` shape from a target's index stats.

    - no_chunks_generated_rate = docs_with_0_chunks / docs_processed
    - chunks_skipped_due_to_context_rate = (Σ chunks_skipped_reasons[r] over reasons r whose
      name contains "context") / chunks_attempted; 0 when nothing was skipped; None when
      chunks were skipped but no reasons were given (the cause is unknown)
    - chunks_skipped_rate = chunks_skipped / chunks_attempted
    Each rate is None when its denominator is 0. The raw counts, skip reasons,
    chunk_token_stats, chunker_version and index_version are copied through.

    Returns:
        The summary dict, or None when `cov` is None.
    """
    if cov is None:
        return None
    if hasattr(cov, "model_dump"):
        cov = cov.model_dump(mode="json")
    docs = int(cov.get("docs_processed") or 0)
    zero = int(cov.get("docs_with_0_chunks") or 0)
    attempted = int(cov.get("chunks_attempted") or 0)
    skipped = int(cov.get("chunks_skipped") or 0)
    reasons = dict(cov.get("chunks_skipped_reasons") or {})
    context = sum(int(v or 0) for r, v in reasons.items() if "context" in str(r).lower())
    if skipped and not reasons:
        context_rate = None
    else:
        context_rate = context / attempted if attempted else None
    return {
        "no_chunks_generated_rate": zero / docs if docs else None,
        "chunks_skipped_due_to_context_rate": context_rate,
        "chunks_skipped_rate": skipped / attempted if attempted else None,
        "docs_processed": docs,
        "docs_with_0_chunks": zero,
        "chunks_attempted": attempted,
        "chunks_embedded": int(cov.get("chunks_embedded") or 0),
        "chunks_skipped": skipped,
        "chunks_skipped_reasons": {k: reasons[k] for k in sorted(reasons)},
        "chunk_token_stats": cov.get("chunk_token_stats"),
        "chunker_version": cov.get("chunker_version"),
        "index_version": cov.get("index_version"),
    }


def extract_case(record: Mapping, ks: list[int]) -> dict:
    """Reduce one record to the values it contributes to a cell (compare_runs pairs
    cases on exactly these values, so a paired mean is the aggregate's mean)."""
    case = record.get("case") or {}
    answerable = case.get("answerable", True) is not False
    rm = record.get("retrieval_metrics") or {}
    at_k_in = rm.get("at_k") or {}
    at_k: dict[str, dict[str, float | None]] = {}
    for k in ks:
        block = at_k_in.get(str(k))
        if block is None and not at_k_in and rm.get("k", ks[0]) == k:
            # A record in the seed's plain shape (no at_k): its values are at its own K.
            block = {m: rm.get(src) for m, src in _SEED_NAMES.items()}
        block = block or {}
        # Unanswerable cases never count in retrieval means, whatever a record says.
        at_k[str(k)] = {m: (_num(block.get(m)) if answerable else None) for m in AT_K_METRICS}
    prim = at_k[str(ks[0])]
    values: dict[str, float | None] = {name: prim[src] for name, src in _PRIMARY.items()}
    recency = rm.get("recency")
    values["scope_miss_rate"] = _num(rm.get("scope_miss")) if answerable else None
    values["attribution_hit_rate"] = _num(rm.get("attribution_hit")) if answerable else None
    values["recency_pass_rate"] = _num(recency.get("pass")) if answerable and isinstance(recency, Mapping) else None

    abst = record.get("abstention") or {}
    abstained = abst.get("abstained") if isinstance(abst, Mapping) else None
    judge_errors = [e for e in (record.get("judge_errors") or []) if e is not None]
    failed = {str(e.get("judge")) for e in judge_errors if isinstance(e, Mapping)}
    for judge in _JUDGES:
        verdict = record.get(judge)
        score = _num(verdict.get("score")) if isinstance(verdict, Mapping) else None
        # A judge failure is the instrument's: excluded from the mean, counted apart.
        values[f"{judge}_avg"] = None if judge in failed else score
    # Judge means are over answered cases; an abstention on an answerable case still
    # counts in correctness (the judge scores it as a failure), see EVAL.md.
    if abstained is True:
        values["groundedness_avg"] = None
        if not answerable:
            values["correctness_avg"] = None

    error = record.get("error")
    kind = None
    if isinstance(error, Mapping):
        kind = str(error.get("kind") or "unknown")
    elif error:
        kind = "unknown"
    answer = record.get("answer")
    empty = kind == "empty_answer" or (kind is None and isinstance(answer, str) and not answer.strip())
    latency = record.get("latency") or {}
    cost = record.get("cost") or {}
    return {
        "answerable": answerable,
        "unlabeled": answerable and not case.get("gold_supports"),
        "values": values,
        "at_k": at_k,
        "error_kind": kind,
        "empty": empty,
        # A case the target failed has no answer to abstain from: excluded, counted in n_errors.
        "abstention": None if kind is not None else (answerable, None if abstained is None else bool(abstained)),
        "judge_errors": [str(e.get("judge")) if isinstance(e, Mapping) else "unknown" for e in judge_errors],
        "latency": {
            "total": _num(latency.get("total_ms")),
            **{p: _num(latency.get(f"{p}_ms")) for p in LATENCY_PHASES},
        },
        "cost_usd": _num(cost.get("judge_cost_usd")) or 0.0,
        "cost_tokens": int(_num(cost.get("judge_tokens")) or 0),
    }


def _latency_block(values: list[float]) -> dict:
    # A sum over cases, named so: cases overlap under concurrency, so it is not a wall time.
    return {
        "p50_ms": percentile(values, 50),
        "p95_ms": percentile(values, 95),
        "mean_ms": _mean(values),
        "sum_case_ms": math.fsum(values) if values else None,
        "n": len(values),
    }


class _Cell:
    """Streaming accumulator for one group of records."""

    def __init__(self, ks: list[int]) -> None:
        self.ks = ks
        self.n_cases = 0
        self.values: dict[str, list[float]] = {m: [] for m in MEAN_METRICS}
        self.at_k = {str(k): {m: [] for m in AT_K_METRICS} for k in ks}
        self.abstention = AbstentionTally()
        self.latency: dict[str, list[float]] = {"total": [], **{p: [] for p in LATENCY_PHASES}}
        self.cost_usd: list[float] = []
        self.cost_tokens = 0
        self.error_kinds: dict[str, int] = {}
        self.n_empty = 0
        self.judge_errors: dict[str, int] = {}
        self.n_unlabeled = 0

    def add(self, x: dict) -> None:
        self.n_cases += 1
        for name, v in x["values"].items():
            if v is not None:
                self.values[name].append(v)
        for k, block in x["at_k"].items():
            for m, v in block.items():
                if v is not None:
                    self.at_k[k][m].append(v)
        if x["abstention"] is not None:
            self.abstention.add(*x["abstention"])
        for phase, v in x["latency"].items():
            if v is not None:
                self.latency[phase].append(v)
        self.cost_usd.append(x["cost_usd"])
        self.cost_tokens += x["cost_tokens"]
        if x["error_kind"] is not None:
            self.error_kinds[x["error_kind"]] = self.error_kinds.get(x["error_kind"], 0) + 1
        self.n_empty += bool(x["empty"])
        for judge in x["judge_errors"]:
            self.judge_errors[judge] = self.judge_errors.get(judge, 0) + 1
        self.n_unlabeled += bool(x["unlabeled"])

    def result(self) -> dict:
        out: dict[str, Any] = {"n_cases": self.n_cases}
        for name in MEAN_METRICS:
            out[name] = _mean(self.values[name])
        ab = self.abstention.result()
        ab_n = ab.pop("n")
        out.update(ab)
        n_errors = sum(self.error_kinds.values())
        n_timeouts = self.error_kinds.get("timeout", 0)
        out["n_judge_errors"] = sum(self.judge_errors.values())
        out["judge_errors_by_judge"] = {j: self.judge_errors[j] for j in sorted(self.judge_errors)}
        out["n_unlabeled"] = self.n_unlabeled
        out["latency"] = {
            **_latency_block(self.latency["total"]),
            "phases": {p: _latency_block(self.latency[p]) for p in LATENCY_PHASES},
        }
        out["cost"] = {
            "judge_total_usd": math.fsum(self.cost_usd),
            "judge_total_tokens": self.cost_tokens,
        }
        rate = (lambda c: c / self.n_cases) if self.n_cases else (lambda c: None)
        out["operational_metrics"] = {
            "error_rate": rate(n_errors),
            "timeout_rate": rate(n_timeouts),
            "empty_response_rate": rate(self.n_empty),
            "n_errors": n_errors,
            "n_timeouts": n_timeouts,
            "n_empty_responses": self.n_empty,
            "error_kinds": {k: self.error_kinds[k] for k in sorted(self.error_kinds)},
            "n": self.n_cases,
        }
        at_k: dict[str, dict] = {}
        for k in self.ks:
            lists = self.at_k[str(k)]
            at_k[str(k)] = {
                **{m: _mean(lists[m]) for m in AT_K_METRICS},
                "n": len(lists["recall_any"]),
                "n_by_metric": {m: len(lists[m]) for m in AT_K_METRICS},
            }
        out["at_k"] = at_k
        out["n"] = {
            **{name: len(self.values[name]) for name in MEAN_METRICS},
            **ab_n,
            "latency": len(self.latency["total"]),
        }
        return out

    def slice_result(self) -> dict:
        """The slice layout: n_cases, then each SLICE_METRICS value with n >= 1, and its n.

        A metric none of the slice's cases counts toward is left out (value and n), rather
        than written as null: most slices are small, and a column of nulls per slice was
        most of metrics.json.
        """
        full = self.result()
        values = {**full, "error_rate": full["operational_metrics"]["error_rate"]}
        ns = {**full["n"], "error_rate": self.n_cases}
        kept = [name for name in SLICE_METRICS if ns[name]]
        return {
            "n_cases": self.n_cases,
            **{name: values[name] for name in kept},
            "n": {name: ns[name] for name in kept},
        }


def aggregate_records(
    records: Iterable[Mapping],
    *,
    ks: Sequence[int],
    suite_ms: float | None = None,
    full_slices: bool = False,
) -> dict:
    """Aggregate results.jsonl records into the metrics.json body.

    Reads, per record: `case` (answerable, tags, category, difficulty, domain,
    gold_supports), `retrieval_metrics` (`at_k[str(K)]` blocks; `scope_miss`,
    `attribution_hit`, `recency.pass`; the seed's plain names when `at_k` is absent),
    `groundedness.score`, `correctness.score`, `judge_errors[].judge`,
    `abstention.abstained`, `error.kind`, `answer`, `latency.*_ms`,
    `cost.judge_cost_usd`, `cost.judge_tokens` and `indexing_coverage` (the first
    record that has one).

    Args:
        records: result records (dicts); may be a generator, read once.
        ks: the cut-offs; ks[0] is the primary K behind the seed's names.
        suite_ms: the suite's wall time in ms (the caller's clock: the sum over sessions
            of a resumed run), written as `aggregate_metrics.latency.total_ms`; None
            (unknown) writes null, never a sum over cases.
        full_slices: give every slice the overall cell's full layout (every K, latency,
            cost, ...) instead of its headline metrics, for a detailed report.

    Returns:
        {"aggregate_metrics": overall cell + "k", "indexing_coverage",
        operational_metrics.coverage_by_doc_type and latency.total_ms, "by_tag",
        "by_category", "by_difficulty", "by_domain", "by_answerable": {group: slice cell}
        (sorted keys), "total_tests", "answerable_tests", "unanswerable_tests"}.

    Raises:
        InputError: no K, or a K < 1.
    """
    ks = validate_ks(ks)
    overall = _Cell(ks)
    groups: dict[str, dict[str, _Cell]] = {g: {} for g in GROUPINGS}
    coverage: Mapping | None = None
    total = answerable_n = 0

    def cell(grouping: str, key: Any) -> _Cell:
        key = str(key)
        if key not in groups[grouping]:
            groups[grouping][key] = _Cell(ks)
        return groups[grouping][key]

    for record in records:
        x = extract_case(record, ks)
        case = record.get("case") or {}
        total += 1
        answerable_n += x["answerable"]
        overall.add(x)
        for tag in sorted({str(t) for t in (case.get("tags") or [])}):
            cell("by_tag", tag).add(x)
        for grouping, field in (("by_category", "category"), ("by_difficulty", "difficulty"), ("by_domain", "domain")):
            if case.get(field) is not None:
                cell(grouping, case[field]).add(x)
        cell("by_answerable", "answerable" if x["answerable"] else "unanswerable").add(x)
        if coverage is None and record.get("indexing_coverage") is not None:
            coverage = record["indexing_coverage"]

    agg = {"k": ks[0], **overall.result()}
    agg["indexing_coverage"] = summarize_indexing_coverage(coverage)
    by_type = None
    if coverage is not None:
        raw = coverage.get("coverage_by_doc_type") or {}
        by_type = {t: dict(raw[t]) for t in sorted(raw)}
    agg["operational_metrics"]["coverage_by_doc_type"] = by_type
    agg["latency"]["total_ms"] = None if suite_ms is None else float(suite_ms)
    out: dict[str, Any] = {"aggregate_metrics": agg}
    for grouping in GROUPINGS:
        cells = groups[grouping]
        out[grouping] = {
            key: cells[key].result() if full_slices else cells[key].slice_result() for key in sorted(cells)
        }
    out["total_tests"] = total
    out["answerable_tests"] = answerable_n
    out["unanswerable_tests"] = total - answerable_n
    return out


def recorded_suite_ms(metrics: Mapping | None) -> float | None:
    """The suite wall time an existing metrics.json recorded, for a script that
    re-aggregates a run without re-running it (judge_answers): pass it on as `suite_ms`.

    None when there is none, or when the file predates `sum_case_ms`: its `total_ms`
    was then a sum over cases, not a wall time.
    """
    latency = ((metrics or {}).get("aggregate_metrics") or {}).get("latency") or {}
    if "sum_case_ms" not in latency:
        return None
    return _num(latency.get("total_ms"))


def flatten_cell(cell: Mapping) -> dict[str, tuple[float | None, int]]:
    """One metrics.json cell as {canonical key: (value, n)}, for comparisons and tables.

    Keys: every mean/rate named in the cell's `n` map ("recall_at_k_avg", "mrr_avg",
    "abstention_accuracy", "error_rate" in a slice, ...); every at_k value as
    `metric_key(name, K)` ("ndcg@10") with its own n; "latency_p50_ms"/"latency_p95_ms"
    (n = cases with a total); "error_rate", "timeout_rate", "empty_response_rate" (n =
    cases). A slice cell gives only what it holds. Keys sorted.
    """
    out: dict[str, tuple[float | None, int]] = {}
    ns = cell.get("n") or {}
    for name, n in ns.items():
        value = cell.get(name)
        if name != "latency" and (value is None or isinstance(value, (int, float))):
            out[name] = (value, int(n))
    for k, block in (cell.get("at_k") or {}).items():
        by_metric = block.get("n_by_metric") or {}
        for name in AT_K_METRICS:
            if name in block:
                out[metric_key(name, int(k))] = (block[name], int(by_metric.get(name, block.get("n", 0))))
    latency = cell.get("latency") or {}
    for q in ("p50_ms", "p95_ms"):
        if q in latency:
            out[f"latency_{q}"] = (latency[q], int(latency.get("n", 0)))
    op = cell.get("operational_metrics") or {}
    for name in ("error_rate", "timeout_rate", "empty_response_rate"):
        if name in op:
            out[name] = (op[name], int(op.get("n", 0)))
    return {key: out[key] for key in sorted(out)}
