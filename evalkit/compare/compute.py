"""compare_runs: two runs (or a run and a baseline) -> one `Comparison` (EVAL.md, "Comparing two runs").

Steps, each over data already on disk:

1. invariants (seed 000 §10.1 via `evalkit.gate.invariants.check_invariants`, plus K): refuse, unless
   ignored, and then mark which numbers are not comparable;
2. one streamed pass per run: the aggregate cells (`aggregate_records(..., full_slices=True)`,
   so every slice has every K) and the per-case table (`cases.CaseTable`);
3. delta rows: every metric, overall and per slice, at every K both runs measured, with both n;
4. a paired test per row that is a mean of per-case values (`evalkit.metrics.stats`), then
   Holm or Benjamini-Hochberg over the family;
5. the merge verdict: each metric with a margin, its adjusted paired interval against it
   (`evalkit.gate.verdict`);
6. flips, the failure-stage transitions (`cases.stage_transitions`), answer drift (a second
   pass for the few cases that need text), latency, config diff;
7. the gate and the decision (`evalkit.gate.decision`): the verdict by default, or
   `evalkit.gate.regressions.gate_result` plus a relative MRR drop; on request, flips.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evalkit.compare.cases import (
    AT_K_METRICS,
    PER_CASE_METRICS,
    CaseTable,
    case_details,
    drift_case,
    find_flips,
    paired_values,
    scope_name,
    stage_transitions,
    unscoreable_from_metrics,
)
from evalkit.compare.conditions import config_diff, latency_report
from evalkit.compare.custom import custom_members, split_margins
from evalkit.compare.models import (
    Comparison,
    CorpusReport,
    DeltaRow,
    DriftReport,
    Flips,
    InvariantReport,
    NotComparable,
    RunUnscoreable,
    SourceInfo,
    StageTransitions,
    StatsSettings,
)
from evalkit.compare.sources import RunSource, asked_k, each_run, open_source
from evalkit.errors import InputError, Problem, redact
from evalkit.gate.decision import DEFAULT_MRR_RELATIVE, decide, gate_mode, gate_report
from evalkit.gate.fields import field_gaps
from evalkit.gate.invariants import (
    ANSWER_METRICS,
    asked_k_difference,
    check_invariants,
    corpus_changes,
    corpus_of,
    invariant_warnings,
    trial_count,
)
from evalkit.gate.models import MergeVerdict
from evalkit.gate.regressions import skipped_metrics
from evalkit.gate.thresholds import Thresholds
from evalkit.gate.values import comparison_k
from evalkit.gate.verdict import Member, build_verdict, resolve_margins
from evalkit.metrics.aggregate import RecordTable, flatten_cell, recorded_suite_ms
from evalkit.metrics.keys import (
    HEADLINE_AT_K,
    LOWER_IS_BETTER,
    PLAIN_METRIC_ORDER,
    canonical_key,
    ir_measure_name,
    metric_key,
    parse_metric_key,
)
from evalkit.metrics.registry import METRICS
from evalkit.metrics.stats import (
    DEFAULT_RESAMPLES,
    NORMAL_CI_FROM,
    NORMAL_P_FROM,
    PairedComparison,
    adjust_pvalues,
    compare_paired,
    noise_sentence,
    significant,
)
from evalkit.store.runlog import Cell, Met, Rec
from evalkit.store.runs import RunDir

__all__ = ["IncomparableRuns", "compare_runs", "select_metrics"]

_EPS = 1e-9
# Headline names of a metrics.json cell -> the @K metric they hold at the primary K.
_HEADLINE = HEADLINE_AT_K
# abstention_recall is abstention_accuracy under another name; latency has its own section.
_NOT_DELTAS = frozenset({*(m.key for m in METRICS if not m.compared), "latency_p50_ms", "latency_p95_ms"})
_METRIC_ORDER = (*AT_K_METRICS, *PLAIN_METRIC_ORDER)
_LOWER_IS_BETTER = LOWER_IS_BETTER
_HIGHER_IS_BETTER = frozenset(_METRIC_ORDER) - _LOWER_IS_BETTER
# Scopes in report order: the groupings readers scan first, tags (the most numerous) last.
_GROUPING_ORDER = (Met.BY_ANSWERABLE, Met.BY_CATEGORY, Met.BY_DIFFICULTY, Met.BY_DOMAIN, Met.BY_LANGUAGE, Met.BY_SCENARIO,
                   Met.BY_TURN, Met.BY_FOLLOW_UP, Met.BY_TAG)
# hallucination = 1 - abstention accuracy case by case: one test, shown on both rows.
_MIRRORED = {"hallucination_rate_unanswerable": "abstention_accuracy"}
# Judge scores: what a different judge (model, prompt, temperature) makes incomparable.
_JUDGE_METRICS = [m.key for m in METRICS if m.stage == "judge"]
# An @K metric's name -> its headline key (the gate's name for it at the gate's K).
_AT_K_HEADLINE = {at_k: key for key, at_k in HEADLINE_AT_K.items()}
# What a margin may be set on: every row with a paired test.
_TESTABLE = frozenset({*AT_K_METRICS, *PER_CASE_METRICS, *_MIRRORED})
# The verdict's default gated set (the registry's `verdict_gated`), by row metric name.
_VERDICT_GATED = {(m.at_k or m.key): m.verdict_gated for m in METRICS}


class IncomparableRuns(InputError):
    """Broken invariants without --ignore-invariants: exit 2, one line per violation."""

    def __init__(self, run_a: str, run_b: str, violations: list[str]):
        self.violations = [redact(v) for v in violations]
        problems = [Problem(f"cannot compare {run_a} with {run_b}: {v}", field=Met.INVARIANTS) for v in violations]
        problems.append(Problem("pass --ignore-invariants to compare anyway (the report then says which numbers are not comparable)", field=Met.INVARIANTS))
        super().__init__(problems)


# ---------------------------------------------------------------- invariants


def _invariants(a: RunSource, b: RunSource, same_corpus: bool = False, allow_label_change: bool = False) -> list[str]:
    """`gate.check_invariants` (eval set or its labels, case count, judge, scorer; the corpus
    with `same_corpus`): the gate's own.

    A different K asked of the target is not among them (as in run_eval's gate): retrieval
    stays comparable at a K both measured, and `_not_comparable` marks the answer metrics."""
    return check_invariants(a.metrics, b.metrics, same_corpus=same_corpus, allow_label_change=allow_label_change)


def _not_comparable(violations: list[str], a: RunSource, b: RunSource) -> list[NotComparable]:
    """Which metrics each violation makes meaningless (["*"]: all of them), then each contract
    field one target leaves out, with the metrics that read it (`fields.field_gaps`: no
    violation, the pair is compared)."""
    out = []
    for v in violations:
        if v.startswith(("eval sets differ", "case counts differ")):
            metrics = ["*"]
        elif v.startswith("judge "):
            metrics = list(_JUDGE_METRICS)
        elif v.startswith("K differs"):
            metrics = list(ANSWER_METRICS)
        elif v.startswith("history modes differ"):
            # Comparing how a chatbot does with and without the conversation is the point of
            # --ignore-invariants here: every number is comparable, the report says how it was asked.
            metrics = []
        else:
            metrics = ["*"]
        out.append(NotComparable(reason=v, metrics=metrics))
    for gap in field_gaps(a.metrics, b.metrics):
        if gap.metrics:  # an @K metric by its row name (recall_any), as the rows are marked
            out.append(NotComparable(reason=gap.reason, metrics=[HEADLINE_AT_K.get(m, m) for m in gap.metrics]))
    return out


# ---------------------------------------------------------------- one pass per run


def _scan(source: RunSource, ks: list[int]) -> tuple[CaseTable | None, dict[str, Any]]:
    """The run's aggregate cells (every slice at every K, as `aggregate_records` makes them)
    and its per-case table, in one pass that reduces each record once for both."""
    if not source.has_records:
        return None, source.metrics
    table, cells = CaseTable(source.ks, ks), RecordTable(source.ks)
    for record in source.iter_records():
        table.add(record, cells.add_record(record))
    return table, cells.result(suite_ms=recorded_suite_ms(source.metrics), full_slices=True)


def _cells(agg: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """{scope: cell} in report order."""
    out: dict[str, Mapping[str, Any]] = {}
    if isinstance(agg.get(Met.AGGREGATE), Mapping):
        out["overall"] = agg[Met.AGGREGATE]
    for grouping in _GROUPING_ORDER:
        for key, cell in sorted((agg.get(grouping) or {}).items()):
            if isinstance(cell, Mapping):
                out[scope_name(grouping, key)] = cell
    return out


def _flat(cell: Mapping[str, Any], primary_k: int) -> dict[tuple[str, int | None], tuple[float | None, int]]:
    """A cell as {(metric, K or None): (value, n)}; a headline name becomes its @K metric."""
    out: dict[tuple[str, int | None], tuple[float | None, int]] = {}
    headline: dict[tuple[str, int | None], tuple[float | None, int]] = {}
    for key, value in flatten_cell(cell).items():
        name, k = parse_metric_key(key)
        if name in _NOT_DELTAS:
            continue
        if k is None and name in _HEADLINE:
            headline[(_HEADLINE[name], primary_k)] = value
        else:
            out[(name, k)] = value
    for key, value in headline.items():
        out.setdefault(key, value)
    return out


def _metric_rank(name: str) -> int:
    return _METRIC_ORDER.index(name) if name in _METRIC_ORDER else len(_METRIC_ORDER)


# ---------------------------------------------------------------- paired tests


def _min_p(n_changed: int, resamples: int) -> float:
    """The smallest p-value the sign-flip test can give with n_changed nonzero differences."""
    if n_changed == 0:
        return 1.0
    exact = 2.0 ** (1 - n_changed) if n_changed < 1075 else 0.0
    return max(exact, 1.0 / (resamples + 1))


def _paired_diff(row: DeltaRow, ta: CaseTable, tb: CaseTable, pairing: _Pairing) -> tuple[np.ndarray, np.ndarray | None]:
    """d_i = b_i − a_i of a row over the cases of its scope both runs scored (the data of its
    paired test, in the row's own direction: a mirrored row's differences change sign), and
    each one's conversation (`_Pairing.cluster`), or None for a run of single questions."""
    column = _MIRRORED.get(row.metric, row.metric)
    key = f"{column}@{row.k}" if row.k is not None else column
    pos = np.asarray(pairing.scope_pos.get(row.scope, []), dtype=np.int64)
    va, vb = ta.column(key)[pairing.ia[pos]], tb.column(key)[pairing.ib[pos]]
    d, clusters = paired_values(va, vb, None if pairing.cluster is None else pairing.cluster[pos])
    return (0.0 - d if row.metric in _MIRRORED else d), clusters


# ---------------------------------------------------------------- the steps of compare_runs


@dataclass
class _Pairing:
    """The cases both runs have, in id order: their rows in each table, and per scope the
    positions (into `ids`) of the cases that belong to it in both runs."""

    ids: list[str]
    ia: np.ndarray
    ib: np.ndarray
    scope_pos: dict[str, list[int]]
    # Runs of conversations (DESIGN.md §10): per paired case, a number its conversation's
    # turns share (a single question its own); the tests and intervals resample these. None
    # when no case is a turn.
    cluster: np.ndarray | None = None


def _pair(ta: CaseTable, tb: CaseTable) -> _Pairing:
    # Id order, so that the draws do not depend on the order records were written in.
    ids = sorted(set(ta.row) & set(tb.row))
    ia = np.array([ta.row[c] for c in ids], dtype=np.int64)
    ib = np.array([tb.row[c] for c in ids], dtype=np.int64)
    scope_pos: dict[str, list[int]] = {}
    for pos, (ra, rb) in enumerate(zip(ia.tolist(), ib.tolist(), strict=True)):
        for scope in set(ta.scopes[ra]) & set(tb.scopes[rb]):
            scope_pos.setdefault(scope, []).append(pos)
    cluster = None
    if ta.conversation:
        numbers: dict[str, int] = {}
        labels = [ta.conversation.get(int(ra)) for ra in ia.tolist()]
        cluster = np.array([numbers.setdefault(c if c is not None else f"\0{i}", len(numbers)) for i, c in enumerate(labels)],
                           dtype=np.int64)
    return _Pairing(ids, ia, ib, scope_pos, cluster)


def _notes(
    sa: RunSource, sb: RunSource, ta: CaseTable | None, tb: CaseTable | None, only_a: list[int], only_b: list[int], ks: list[int]
) -> list[str]:
    # A field one target leaves out that no metric these runs measured reads blocks nothing.
    notes = [gap.message for gap in field_gaps(sa.metrics, sb.metrics) if not gap.metrics]
    if only_a or only_b:
        notes.append(
            "K measured by one run only, not compared: "
            + "; ".join(f"run {s}: {', '.join(map(str, v))}" for s, v in (("a", only_a), ("b", only_b)) if v)
        )
    if not ks:
        notes.append("the runs share no K: no retrieval metric is compared")
    for side, src, table in (("a", sa, ta), ("b", sb, tb)):
        if table is None:
            notes.append(f"run {side} ({src.run_id}) is a bare metrics.json: aggregate deltas and the gate only; "
                         "no paired tests, flips or drift")
            continue
        if table.duplicates:
            shown = ", ".join(sorted(set(table.duplicates))[:5])
            notes.append(f"run {side} has {len(table.duplicates)} repeated case id(s) ({shown}): the last record counts")
        if table.missing_ids:
            notes.append(f"run {side} has {table.missing_ids} record(s) without a test_case_id: left out")
    return notes


def _delta_rows(
    cells_a: dict[str, Mapping[str, Any]], cells_b: dict[str, Mapping[str, Any]], pa: int, pb: int, ks: list[int]
) -> list[DeltaRow]:
    """One row per (scope, metric, K) both runs hold, in report order; no test yet."""
    rows: list[DeltaRow] = []
    for scope, cell_a in cells_a.items():
        cell_b = cells_b.get(scope)
        if cell_b is None:
            continue
        fa, fb = _flat(cell_a, pa), _flat(cell_b, pb)
        keys = [key for key in fa if key in fb and (key[1] is None or key[1] in ks)]
        keys.sort(key=lambda key: (len(ks) if key[1] is None else ks.index(key[1]), _metric_rank(key[0]), key[0]))
        for name, k in keys:
            (va, na), (vb, nb) = fa[(name, k)], fb[(name, k)]
            if (va is None and vb is None) or (scope != "overall" and (va is None or vb is None)):
                continue
            direction = "lower_is_better" if name in _LOWER_IS_BETTER else "higher_is_better" if name in _HIGHER_IS_BETTER else None
            delta = None if va is None or vb is None else vb - va
            change = change_of(delta, direction)
            rows.append(DeltaRow(metric=name, ir_measure=ir_measure_name(name, k), scope=scope, k=k, a=va, b=vb, delta=delta, n_a=na, n_b=nb, n=None,
                                 direction=direction, change=change))
    return rows


def change_of(delta: float | None, direction: str | None) -> str | None:
    """better / worse / unchanged: the sign of `delta` read with the metric's direction."""
    if delta is None or direction is None:
        return None
    if abs(delta) <= _EPS:
        return "unchanged"
    return "better" if (delta > 0) == (direction == "higher_is_better") else "worse"


def _mark_not_comparable(rows: list[DeltaRow], not_comparable: list[NotComparable]) -> None:
    blocked: dict[str, str] = {}
    for nc in not_comparable:
        for m in nc.metrics:
            blocked.setdefault(m, nc.reason)
    for row in rows:
        reason = blocked.get("*") or blocked.get(row.metric)
        if reason is not None:
            row.comparable = False
            row.note = f"not comparable: {reason}"


def _test_rows(
    rows: list[DeltaRow], ta: CaseTable, tb: CaseTable, pairing: _Pairing, *, seed: int, resamples: int, confidence: float,
    alpha: float, correction: str,
) -> int:
    """Fill each row's paired test, then correct over the family; returns the family's size.

    A test is identified by its data: the same paired differences (up to sign) over the same
    cases are one test, whichever metric or scope shows them (false_abstention_rate in
    `overall` and `answerable:answerable`; hallucination and abstention accuracy), drawn once
    and counted once in the family.
    """
    tests: dict[bytes, tuple[PairedComparison, int, float, str]] = {}
    test_of: dict[int, bytes] = {}
    # Per scope: its paired cases' positions and their rows in each table, made once for its ~40 rows.
    at: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for row in rows:
        column = _MIRRORED.get(row.metric, row.metric)
        key = f"{column}@{row.k}" if row.k is not None else column
        if (row.metric not in AT_K_METRICS and column not in PER_CASE_METRICS) or key not in ta.cols:
            continue
        if row.scope not in at:
            pos = np.asarray(pairing.scope_pos.get(row.scope, []), dtype=np.int64)
            at[row.scope] = (pos, pairing.ia[pos], pairing.ib[pos])
        pos, rows_a, rows_b = at[row.scope]
        va, vb = ta.column(key)[rows_a], tb.column(key)[rows_b]
        live = ~(np.isnan(va) & np.isnan(vb))
        va, vb, pos = va[live], vb[live], pos[live]
        both = ~(np.isnan(va) | np.isnan(vb))
        d = np.where(both, vb - va, 0.0)
        nonzero = np.flatnonzero(d)
        orient = -1.0 if nonzero.size and d[nonzero[0]] < 0 else 1.0
        # A digest, not the bytes themselves: a test kept as its 17 bytes a case came to
        # about 50 MB at 100,000 cases over a run's few dozen metrics and scopes. Its cases
        # (positions ascend) and `both` as bits, and only the changed values: a tenth of the hashing.
        cases = np.zeros(len(pairing.ids), dtype=bool)
        cases[pos] = True
        ident = hashlib.blake2b(b"|".join((np.packbits(cases).tobytes(), np.packbits(both).tobytes(), nonzero.tobytes(),
                                           (orient * d[nonzero] + 0.0).tobytes())), digest_size=32).digest()
        if ident not in tests:
            name = f"{key}|{row.scope}"
            clusters = None if pairing.cluster is None else pairing.cluster[pos]
            result = compare_paired(va, vb, seed=seed, key=name, resamples=resamples, confidence=confidence, alpha=alpha,
                                    clusters=clusters)
            tests[ident] = (result, int(nonzero.size), orient, name)
        test_of[id(row)] = ident
        result, changed, first_orient, row.test = tests[ident]
        sign = orient * first_orient * (-1.0 if row.metric in _MIRRORED else 1.0)
        row.n, row.n_excluded_a, row.n_excluded_b, row.n_changed = result.n, result.n_excluded_a, result.n_excluded_b, changed
        if result.n:
            lo, hi = result.ci
            row.paired_delta = None if result.delta is None else sign * result.delta + 0.0
            # The row's own means over the n cases, not the test's: a shared test can be another
            # row's data with the same differences (recall@5 and @10 moving on the same cases).
            mean_a, mean_b = float(va[both].mean()), float(vb[both].mean())
            row.paired_a, row.paired_b = (1.0 - mean_a, 1.0 - mean_b) if row.metric in _MIRRORED else (mean_a, mean_b)
            if row.paired_delta is not None:  # the change every report shows follows the Δ it shows
                row.change = change_of(row.paired_delta, row.direction)
            row.ci95 = [lo, hi] if sign > 0 else [None if hi is None else -hi + 0.0, None if lo is None else -lo + 0.0]
            row.p_value = None if result.p_value is None else float(result.p_value)
            row.p_exact = result.p_exact
            row.ci_method, row.p_method = result.ci_method, result.p_method
            row.p_draws = result.p_draws if result.p_method == "monte_carlo" else None
            row.in_family = row.comparable and _min_p(changed, resamples) <= alpha
        if row.comparable and not row.in_family:
            if not result.n:
                row.note = noise_sentence(0)
            elif changed == 0:
                row.note = f"no paired case changed (n={result.n})"
            else:
                row.note = f"{noise_sentence(result.n)}; only {changed} case(s) changed, too few to reach p ≤ {alpha:g}"
    # The family: every distinct test that is comparable and can reach p <= alpha at all
    # (Tarone 1990: a test that cannot reject does not dilute the others).
    family: dict[bytes, list[DeltaRow]] = {}
    for row in rows:
        if row.in_family:
            family.setdefault(test_of[id(row)], []).append(row)
    idents = list(family)
    adjusted = adjust_pvalues([family[ident][0].p_value for ident in idents], method=correction)  # type: ignore[arg-type]
    for ident, p_adj in zip(idents, adjusted, strict=True):
        for row in family[ident]:
            row.p_adjusted = p_adj
            row.significant = significant(p_adj, alpha)
            row.note = None if row.significant else noise_sentence(row.n or 0)
            if not row.significant and row.p_draws is not None and row.p_draws < resamples:
                row.note += f"; p from {row.p_draws:,} sign patterns: drawing stopped once p > {alpha:g} was settled"
    return len(family)


def _method_counts(rows: list[DeltaRow]) -> dict[str, dict[str, int]]:
    """How many distinct paired tests got their interval and their p-value by each method."""
    seen: dict[str, DeltaRow] = {}
    for row in rows:
        if row.test is not None and row.n:
            seen.setdefault(row.test, row)
    counts: dict[str, dict[str, int]] = {"ci": {}, "p": {}}
    for row in seen.values():
        for part, method in (("ci", row.ci_method), ("p", row.p_method)):
            if method is not None:
                counts[part][method] = counts[part].get(method, 0) + 1
    return counts


def judge_samples(metrics: Mapping[str, Any]) -> int:
    """How many times the run's judge scored each answer (`--judge-samples`; 1 when not said)."""
    judge = (metrics.get(Met.AGGREGATE) or {}).get(Cell.JUDGE)
    trials = judge.get("trials") if isinstance(judge, Mapping) else None
    n = trials.get("n_trials") if isinstance(trials, Mapping) else None
    return n if isinstance(n, int) and n > 0 else 1


def corrected_deltas(ma: Mapping[str, Any], mb: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """{judge mean key: (θ_b − θ_a, se)} for each judge kind both runs' metrics.json correct by
    human grades (`aggregate_metrics.judge_ppi`, PPI++); empty when either run has none."""
    from evalkit.metrics.ppi import corrected_difference

    pa = (ma.get(Met.AGGREGATE) or {}).get(Cell.JUDGE_PPI) or {}
    pb = (mb.get(Met.AGGREGATE) or {}).get(Cell.JUDGE_PPI) or {}
    out = {}
    for kind in Rec.JUDGED:
        d = corrected_difference(pa.get(kind), pb.get(kind))
        if d is not None:
            out[f"{kind}_avg"] = d
    return out


def _verdict(
    rows: list[DeltaRow], ta: CaseTable, tb: CaseTable, pairing: _Pairing,
    margins: dict[tuple[str, int | None], tuple[float | None, Any]], skipped: dict[str, str], gate_k: int | None, alpha: float,
    corrected: Mapping[str, tuple[float, float]] | None = None,
    custom: tuple[list[Member], list[dict[str, str]], list[DeltaRow]] = ([], [], []),
) -> MergeVerdict:
    """The merge verdict over every metric both runs computed case by case (at the gate's K,
    and any other K a `--margin` names), each on its overall row's paired data against its
    margin (`verdict.resolve_margins`). Gated: the registry's gated set and every metric a
    `--margin` names. A gated metric the gate skipped, or whose row is missing or not
    comparable, is listed in `not_compared` with the reason; so is any metric whose row
    exists but cannot be compared. `corrected`: {judge metric: (delta, se)} of the runs'
    PPI++-corrected means (`corrected_deltas`), judged instead of the judge's paired scores."""
    overall = {(r.metric, r.k): r for r in rows if r.scope == "overall"}
    members, not_compared = [], []
    for (metric, k), (margin, source) in margins.items():
        name = metric_key(metric, k)
        gated = source == "--margin" or _VERDICT_GATED.get(metric, False)
        if margin is None:
            not_compared.append({"metric": name, "reason": f"left out by --margin {name}=off"})
            continue
        headline = _AT_K_HEADLINE.get(metric) if k is not None else metric
        reason = skipped.get(headline) if (k is None or k == gate_k) and headline else None
        row = overall.get((metric, k))
        if reason is None and row is None:
            if gated:  # a metric outside the gated set that neither run measured is simply not there
                not_compared.append({"metric": name, "reason": "not measured by both runs"})
            continue
        if reason is None and row is not None and not row.comparable:
            reason = row.note or "not comparable"
        if reason is None and row is not None and row.n is None:
            reason = "no per-case values to pair"
        if reason is not None or row is None:
            not_compared.append({"metric": name, "reason": reason or "no row"})
            continue
        diff, clusters = _paired_diff(row, ta, tb, pairing)
        members.append(Member(metric=metric, k=k, direction=row.direction or "higher_is_better", margin=margin,
                              source=source, diff=diff, test=row.test,
                              family=metric_key(_MIRRORED.get(metric, metric), k), gated=gated, clusters=clusters,
                              corrected=(corrected or {}).get(metric)))
    # A project's own metrics (rubric judges, Python scorers), after the registry's.
    members.extend(custom[0])
    not_compared.extend(custom[1])
    # Report order: the gated set first, then the rest, each in the rows' order.
    rank = {(r.metric, r.k): i for i, r in enumerate(rows) if r.scope == "overall"}
    members.sort(key=lambda m: (not m.gated, rank.get((m.metric, m.k), len(rank))))
    return build_verdict(members, not_compared, alpha=alpha)


def _cases(
    sa: RunSource, sb: RunSource, ta: CaseTable, tb: CaseTable, pairing: _Pairing, k: int | None, *, show_drift: int,
    top_chunks: int,
) -> tuple[Flips, DriftReport, dict[str, RunUnscoreable]]:
    """Flips, answer drift and unscoreable counts; one more pass per run for the cases' text."""
    regressions, improvements = find_flips(ta, tb, pairing.ia, pairing.ib, pairing.ids, k)
    answers_a = [ta.answers[r] for r in pairing.ia.tolist()]
    answers_b = [tb.answers[r] for r in pairing.ib.tolist()]
    answered = [i for i, (x, y) in enumerate(zip(answers_a, answers_b, strict=True)) if x is not None and y is not None]
    changed = [pairing.ids[i] for i in answered if answers_a[i] != answers_b[i]]
    wanted = {f.id for f in regressions + improvements} | set(changed)
    da = case_details(sa, wanted, top_chunks=top_chunks)
    db = case_details(sb, wanted, top_chunks=top_chunks)
    for flip in regressions + improvements:
        xa, xb = da.get(flip.id, {}), db.get(flip.id, {})
        flip.question = xb.get("question") or xa.get("question")
        flip.top_a, flip.top_b = xa.get("top", []), xb.get("top", [])
        flip.gold = xb.get("gold") or xa.get("gold") or []
        flip.abstained_a, flip.abstained_b = xa.get("abstained"), xb.get("abstained")
        flip.turn = xb.get("turn") or xa.get("turn")
        flip.history_a, flip.history_b = xa.get("history") or [], xb.get("history") or []
    counts: dict[str, dict[str, int]] = {}
    for label, group in (("regressions", regressions), ("improvements", improvements)):
        for flip in group:
            counts.setdefault(flip.metric, {"regressions": 0, "improvements": 0})[label] += 1
    flips = Flips(available=True, k=k, regressions=regressions, improvements=improvements, counts=counts)
    drifted = sorted((drift_case(cid, da.get(cid, {}), db.get(cid, {})) for cid in changed), key=lambda d: (d.similarity, d.id))
    drift = DriftReport(
        available=True, n_compared=len(answered), n_changed=len(drifted), ids=[d.id for d in drifted], cases=drifted[:show_drift]
    )
    return flips, drift, {"a": ta.unscoreable(tb.ids), "b": tb.unscoreable(ta.ids)}


# ---------------------------------------------------------------- compare_runs


def _check_settings(
    alpha: float, correction: str, gate: str | None, show_drift: int, mrr_relative_threshold: float, confidence: float,
    on_inconclusive: str,
) -> None:
    problems = []
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        problems.append(Problem(f"expected a number in (0, 1), got {alpha!r}", field="--alpha"))
    if correction not in ("holm", "bh"):
        problems.append(Problem(f"expected holm or bh, got {correction!r}", field="correction"))
    if gate is not None and gate not in ("verdict", "threshold", "significant", "non-inferior"):
        problems.append(Problem(f"expected verdict, threshold or significant, got {gate!r}", field="--gate"))
    if on_inconclusive not in ("exit-4", "pass", "fail"):
        problems.append(Problem(f"expected exit-4, pass or fail, got {on_inconclusive!r}", field="--on-inconclusive"))
    if not isinstance(show_drift, int) or show_drift < 0:
        problems.append(Problem(f"expected a non-negative integer, got {show_drift!r}", field="--show-drift"))
    if not (isinstance(mrr_relative_threshold, int | float) and mrr_relative_threshold >= 0):
        problems.append(Problem(f"expected a non-negative number, got {mrr_relative_threshold!r}", field="--regression-threshold-mrr-relative"))
    if not (isinstance(confidence, int | float) and 0.0 < confidence < 1.0):
        problems.append(Problem(f"expected a number in (0, 1), got {confidence!r}", field="confidence"))
    if problems:
        raise InputError(problems)


def compare_runs(
    a: str | Path | RunDir | RunSource,
    b: str | Path | RunDir | RunSource,
    *,
    results_dir: str | Path = "results",
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Literal["holm", "bh"] = "holm",
    ignore_invariants: bool = False,
    thresholds: Thresholds | None = None,
    mrr_relative_threshold: float = DEFAULT_MRR_RELATIVE,
    gate: Literal["verdict", "threshold", "significant", "non-inferior"] | None = None,
    on_inconclusive: Literal["exit-4", "pass", "fail"] = "exit-4",
    margins: Mapping[str, float | None] | None = None,
    fail_on_flip: bool = False,
    allow_regressions: bool = False,
    allow_mixed_judges: bool = False,
    allow_missing_metrics: bool = False,
    same_corpus: bool = False,
    allow_label_change: bool = False,
    show_drift: int = 5,
    top_chunks: int = 3,
) -> Comparison:
    """Compare run a (the baseline) with run b (the new run).

    Args:
        a: the baseline: a run id under `results_dir`, a run folder, a baseline.json
            (`save_baseline`) or a metrics.json.
        b: the new run, the same kinds.
        results_dir: where run ids are looked up.
        seed: seed of every bootstrap and randomization draw (numpy SeedSequence per test).
        resamples: bootstrap resamples and random sign patterns per test.
        confidence: coverage of the bootstrap interval (`ci95` at the default 0.95).
        alpha: significance level after correction.
        correction: "holm" (family-wise error rate) or "bh" (false discovery rate).
        ignore_invariants: compare runs that break an invariant; the result marks the
            numbers that are not comparable.
        thresholds: the gate's absolute thresholds (evalkit.gate.thresholds.Thresholds defaults).
        mrr_relative_threshold: largest allowed MRR drop relative to the baseline's MRR.
        gate: None (the default): `evalkit.gate.decision.default_gate` (the verdict, or the threshold
            gate when a threshold differs from its default), and the threshold gate when a side
            is a bare metrics.json (a note says so). "verdict" (alias "non-inferior"): fails when any
            metric is shown worse; not enough evidence when a gated metric is not settled.
            "threshold": run_eval's thresholds. "significant": only threshold regressions
            whose paired test is significant after correction fail, and a significant rise of
            error_rate beyond its margin.
        on_inconclusive: what `decision.exit_code` is for not enough evidence: "exit-4"
            (4), "pass" (0) or "fail" (1).
        margins: {metric: margin} replacing the registry's margins of the verdict (a metric
            named here is also gated; `recall_frac@5`, `R@5`, `recall_at_k_avg`,
            `error_rate`; see `evalkit.gate.verdict.resolve_margins`); None ("off")
            leaves a metric out.
        fail_on_flip: any case going pass -> fail fails the gate.
        allow_regressions: record the gate as allowed (the CLI then exits 0).
        allow_mixed_judges: compare judge scores of a heuristic-judged and an LLM-judged run.
        allow_missing_metrics: pass a gate that could not compare Recall@K or MRR@K (no K
            both runs measured, or a run without them); by default it fails.
        same_corpus: the runs must have searched the same notes and index (their index
            stats agree): a change is an invariant violation, not a warning.
        allow_label_change: compare runs that hold the same cases scored with other gold
            labels (`gate.label_change`); a warning then says the deltas mix the label change in.
        show_drift: how many changed answers to diff.
        top_chunks: retrieved chunks listed per flip.

    Returns:
        The Comparison (render with evalkit.report.compare, or `model_dump(mode="json")`).

    Raises:
        IncomparableRuns: an invariant is broken and not ignored (exit 2).
        InputError: an unknown run, an unreadable file, bad settings or margins, or a gate
            that needs per-case records a bare metrics.json does not have.
    """
    _check_settings(alpha, correction, gate, show_drift, mrr_relative_threshold, confidence, on_inconclusive)
    sa = a if isinstance(a, RunSource) else open_source(a, results_dir, flag="--run-id-1")
    sb = b if isinstance(b, RunSource) else open_source(b, results_dir, flag="--run-id-2")
    violations = _invariants(sa, sb, same_corpus, allow_label_change)
    if violations and not ignore_invariants:
        raise IncomparableRuns(sa.run_id, sb.run_id, violations)
    per_case = sa.has_records and sb.has_records
    mode, mode_note = gate_mode(gate, per_case, thresholds, float(mrr_relative_threshold))
    if not per_case and (mode in ("significant", "verdict") or fail_on_flip):
        flag = f"--gate {gate}" if mode != "threshold" else "--fail-on-flip"
        bare = sa if not sa.has_records else sb
        raise InputError(
            Problem(f"{flag} needs per-case results on both sides; {bare.path} is a bare metrics.json "
                    "(save a full baseline with --save-baseline)", field=flag)
        )
    not_comparable = _not_comparable(violations, sa, sb)
    partial = asked_k_difference(asked_k(sa), asked_k(sb))
    if partial is not None:  # never a refusal: the answer metrics are marked, retrieval compared at a shared K
        not_comparable.append(NotComparable(reason=partial, metrics=list(ANSWER_METRICS)))

    ks = [k for k in sb.ks if k in set(sa.ks)]
    only_a = [k for k in sa.ks if k not in set(sb.ks)]
    only_b = [k for k in sb.ks if k not in set(sa.ks)]
    primary = ks[0] if ks else None
    gate_k_text = comparison_k(sa.metrics, sb.metrics)
    gate_k = int(gate_k_text) if gate_k_text is not None else None
    # Bad margins are refused before any run is read.
    builtin_margins, custom_margins = split_margins(margins or {})
    resolved = resolve_margins(builtin_margins, ks=ks, gate_k=gate_k, testable=set(_TESTABLE), at_k=set(AT_K_METRICS))
    (ta, agg_a), (tb, agg_b) = each_run(_scan, sa, sb, ks)
    notes = _notes(sa, sb, ta, tb, only_a, only_b, ks)
    if mode_note is not None:
        notes.append(mode_note)
    trials_a, trials_b = trial_count(sa.metrics), trial_count(sb.metrics)
    if trials_a != trials_b:
        notes.append(f"run a asked each case {trials_a} time(s), run b {trials_b}: cases are paired on their per-case "
                     "mean over trials, so a case's value is comparable whatever the trial count")
    samples_a, samples_b = judge_samples(sa.metrics), judge_samples(sb.metrics)
    if max(samples_a, samples_b) > 1:
        notes.append(f"the judge scored each answer {samples_a} time(s) in run a, {samples_b} in run b "
                     "(--judge-samples): a case's judge score is the mean of its samples, so the judge's own noise "
                     "is inside the judge metrics' intervals")
    from evalkit.compare.pairwise import comparison_note, judge_note, judge_tallies

    pairwise = comparison_note(sa, sb)  # the human pairwise review kept in run b's folder, if any
    if pairwise is not None:
        notes.append(pairwise)
    # The pairwise judges' verdicts beside the humans' (kept in run b's folder by
    # rescore.pairwise.judge_runs: `compare --pairwise-judge`), each judge with its position flips.
    judged_pairs = judge_tallies(sa, sb)
    notes.extend(judge_note(t) for t in judged_pairs)
    pairing = _pair(ta, tb) if ta is not None and tb is not None else _Pairing([], np.empty(0, np.int64), np.empty(0, np.int64), {})

    cells_a, cells_b = _cells(agg_a), _cells(agg_b)
    rows = _delta_rows(cells_a, cells_b, sa.ks[0], sb.ks[0], ks)
    scopes_only = sorted(set(cells_a) ^ set(cells_b))
    if scopes_only:
        shown = ", ".join(scopes_only[:8]) + (" …" if len(scopes_only) > 8 else "")
        notes.append(f"{len(scopes_only)} slice(s) exist in one run only, not compared: {shown}")
    _mark_not_comparable(rows, not_comparable)
    family_size = 0
    if ta is not None and tb is not None:
        family_size = _test_rows(rows, ta, tb, pairing, seed=seed, resamples=resamples, confidence=confidence,
                                 alpha=alpha, correction=correction)
        flips, drift, unscoreable = _cases(sa, sb, ta, tb, pairing, primary, show_drift=show_drift, top_chunks=top_chunks)
        stages = stage_transitions(ta, tb, pairing.ia, pairing.ib, pairing.ids, primary)
        skipped = {s["metric"]: s["reason"] for s in skipped_metrics(
            sa.metrics, sb.metrics, allow_mixed_judges=allow_mixed_judges, not_comparable=partial)}
        custom = custom_members(sa.metrics, sb.metrics, sa.iter_records, sb.iter_records, pairing.ids, custom_margins,
                                clusters=pairing.cluster)
        rows.extend(custom[2])
        merge = _verdict(rows, ta, tb, pairing, resolved, skipped, gate_k, alpha,
                         corrected_deltas(sa.metrics, sb.metrics), custom)
    else:
        merge = MergeVerdict(available=False, summary="one side has no per-case results (a bare metrics.json)",
                             alpha=alpha, confidence=1.0 - alpha)
        flips, drift = Flips(available=False, k=primary), DriftReport(available=False)
        stages = StageTransitions(available=False, k=primary)
        unscoreable = {
            "a": ta.unscoreable() if ta is not None else unscoreable_from_metrics(sa.metrics),
            "b": tb.unscoreable() if tb is not None else unscoreable_from_metrics(sb.metrics),
        }

    extra = [f"latency is not comparable: {nc.reason}" for nc in not_comparable if "latency" in nc.metrics or "*" in nc.metrics]
    latency = latency_report(cells_a.get("overall", {}), cells_b.get("overall", {}), sa, sb, extra)
    verdict = gate_report(
        sa.metrics, sb.metrics, {(row.metric, row.scope, row.k): row for row in rows},
        [f"{f.id} ({f.metric})" for f in flips.regressions], baseline_run_id=sa.run_id, asked_k=(asked_k(sa), asked_k(sb)),
        mode=mode, thresholds=thresholds or Thresholds(), mrr_relative_threshold=float(mrr_relative_threshold),
        fail_on_flip=fail_on_flip, allow_regressions=allow_regressions, allow_mixed_judges=allow_mixed_judges,
        ignore_invariants=ignore_invariants, correction=correction, allow_missing_metrics=allow_missing_metrics,
        verdict=merge, slices=(agg_a, agg_b), same_corpus=same_corpus, allow_label_change=allow_label_change,
    )
    n_a = len(ta) if ta is not None else int(sa.metrics.get(Met.TOTAL_TESTS) or 0)
    n_b = len(tb) if tb is not None else int(sb.metrics.get(Met.TOTAL_TESTS) or 0)
    n_paired = len(pairing.ids)
    corpus_a, corpus_b = corpus_of(sa.metrics), corpus_of(sb.metrics)
    return Comparison(
        run_id_1=sa.run_id,
        run_id_2=sb.run_id,
        verdict=merge,
        sources={
            side: SourceInfo(run_id=src.run_id, kind=src.kind, path=str(src.path), has_records=src.has_records)
            for side, src in (("a", sa), ("b", sb))
        },
        n={"a": n_a, "b": n_b, "paired": n_paired, "only_a": n_a - n_paired if per_case else 0,
           "only_b": n_b - n_paired if per_case else 0},
        ks={"compared": ks, "primary": primary, "only_a": only_a, "only_b": only_b},
        stats=StatsSettings(
            seed=seed, resamples=resamples, confidence=confidence, alpha=alpha, correction=correction,
            family_size=family_size, n_tested=sum(1 for r in rows if r.p_value is not None),
            n_significant=sum(1 for r in rows if r.significant), normal_from={"ci": NORMAL_CI_FROM, "p": NORMAL_P_FROM},
            unit="conversation" if pairing is not None and pairing.cluster is not None else "case",
            methods=_method_counts(rows),
        ),
        invariants=InvariantReport(ok=not violations, violations=violations, ignored=bool(violations and ignore_invariants),
                                   not_comparable=not_comparable,
                                   warnings=invariant_warnings(sa.metrics, sb.metrics, same_corpus=same_corpus,
                                                               allow_label_change=allow_label_change)),
        deltas=rows,
        flips=flips,
        unscoreable=unscoreable,
        latency=latency,
        config_diff=config_diff(
            {**sa.config, "index": corpus_of(sa.metrics)}, {**sb.config, "index": corpus_of(sb.metrics)}
        ) if sa.config is not None and sb.config is not None else {},
        config_diff_available=sa.config is not None and sb.config is not None,
        corpus=CorpusReport(available=bool(corpus_a or corpus_b), a=corpus_a, b=corpus_b,
                            changed=list(corpus_changes(sa.metrics, sb.metrics)), same_corpus=same_corpus),
        drift=drift,
        stages=stages,
        pairwise_judge=judged_pairs,
        gate=verdict,
        decision=decide(verdict, merge, on_inconclusive=on_inconclusive, allowed=bool(allow_regressions)),
        notes=notes,
    )


def select_metrics(result: Comparison, metrics: Sequence[str]) -> Comparison:
    """`result` with only the delta rows of `metrics` (compare_runs' `--metric`).

    A name is ours or ir_measures' (`ndcg@10`, `nDCG@10`, `R@5`), a metric at every K
    (`ndcg`), or a mean (`groundedness_avg`; `mrr_avg` and the other headline names mean
    their metric at the primary K). Only what is shown changes: the tests were run, and
    corrected, over every metric, and the gate judged them all.

    Raises:
        InputError: a name no row has (the message lists those there are).
    """
    wanted: list[tuple[str, int | None]] = []
    problems = []
    have = {(r.metric, r.k) for r in result.deltas}
    primary = result.ks.get("primary")
    for given in metrics:
        try:
            name, k = parse_metric_key(canonical_key(given))
        except ValueError:
            name, k = given, None
        if k is None and name in HEADLINE_AT_K:
            name, k = HEADLINE_AT_K[name], primary
        if not any(m == name and (k is None or kk == k) for m, kk in have):
            known = sorted({f"{m}@{kk}" if kk is not None else m for m, kk in have})
            problems.append(Problem(f"no row for {given!r}; the comparison has {', '.join(known)}", field="--metric"))
        wanted.append((name, k))
    if problems:
        raise InputError(problems)
    rows = [r for r in result.deltas if any(r.metric == m and (k is None or r.k == k) for m, k in wanted)]
    note = f"rows limited to --metric {', '.join(metrics)}; tests were corrected over every metric"
    return result.model_copy(update={"deltas": rows, "notes": [*result.notes, note]})
