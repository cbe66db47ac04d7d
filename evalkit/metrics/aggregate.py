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
import re
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from evalkit.evalset.turns import case_turn
from evalkit.metrics.abstention import AbstentionTally
from evalkit.metrics.expectations import expectation_values
from evalkit.metrics.keys import HEADLINE_AT_K, metric_key
from evalkit.metrics.registry import METRICS, OPERATIONAL_KEYS
from evalkit.metrics.retrieval import AT_K_METRICS, validate_ks
from evalkit.store.runlog import Cell, Met, Rec, Rm

__all__ = [
    "GROUPINGS",
    "HEADLINE_AT_K",
    "LATENCY_PHASES",
    "MEAN_METRICS",
    "SLICE_METRICS",
    "RecordTable",
    "aggregate_records",
    "extract_case",
    "flatten_cell",
    "has_citations",
    "language_key",
    "percentile",
    "recorded_suite_ms",
    "summarize_indexing_coverage",
]

# Output name in a cell -> key in the primary-K block of retrieval_metrics.at_k.
_PRIMARY = HEADLINE_AT_K
# The seed's per-record names, used when a record has no `at_k` block.
_SEED_NAMES = {m.at_k: m.seed_name for m in METRICS if m.at_k is not None and m.seed_name is not None}
# What aggregate_records averages over the cases (the registry's `mean`): the headline @K
# means first, then scope miss, attribution and recency (RecordTable's lean layout needs it).
MEAN_METRICS = tuple(m.key for m in METRICS if m.mean)
# What a slice (by_tag, by_category, ...) holds: the headline metrics at the primary K,
# each with its n; every K, latency and cost stay in the overall cell. Not precision:
# bounded by |gold| / K, across slices it compares their labels more than the retriever.
SLICE_METRICS = tuple(m.key for m in METRICS if m.sliced)
LATENCY_PHASES = ("folder_selection", "retrieval", "generation", "judge")
_KNOWN_LATENCY_KEYS = frozenset({"total_ms", *(f"{p}_ms" for p in LATENCY_PHASES)})
_JUDGES = (Rec.GROUNDEDNESS, Rec.CORRECTNESS, "answer_quality", "context_relevance")
_QUALITY_DIMENSIONS = ("relevance", Rec.GROUNDEDNESS, "completeness")
GROUPINGS = Met.GROUPINGS
_GROUP_FIELDS = (
    (Met.BY_CATEGORY, "category"), (Met.BY_DIFFICULTY, "difficulty"), (Met.BY_DOMAIN, "domain"), (Met.BY_SCENARIO, "scenario")
)
# A citation marker in an answer: [1], [2, 3] (as judges/heuristic.py reads them).
_CITATION_MARKER = re.compile(r"\[\d{1,6}(?:\s*,\s*\d{1,6})*\]")


FIRST_TURN, FOLLOW_UP_TURN = "first", "follow-up"


def turn_keys(case: Mapping) -> list[tuple[str, str]]:
    """The conversation slices of a case, as (grouping, key): a turn's position (`by_turn`:
    "first", or "follow-up" for every later turn) and its kind (`by_follow_up`, when the eval
    set names one); none for a single question."""
    turn = case_turn(case)
    if turn is None:
        return []
    out = [(Met.BY_TURN, FIRST_TURN if turn[1] == 1 else FOLLOW_UP_TURN)]
    kind = case["conversation"].get("follow_up")
    if kind:
        out.append((Met.BY_FOLLOW_UP, str(kind)))
    return out


def language_key(case: Mapping) -> str | None:
    """The `by_language` slice of a case: `language` ("de") when the gold documents are in
    the query's language (no `doc_language`, or the same one), `"<language>-><doc_language>"`
    ("de->en", ASCII) for a cross-language case; None when the case has no `language`.

    A `doc_language` without a `language` puts the case in no slice: the pair is unknown.
    """
    lang = case.get("language")
    if lang is None or str(lang) == "":
        return None
    doc = case.get("doc_language")
    if doc is None or str(doc) == "" or str(doc) == str(lang):
        return str(lang)
    return f"{lang}->{doc}"


def has_citations(record: Mapping) -> bool | None:
    """Whether an answered, answerable case's answer cites a source; None when it does not count.

    Counts: an answerable case (`case.answerable` not false) the target answered without
    error (no `error`, which includes `empty_answer`) and without abstaining
    (`abstention.abstained` is not true; unknown counts as answered). Cites: the response
    gave at least one reference (`references` non-empty, or `references_dropped` > 0), or
    the answer holds a marker such as [1] or [2, 3]. Seed 002's "Has Citations" scorer
    (citations.length > 0) is the references half.
    """
    case = record.get("case") or {}
    if case.get("answerable", True) is False or record.get("error"):
        return None
    abst = record.get("abstention")
    if _is_map(abst) and abst.get("abstained") is True:
        return None
    answer = record.get("answer")
    if not isinstance(answer, str):
        return None
    if record.get("references") or (record.get(Rec.REFERENCES_DROPPED) or 0) > 0:
        return True
    return _CITATION_MARKER.search(answer) is not None


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
    t = type(v)
    if t is float:  # the common case first: records hold floats
        return None if v != v else v
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


def _is_map(v: Any) -> bool:
    """isinstance(v, Mapping), told without the abstract-class check for the dicts and
    Nones a record holds (every derive reduces every record: that check was a fifth of it)."""
    return type(v) is dict or (v is not None and isinstance(v, Mapping))


_JUDGE_KEYS = tuple((judge, f"{judge}_avg") for judge in _JUDGES)
_QUALITY_KEYS = tuple((dim, f"answer_{dim}_avg") for dim in _QUALITY_DIMENSIONS)
_LATENCY_KEYS = tuple((p, f"{p}_ms") for p in LATENCY_PHASES)
_NO_EXPECTATIONS = expectation_values(None)  # a case without `expected`: every value None


def extract_case(record: Mapping, ks: list[int]) -> dict:
    """Reduce one record to the values it contributes to a cell (compare_runs pairs
    cases on exactly these values, so a paired mean is the aggregate's mean)."""
    get = record.get
    case = get("case") or {}
    answerable = case.get("answerable", True) is not False
    rm = get(Rec.RETRIEVAL_METRICS) or {}
    at_k_in = rm.get(Rm.AT_K) or {}
    at_k: dict[str, dict[str, float | None]] = {}
    for k in ks:
        key = str(k)
        block = at_k_in.get(key)
        if block is None and not at_k_in and rm.get("k", ks[0]) == k:
            # A record in the seed's plain shape (no at_k): its values are at its own K.
            block = {m: rm.get(src) for m, src in _SEED_NAMES.items()}
        block = block or {}
        # Unanswerable cases never count in retrieval means, whatever a record says.
        at_k[key] = {m: _num(block.get(m)) for m in AT_K_METRICS} if answerable else dict.fromkeys(AT_K_METRICS)
    prim = at_k[str(ks[0])]
    values: dict[str, float | None] = {name: prim[src] for name, src in _PRIMARY.items()}
    recency = rm.get("recency")
    values["scope_miss_rate"] = _num(rm.get("scope_miss")) if answerable else None
    values["attribution_hit_rate"] = _num(rm.get("attribution_hit")) if answerable else None
    values["recency_pass_rate"] = _num(recency.get("pass")) if answerable and _is_map(recency) else None

    abst = get("abstention") or {}
    abstained = abst.get("abstained") if _is_map(abst) else None
    judge_errors = [e for e in (get(Rec.JUDGE_ERRORS) or []) if e is not None]
    failed = {str(e.get("judge")) for e in judge_errors if _is_map(e)}
    for judge, name in _JUDGE_KEYS:
        verdict = get(judge)
        # A judge failure is the instrument's: excluded from the mean, counted apart.
        values[name] = None if judge in failed or not _is_map(verdict) else _num(verdict.get("score"))
    quality = get("answer_quality")
    ok = _is_map(quality) and "answer_quality" not in failed
    for dim, name in _QUALITY_KEYS:
        values[name] = _num(quality.get(dim)) if ok else None
    # Judge means are over answered cases; an abstention on an answerable case still
    # counts in correctness (the judge scores it as a failure), see EVAL.md.
    if abstained is True:
        values["groundedness_avg"] = None
        if not answerable:
            values["correctness_avg"] = None
    budget = get("latency_budget")
    # None (no budget, or the target failed the case): excluded from the means, never 0.
    budget = budget if _is_map(budget) else {}
    values["latency_budget_score_avg"] = _num(budget.get("score"))
    values["within_budget_rate"] = _num(budget.get("within"))
    validity = get("response_validity")
    # None (no schema, or the target failed): excluded from the rate, never 0.
    values["response_valid_rate"] = _num(validity.get("valid")) if _is_map(validity) else None
    cites = has_citations(record)
    values["has_citations_rate"] = None if cites is None else float(cites)
    # Scored at run time on the full text; None (not applicable) when the case has no `expected`.
    expectations = get("expectations")
    values.update(_NO_EXPECTATIONS if expectations is None else expectation_values(expectations))

    error = get("error")
    kind = None
    if _is_map(error):
        kind = str(error.get("kind") or "unknown")
    elif error:
        kind = "unknown"
    answer = get("answer")
    empty = kind == "empty_answer" or (kind is None and isinstance(answer, str) and not answer.strip())
    latency = get("latency") or {}
    cost = get("cost") or {}
    # The target's other phases (`<phase>_ms` beyond the known ones, e.g. rerank_ms).
    extra = {k[:-3]: v for k, v in latency.items() if k not in _KNOWN_LATENCY_KEYS and k.endswith("_ms")}
    if extra:
        extra = {p: v for p, v in ((p, _num(v)) for p, v in extra.items()) if v is not None}
    budgets = get("phase_budgets")
    lat = {"total": _num(latency.get("total_ms"))}
    for p, name in _LATENCY_KEYS:
        lat[p] = _num(latency.get(name))
    return {
        "answerable": answerable,
        "unlabeled": answerable and not case.get("gold_supports"),
        "values": values,
        Cell.AT_K: at_k,
        "error_kind": kind,
        "empty": empty,
        # A case the target failed has no answer to abstain from: excluded, counted in n_errors.
        "abstention": None if kind is not None else (answerable, None if abstained is None else bool(abstained)),
        Rec.JUDGE_ERRORS: [str(e.get("judge")) if _is_map(e) else "unknown" for e in judge_errors],
        "latency": lat,
        "latency_extra": extra,
        # phase -> (budget_ms, score, within) where the phase was measured
        "phase_budgets": {
            p: (float(b["budget_ms"]), float(b["score"]), float(bool(b["within"])))
            for p, b in budgets.items()
            if _is_map(b) and _num(b.get("score")) is not None and _num(b.get("budget_ms")) is not None
        } if budgets is not None and _is_map(budgets) else {},
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


_NAN = float("nan")
# dict.get(v, v): None -> NaN, any other cell value as it is (one C call over a row).
_NAN_FOR_NONE = {None: _NAN}.get


def _getter(names: Sequence[str]) -> Callable[[Mapping], tuple]:
    """The values of `names` in a mapping, as a tuple (one name too)."""
    get = itemgetter(*names)
    return get if len(names) > 1 else lambda d: (get(d),)


def _cell(v: Any) -> float:
    """A value as a RecordTable cell: `_num`, with None as NaN."""
    v = _num(v)
    return _NAN if v is None else v
# Abstention outcome codes in a RecordTable: no outcome (a target error), unknown, then
# (answerable, abstained) as 2 + 2 * unanswerable + abstained.
_AB_NONE, _AB_UNKNOWN = 0, 1


class RecordTable:
    """Every record's contributions as rows of one float table, cells computed at the end.

    A record is reduced once (`extract_case`) and stored once, whatever the number of
    cells it belongs to; a cell is then a set of rows. Missing values are NaN (`_num` never
    gives NaN, so NaN means None). Means are math.fsum over the cell's values, so a cell's
    numbers are those of adding its records one by one, in any order.
    """

    def __init__(self, ks: Sequence[int]) -> None:
        self.ks = ks = validate_ks(ks)
        self.columns = [
            *MEAN_METRICS,
            *(f"{k}:{m}" for k in ks for m in AT_K_METRICS),
            *(f"latency:{p}" for p in ("total", *LATENCY_PHASES)),
            "cost_usd",
        ]
        self.col = {name: j for j, name in enumerate(self.columns)}
        self.data = array("d")
        self.n = 0
        self.unlabeled = array("b")
        self.empty = array("b")
        self.abstention = array("b")
        self.tokens = array("q")
        self.error_kinds: list[tuple[int, str]] = []
        self.judge_errors: list[tuple[int, str]] = []
        # The target's other phases and the phase budgets, beside the table (few records have
        # them, and their names are the target's): phase -> (rows, values) / (rows, score, within),
        # with each phase's budget_ms.
        self.extra_latency: dict[str, tuple[array, array]] = {}
        self.phase_budget: dict[str, tuple[array, array, array]] = {}
        self.phase_budget_ms: dict[str, float] = {}
        # What `add` reads of a reduction, in the columns' order, each taken in one C call.
        self._means = _getter(MEAN_METRICS)
        self._at_k = [str(k) for k in ks]
        self._metrics = _getter(AT_K_METRICS)
        self._latency = _getter(("total", *LATENCY_PHASES))
        # Row numbers as 8-byte machine ints, not Python ints (36 bytes each in a list).
        self.groups: dict[str, dict[str, array]] = {g: {} for g in GROUPINGS}
        self.coverage: Mapping | None = None
        self.answerable_n = 0

    def add(self, x: dict) -> int:
        """Store one `extract_case` reduction; returns its row."""
        row = self.n
        at_k, metrics = x[Cell.AT_K], self._metrics
        cells = list(self._means(x["values"]))
        for k in self._at_k:
            cells += metrics(at_k[k])
        cells += self._latency(x["latency"])
        cells.append(x["cost_usd"])
        self.data.fromlist(list(map(_NAN_FOR_NONE, cells, cells)))
        self.unlabeled.append(bool(x["unlabeled"]))
        self.empty.append(bool(x["empty"]))
        ab = x["abstention"]
        self.abstention.append(
            _AB_NONE if ab is None else _AB_UNKNOWN if ab[1] is None else 2 + 2 * (not ab[0]) + bool(ab[1])
        )
        self.tokens.append(x["cost_tokens"])
        if x["error_kind"] is not None:
            self.error_kinds.append((row, x["error_kind"]))
        for judge in x[Rec.JUDGE_ERRORS]:
            self.judge_errors.append((row, judge))
        for phase, v in (x.get("latency_extra") or {}).items():
            rows, vals = self._extra(phase)
            rows.append(row)
            vals.append(v)
        for phase, (budget, score, within) in (x.get("phase_budgets") or {}).items():
            rows, scores, withins = self._budget(phase, budget)
            rows.append(row)
            scores.append(score)
            withins.append(within)
        self.n += 1
        return row

    def _extra(self, phase: str) -> tuple[array, array]:
        got = self.extra_latency.get(phase)
        if got is None:
            got = self.extra_latency[phase] = (array("q"), array("d"))
        return got

    def _budget(self, phase: str, budget_ms: float) -> tuple[array, array, array]:
        got = self.phase_budget.get(phase)
        if got is None:
            got = self.phase_budget[phase] = (array("q"), array("d"), array("d"))
            self.phase_budget_ms[phase] = budget_ms
        return got

    def add_record(self, record: Mapping) -> dict:
        """Reduce one record (`extract_case`) and file its row under every group it is in;
        returns the reduction, for a caller that reads the same values (compare's CaseTable)."""
        x = extract_case(record, self.ks)
        self.add_extracted(x, record.get("case") or {})
        if self.coverage is None and record.get(Rec.INDEXING_COVERAGE) is not None:
            self.coverage = record[Rec.INDEXING_COVERAGE]
        return x

    def add_extracted(self, x: dict, case: Mapping) -> None:
        """`add_record` of a record already reduced to `x` (its case is `case`), coverage aside."""
        self._file(self.add(x), case, x["answerable"])

    def _file(self, row: int, case: Mapping, answerable: bool) -> None:
        """File `row` under every group its case is in."""
        groups = self.groups
        self.answerable_n += answerable
        tags = case.get("tags")
        if tags:
            by_tag = groups[Met.BY_TAG]
            for tag in {str(t) for t in tags}:
                _rows(by_tag, tag).append(row)
        for grouping, field in _GROUP_FIELDS:
            key = case.get(field)
            if key is not None:
                _rows(groups[grouping], str(key)).append(row)
        _rows(groups[Met.BY_ANSWERABLE], "answerable" if answerable else "unanswerable").append(row)
        lang = language_key(case)
        if lang is not None:
            _rows(groups[Met.BY_LANGUAGE], lang).append(row)
        for grouping, key in turn_keys(case):
            _rows(groups[grouping], key).append(row)

    def merge(self, other: RecordTable) -> None:
        """Append `other`'s rows after this table's (a later part of the same records)."""
        if other.ks != self.ks:
            raise ValueError(f"cannot merge tables at K={other.ks} into K={self.ks}")
        base = self.n
        self.data.extend(other.data)
        self.unlabeled.extend(other.unlabeled)
        self.empty.extend(other.empty)
        self.abstention.extend(other.abstention)
        self.tokens.extend(other.tokens)
        self.error_kinds += [(base + row, kind) for row, kind in other.error_kinds]
        self.judge_errors += [(base + row, judge) for row, judge in other.judge_errors]
        for phase, (rows, vals) in other.extra_latency.items():
            mine_rows, mine_vals = self._extra(phase)
            mine_rows.extend(base + row for row in rows)
            mine_vals.extend(vals)
        for phase, (rows, scores, withins) in other.phase_budget.items():
            mine_rows, mine_scores, mine_withins = self._budget(phase, other.phase_budget_ms[phase])
            mine_rows.extend(base + row for row in rows)
            mine_scores.extend(scores)
            mine_withins.extend(withins)
        for grouping, cells in other.groups.items():
            mine = self.groups[grouping]
            for key, rows in cells.items():
                _rows(mine, key).extend(base + row for row in rows)
        if self.coverage is None:
            self.coverage = other.coverage
        self.answerable_n += other.answerable_n
        self.n += other.n

    def result(self, *, suite_ms: float | None = None, full_slices: bool = False) -> dict:
        """The metrics.json body (see `aggregate_records`)."""
        view = _View(self)
        agg = {"k": self.ks[0], **view.cell(None)}
        coverage = self.coverage
        agg[Rec.INDEXING_COVERAGE] = summarize_indexing_coverage(coverage)
        by_type = None
        if coverage is not None:
            raw = coverage.get("coverage_by_doc_type") or {}
            by_type = {t: dict(raw[t]) for t in sorted(raw)}
        agg[Cell.OPERATIONAL]["coverage_by_doc_type"] = by_type
        agg["latency"]["total_ms"] = None if suite_ms is None else float(suite_ms)
        out: dict[str, Any] = {Met.AGGREGATE: agg}
        for grouping in GROUPINGS:
            cells = self.groups[grouping]
            out[grouping] = {
                key: (view.cell if full_slices else view.slice_cell)(np.asarray(cells[key], dtype=np.intp))
                for key in sorted(cells)
            }
        out[Met.TOTAL_TESTS] = self.n
        out[Met.ANSWERABLE_TESTS] = self.answerable_n
        out[Met.UNANSWERABLE_TESTS] = self.n - self.answerable_n
        return out


def _rows(cells: dict[str, array], key: str) -> array:
    """The rows of group `key`, a new empty array the first time."""
    got = cells.get(key)
    if got is None:
        got = cells[key] = array("q")
    return got


class _View:
    """A finished RecordTable as numpy arrays, and the cell of any set of its rows."""

    def __init__(self, t: RecordTable) -> None:
        self.t = t
        self.data = np.frombuffer(t.data, dtype=np.float64).reshape(t.n, len(t.columns)) if t.n else np.zeros((0, len(t.columns)))
        self.unlabeled = np.frombuffer(t.unlabeled, dtype=np.int8).astype(bool) if t.n else np.zeros(0, bool)
        self.empty = np.frombuffer(t.empty, dtype=np.int8).astype(bool) if t.n else np.zeros(0, bool)
        self.abstention = np.frombuffer(t.abstention, dtype=np.int8) if t.n else np.zeros(0, np.int8)
        self.tokens = np.frombuffer(t.tokens, dtype=np.int64) if t.n else np.zeros(0, np.int64)

    def _values(self, rows: np.ndarray | None, name: str) -> list[float]:
        """The values (not None) of one column over `rows`. One column at a time: the rows of
        a large cell taken whole, or every column's values at once, were tens of MB at
        100,000 records."""
        col = self.data[:, self.t.col[name]]
        if rows is not None:
            col = col[rows]
        return col[~np.isnan(col)].tolist()

    def _mean_n(self, rows: np.ndarray | None, name: str) -> tuple[float | None, int]:
        values = self._values(rows, name)
        return _mean(values), len(values)

    @staticmethod
    def _counts(pairs: list[tuple[int, str]], member: np.ndarray | None) -> dict[str, int]:
        out: dict[str, int] = {}
        for row, key in pairs:
            if member is None or member[row]:
                out[key] = out.get(key, 0) + 1
        return out

    def _abstention(self, rows: np.ndarray | None) -> dict:
        codes = self.abstention if rows is None else self.abstention[rows]
        c = np.bincount(codes, minlength=6).tolist()
        tally = AbstentionTally()
        tally.n_unknown = c[_AB_UNKNOWN]
        tally.counts = {
            "answerable": {"answered": c[2], "abstained": c[3]},
            "unanswerable": {"answered": c[4], "abstained": c[5]},
        }
        return tally.result()

    def _member(self, rows: np.ndarray | None) -> np.ndarray | None:
        if rows is None:
            return None
        member = np.zeros(self.t.n, dtype=bool)
        member[rows] = True
        return member

    @staticmethod
    def _picked(rows: array, member: np.ndarray | None, *columns: array) -> list[list[float]]:
        """The values of `columns` at the side-store `rows` that are in the cell."""
        if member is None:
            return [list(c) for c in columns]
        keep = member[np.frombuffer(rows, dtype=np.int64)] if len(rows) else np.zeros(0, bool)
        return [np.frombuffer(c, dtype=np.float64)[keep].tolist() if len(c) else [] for c in columns]

    def _phases(self, rows: np.ndarray | None, member: np.ndarray | None) -> dict:
        """`latency.phases`: the known phases, then the target's others (sorted by name);
        a budgeted phase's block also holds `budget` {budget_ms, score_avg, within_rate, n}."""
        t = self.t
        phases = {p: _latency_block(self._values(rows, f"latency:{p}")) for p in LATENCY_PHASES}
        for phase in sorted(t.extra_latency):
            (values,) = self._picked(t.extra_latency[phase][0], member, t.extra_latency[phase][1])
            phases[phase] = _latency_block(values)
        for phase in sorted(t.phase_budget):
            prow, scores, withins = t.phase_budget[phase]
            score_l, within_l = self._picked(prow, member, scores, withins)
            block = phases.setdefault(phase, _latency_block([]))
            block["budget"] = {
                "budget_ms": t.phase_budget_ms[phase],
                "score_avg": _mean(score_l),
                "within_rate": _mean(within_l),
                "n": len(score_l),
            }
        return phases

    def cell(self, rows: np.ndarray | None) -> dict:
        """The full cell layout over `rows` (None: every row)."""
        t = self.t
        n_cases = t.n if rows is None else len(rows)
        member = self._member(rows)
        out: dict[str, Any] = {"n_cases": n_cases}
        means = {name: self._mean_n(rows, name) for name in MEAN_METRICS}
        for name in MEAN_METRICS:
            out[name] = means[name][0]
        ab = self._abstention(rows)
        ab_n = ab.pop("n")
        out.update(ab)
        error_kinds = self._counts(t.error_kinds, member)
        judge_errors = self._counts(t.judge_errors, member)
        n_errors = sum(error_kinds.values())
        n_timeouts = error_kinds.get("timeout", 0)
        n_empty = int(np.count_nonzero(self.empty if rows is None else self.empty[rows]))
        out["n_judge_errors"] = sum(judge_errors.values())
        out["judge_errors_by_judge"] = {j: judge_errors[j] for j in sorted(judge_errors)}
        out["n_unlabeled"] = int(np.count_nonzero(self.unlabeled if rows is None else self.unlabeled[rows]))
        total = _latency_block(self._values(rows, "latency:total"))
        out["latency"] = {**total, "phases": self._phases(rows, member)}
        cost = self.data[:, t.col["cost_usd"]]
        out["cost"] = {
            "judge_total_usd": math.fsum((cost if rows is None else cost[rows]).tolist()),
            "judge_total_tokens": int((self.tokens if rows is None else self.tokens[rows]).sum()),
        }
        rate = (lambda c: c / n_cases) if n_cases else (lambda c: None)
        out[Cell.OPERATIONAL] = {
            "error_rate": rate(n_errors),
            "timeout_rate": rate(n_timeouts),
            "empty_response_rate": rate(n_empty),
            "n_errors": n_errors,
            "n_timeouts": n_timeouts,
            "n_empty_responses": n_empty,
            "error_kinds": {k: error_kinds[k] for k in sorted(error_kinds)},
            "n": n_cases,
        }
        at_k: dict[str, dict] = {}
        for k in t.ks:
            got = {m: self._mean_n(rows, f"{k}:{m}") for m in AT_K_METRICS}
            at_k[str(k)] = {
                **{m: got[m][0] for m in AT_K_METRICS},
                "n": got["recall_any"][1],
                "n_by_metric": {m: got[m][1] for m in AT_K_METRICS},
            }
        out[Cell.AT_K] = at_k
        out["n"] = {
            **{name: means[name][1] for name in MEAN_METRICS},
            **ab_n,
            "latency": total["n"],
        }
        return out

    def slice_cell(self, rows: np.ndarray) -> dict:
        """The slice layout: n_cases, then each SLICE_METRICS value with n >= 1, and its n.

        A metric none of the slice's cases counts toward is left out (value and n), rather
        than written as null: most slices are small, and a column of nulls per slice was
        most of metrics.json.
        """
        n_cases = len(rows)
        values: dict[str, Any] = {}
        ns: dict[str, int] = {}
        for name in SLICE_METRICS:
            if name in self.t.col:
                values[name], ns[name] = self._mean_n(rows, name)
        ab = self._abstention(rows)
        ab_n = ab.pop("n")
        for name in SLICE_METRICS:
            if name in ab_n:
                values[name], ns[name] = ab[name], ab_n[name]
        n_errors = sum(self._counts(self.t.error_kinds, self._member(rows)).values())
        values["error_rate"] = n_errors / n_cases if n_cases else None
        ns["error_rate"] = n_cases
        kept = [name for name in SLICE_METRICS if ns[name]]
        return {
            "n_cases": n_cases,
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
    language, doc_language, gold_supports), `response_validity.valid`, `references`, `retrieval_metrics` (`at_k[str(K)]` blocks; `scope_miss`,
    `attribution_hit`, `recency.pass`; the seed's plain names when `at_k` is absent),
    `groundedness.score`, `correctness.score`, `judge_errors[].judge`,
    `abstention.abstained`, `error.kind`, `answer`, `latency.*_ms`,
    `latency_budget.score` / `.within` (latency_budget_score_avg, within_budget_rate),
    `cost.judge_cost_usd`, `cost.judge_tokens` and `indexing_coverage` (the first
    record that has one).

    Each record is reduced once and stored as one row (a few hundred bytes), so memory
    grows with the number of records but not with the number of groups they are in.

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
        "by_category", "by_difficulty", "by_domain", "by_answerable", "by_language": {group: slice cell}
        (sorted keys), "total_tests", "answerable_tests", "unanswerable_tests"}.

    Raises:
        InputError: no K, or a K < 1.
    """
    table = RecordTable(ks)
    for record in records:
        table.add_record(record)
    return table.result(suite_ms=suite_ms, full_slices=full_slices)


def recorded_suite_ms(metrics: Mapping | None) -> float | None:
    """The suite wall time an existing metrics.json recorded, for a script that
    re-aggregates a run without re-running it (judge_answers): pass it on as `suite_ms`.

    None when there is none, or when the file predates `sum_case_ms`: its `total_ms`
    was then a sum over cases, not a wall time.
    """
    latency = ((metrics or {}).get(Met.AGGREGATE) or {}).get("latency") or {}
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
    for k, block in (cell.get(Cell.AT_K) or {}).items():
        by_metric = block.get("n_by_metric") or {}
        for name in AT_K_METRICS:
            if name in block:
                out[metric_key(name, int(k))] = (block[name], int(by_metric.get(name, block.get("n", 0))))
    latency = cell.get("latency") or {}
    for q in ("p50_ms", "p95_ms"):
        if q in latency:
            out[f"latency_{q}"] = (latency[q], int(latency.get("n", 0)))
    op = cell.get(Cell.OPERATIONAL) or {}
    for name in OPERATIONAL_KEYS:
        if name in op:
            out[name] = (op[name], int(op.get("n", 0)))
    return {key: out[key] for key in sorted(out)}
