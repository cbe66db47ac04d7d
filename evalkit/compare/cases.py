"""Per-case values of a run, paired by case id: the input of paired tests, flips and drift.

`CaseTable` reduces each record to the per-case values the aggregate means are made of
(`evalkit.metrics.aggregate`'s own reduction, so a paired mean is over exactly the values
metrics.json averages), stored as float columns (NaN = not scored) so that a 100,000-case
run costs a few MB. Cases a run could not score are NaN there: a target error (other than
an empty answer) blanks every metric but the error rates, a judge error blanks that judge's
score. metrics.json scores a target error as 0 on retrieval (a system failure); a paired
comparison excludes it instead and counts it (EVAL.md, "Comparing two runs").

Flips and drift need text (questions, chunks, answers) for a few cases only; those come
from a second pass over the records (`case_details`), for the ids that need them.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from evalkit.compare.models import (
    ChunkRef,
    DriftCase,
    Flip,
    RunUnscoreable,
    StageCell,
    StageTransitions,
)
from evalkit.compare.sources import RunSource, ranked_chunks
from evalkit.defaults import TRUNCATE_CHARS
from evalkit.evalset.turns import case_turn, turn_place

# The aggregate's per-record reduction: reusing it keeps one definition of which cases
# count toward which mean. (A public name for it is requested from metrics/aggregate.py.)
from evalkit.metrics.aggregate import extract_case as _reduce_record
from evalkit.metrics.aggregate import language_key, turn_keys
from evalkit.metrics.keys import metric_key
from evalkit.metrics.registry import METRICS, REPORT_ORDER, by_key
from evalkit.metrics.retrieval import AT_K_METRICS
from evalkit.metrics.stages import STAGES, case_stage
from evalkit.store.runlog import Cell, Met, Rec

__all__ = [
    "AT_K_METRICS",
    "FLIP_COLUMNS",
    "PER_CASE_METRICS",
    "CaseTable",
    "case_details",
    "drift_case",
    "find_flips",
    "paired_values",
    "scope_name",
    "stage_transitions",
    "unscoreable_from_metrics",
    "word_diff",
]

# Per-case means taken as extract_case gives them (a target error blanks them all), and
# the means of per-case values a paired test applies to (besides the @K metrics): the
# registry's `per_case`.
_READ_AS_IS = tuple(m.key for m in METRICS if m.per_case == "as_is")
PER_CASE_METRICS = (*_READ_AS_IS, *(m.key for m in METRICS if m.per_case == "derived"))
# Derived per case, but already by extract_case (None for a target error): the response's.
_READ_RESPONSE = tuple(m.key for m in METRICS if m.per_case == "derived" and m.stage == "response")
_IDS_SHOWN = 20
_JUDGE_FLIP_POINTS = 1.0
_EPS = 1e-9


def paired_values(
    va: np.ndarray, vb: np.ndarray, clusters: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """d_i = b_i − a_i over the paired cases both runs scored (NaN: not scored, left out), and
    each one's cluster label (its conversation, `clusters` aligned with `va`), or None for a run
    of single questions. The one pairing of every verdict member: the registry's metrics
    (compute._paired_diff) and a project's own (compare.custom)."""
    both = ~(np.isnan(va) | np.isnan(vb))
    return vb[both] - va[both], (None if clusters is None else clusters[both])


def scope_name(grouping: str, key: str) -> str:
    """`by_category` + `multi_hop` -> `category:multi_hop` (the JSON `scope`)."""
    return f"{grouping.removeprefix('by_')}:{key}"


def _scopes(case: Mapping[str, Any], answerable: bool) -> tuple[str, ...]:
    """The slices a case belongs to, named as in `scope_name` (the aggregate's grouping rules)."""
    out = ["overall"]
    out += [f"tag:{t}" for t in sorted({str(t) for t in (case.get("tags") or [])})]
    for field in ("category", "difficulty", "domain", "scenario"):
        if case.get(field) is not None:
            out.append(f"{field}:{case[field]}")
    out.append("answerable:answerable" if answerable else "answerable:unanswerable")
    lang = language_key(case)
    if lang is not None:
        out.append(f"language:{lang}")
    out += [scope_name(grouping, key) for grouping, key in turn_keys(case)]
    return tuple(out)


def _answer_digest(answer: Any) -> bytes | None:
    if not isinstance(answer, str):
        return None
    return hashlib.blake2b(" ".join(answer.split()).encode("utf-8"), digest_size=16).digest()


class CaseTable:
    """One run's per-case values, one row per test_case_id (a repeated id: the last record
    wins, except the records of a `--trials` run, whose `trial`s average: EVAL.md "Trials").

    Columns are keyed `recall_any@5`, ..., `mrr@10` (for `ks`) and PER_CASE_METRICS; a
    value is NaN when the case does not count toward that mean, or the run could not score it.
    """

    def __init__(self, run_ks: Sequence[int], ks: Sequence[int]):
        self.run_ks = list(run_ks)
        self.keys = [metric_key(m, k) for k in ks for m in AT_K_METRICS] + list(PER_CASE_METRICS)
        self._ks = [str(k) for k in ks]
        self.ids: list[str] = []
        self.row: dict[str, int] = {}
        self.cols: dict[str, array] = {key: array("d") for key in self.keys}
        # What `add` walks per record, named once: the @K values' (metric, column) per K, and the columns.
        self._at_k_names = [(str(k), [(m, metric_key(m, k)) for m in AT_K_METRICS]) for k in ks]
        self._columns = list(self.cols.items())
        self.scopes: list[tuple[str, ...]] = []
        # row -> its conversation's id, for the turns of a conversation (DESIGN.md §10).
        self.conversation: dict[int, str] = {}
        self.answers: list[bytes | None] = []
        self.duplicates: list[str] = []
        self.missing_ids = 0
        self._target_errors: list[bool] = []
        self._error_kinds: list[str | None] = []
        self._judge_errors: list[tuple[str, ...]] = []
        self._empty: list[bool] = []
        # Each case's failure stage as its code (an index into metrics.stages.STAGES), at the
        # first K of `ks` (compare's primary K): one byte per case, not a string.
        self.stages = array("b")
        # One shared tuple per distinct value: the labels repeat across cases (a few dozen
        # distinct scope tuples in a 100,000-case run), and a fresh tuple of fresh strings per
        # case was about 0.3 KB of it.
        self._interned: dict[tuple[str, ...], tuple[str, ...]] = {}
        # Trial runs: each case's per-trial values, averaged into its row as they come.
        self._trials: dict[int, list[tuple[dict[str, float | None], bool, str | None]]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, record: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> None:
        """Reduce one record and store its row; `reduced`: its `extract_case` at this run's
        K already (`RecordTable.add_record` returns it), so that it is not made twice."""
        case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
        cid = record.get(Rec.CASE_ID, case.get("id"))
        if cid is None:
            self.missing_ids += 1
            return
        cid = str(cid)
        x = reduced if reduced is not None else _reduce_record(record, self.run_ks)
        kind = x["error_kind"]
        target_error = kind is not None and kind != "empty_answer"
        values: dict[str, float | None] = {}
        at_k = x[Cell.AT_K]
        for k, names in self._at_k_names:
            block = at_k.get(k) or {}
            for m, name in names:
                values[name] = block.get(m)
        for name in _READ_AS_IS:
            values[name] = x["values"].get(name)
        for name in _READ_RESPONSE:
            values[name] = x["values"].get(name)
        abstention = x["abstention"]
        if abstention is not None and abstention[1] is not None:
            answerable, abstained = abstention
            values["abstention_accuracy"] = None if answerable else float(abstained)
            values["false_abstention_rate"] = float(abstained) if answerable else None
            values["abstention_decision_accuracy"] = float(abstained != answerable)
        if target_error:
            # Excluded pairwise, never 0: the runner's 0s are for metrics.json (EVAL.md).
            values = {}
        values["error_rate"] = float(kind is not None)
        values["timeout_rate"] = float(kind == "timeout")
        values["empty_response_rate"] = float(bool(x["empty"]))

        row = self.row.get(cid)
        new = row is None
        if row is None:
            row = len(self.ids)
            self.row[cid] = row
            self.ids.append(cid)
            for key, col in self._columns:  # the row's values (a trial case's are its means, below)
                v = values.get(key)
                col.append(math.nan if v is None else float(v))
            self.scopes.append(())
            self.answers.append(None)
            self._target_errors.append(False)
            self._error_kinds.append(None)
            self._judge_errors.append(())
            self._empty.append(False)
            self.stages.append(0)
        elif type(record.get("trial")) is not int:
            self.duplicates.append(cid)
        if type(record.get("trial")) is int:
            self._add_trial(row, values, target_error, kind, record, x)
            return
        if not new:  # a repeated id: the last record counts
            for key, col in self._columns:
                v = values.get(key)
                col[row] = math.nan if v is None else float(v)
        self._file(row, case, x["answerable"])
        self.answers[row] = None if target_error else _answer_digest(record.get("answer"))
        self._target_errors[row] = target_error
        self._error_kinds[row] = kind
        self._judge_errors[row] = self._intern(tuple(sorted(set(x[Rec.JUDGE_ERRORS]))))
        self._empty[row] = bool(x["empty"])
        self.stages[row] = self._stage(row, x)

    def _file(self, row: int, case: Mapping[str, Any], answerable: bool) -> None:
        """The slices a row's case is in, and its conversation when it is a turn of one."""
        self.scopes[row] = self._intern(_scopes(case, answerable))
        turn = case_turn(case)
        if turn is not None:
            self.conversation[row] = turn[0]

    def _add_trial(
        self, row: int, values: dict[str, float | None], target_error: bool, kind: str | None, record: Mapping, x: dict
    ) -> None:
        """One more trial of a case: its row becomes the mean over the trials that scored
        each value (a binary outcome becomes the share of trials that passed)."""
        trials = self._trials.setdefault(row, [])
        trials.append((values, target_error, kind))
        for key in self.keys:
            got = [v[key] for v, _, _ in trials if v.get(key) is not None]
            self.cols[key][row] = math.fsum(got) / len(got) if got else math.nan
        case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
        self._file(row, case, x["answerable"])
        if not target_error:
            self.answers[row] = _answer_digest(record.get("answer"))
        # Unscoreable only when no trial could be scored; a failed trial counts in error_rate.
        self._target_errors[row] = all(failed for _, failed, _ in trials)
        self._error_kinds[row] = kind if self._target_errors[row] else None
        self._judge_errors[row] = self._intern(tuple(sorted(set(self._judge_errors[row]) | set(x[Rec.JUDGE_ERRORS]))))
        self._empty[row] = self._empty[row] or bool(x["empty"])
        self.stages[row] = self._stage(row, x)

    def _stage(self, row: int, x: Mapping[str, Any]) -> int:
        """The row's stage code from its stored values (a trial case's means over its trials)."""
        cols = self.cols
        recall = cols[f"recall_any@{self._ks[0]}"][row] if self._ks else math.nan
        return case_stage(
            error=cols["error_rate"][row],
            answerable=x["answerable"],
            labeled=not x["unlabeled"],
            abstained=cols["false_abstention_rate" if x["answerable"] else "abstention_accuracy"][row],
            recall_hit=recall,
            cited=cols["attribution_hit_rate"][row],
            groundedness=cols["groundedness_avg"][row],
            correctness=cols["correctness_avg"][row],
        )

    def _intern(self, value: tuple[str, ...]) -> tuple[str, ...]:
        return self._interned.setdefault(value, value)

    def column(self, key: str) -> np.ndarray:
        """A column as a float64 array (a view: do not modify)."""
        return np.frombuffer(self.cols[key], dtype=np.float64) if len(self.cols[key]) else np.empty(0)

    def unscoreable(self, other_ids: Iterable[str] | None = None) -> RunUnscoreable:
        """What this run could not score, and how many of its cases the other run lacks."""
        kinds: dict[str, int] = {}
        judges: dict[str, int] = {}
        ids_target, ids_judge = [], []
        for i, cid in enumerate(self.ids):
            if self._target_errors[i]:
                kind = self._error_kinds[i] or "unknown"
                kinds[kind] = kinds.get(kind, 0) + 1
                ids_target.append(cid)
            for judge in self._judge_errors[i]:
                judges[judge] = judges.get(judge, 0) + 1
            if self._judge_errors[i]:
                ids_judge.append(cid)
        only = 0 if other_ids is None else len(set(self.ids) - set(other_ids))
        return RunUnscoreable(
            n_cases=len(self.ids),
            target_errors=len(ids_target),
            target_error_kinds={k: kinds[k] for k in sorted(kinds)},
            judge_errors={j: judges[j] for j in sorted(judges)},
            empty_answers=sum(self._empty),
            ids_target_error=sorted(ids_target)[:_IDS_SHOWN],
            ids_judge_error=sorted(ids_judge)[:_IDS_SHOWN],
            only_in_this_run=only,
        )


def unscoreable_from_metrics(metrics: Mapping[str, Any]) -> RunUnscoreable:
    """The same counts read from a bare metrics.json (no ids; `available` false)."""
    agg = metrics.get(Met.AGGREGATE) or {}
    op = agg.get(Cell.OPERATIONAL) or {}
    kinds = {str(k): int(v) for k, v in (op.get("error_kinds") or {}).items() if k != "empty_answer"}
    judges = {str(k): int(v) for k, v in (agg.get("judge_errors_by_judge") or {}).items()}
    return RunUnscoreable(
        n_cases=int(agg.get("n_cases") or metrics.get(Met.TOTAL_TESTS) or 0),
        target_errors=sum(kinds.values()),
        target_error_kinds=dict(sorted(kinds.items())),
        judge_errors=dict(sorted(judges.items())),
        empty_answers=int(op.get("n_empty_responses") or 0),
        available=False,
    )


# ---------------------------------------------------------------- flips

# (column, flip metric name, judge?) of the registry's metrics with a `flip`, in report order;
# recall's column is filled in per K.
_FLIP_METRICS = tuple(
    (m.key, m.flip, m.stage == "judge") for m in map(by_key, REPORT_ORDER) if m is not None and m.flip is not None
)
# A flip's metric name -> the registry metric it flips on (the reports label it so);
# `recall_any@K` is the @K metric itself.
FLIP_COLUMNS = {name: column for column, name, _ in _FLIP_METRICS}


def _rank(rr: float) -> int | None:
    return round(1.0 / rr) if rr > 0 and not math.isnan(rr) else None


def find_flips(
    ta: CaseTable, tb: CaseTable, ia: np.ndarray, ib: np.ndarray, ids: Sequence[str], k: int | None
) -> tuple[list[Flip], list[Flip]]:
    """Cases that went pass -> fail (regressions) and fail -> pass (improvements).

    Over the paired cases (`ids`, rows `ia` in a and `ib` in b): recall hit at K
    (recall_any@K 1 -> 0), attribution hit, abstention correctness (the right decision to
    answer or abstain), and a judge score (groundedness, correctness) that dropped or rose by
    more than 1 point. A case either run could not score is not a flip. Sorted by size (|b - a|
    on a 0-1 scale: 1 for a pass/fail flip, points / 5 for a judge), then by the change in
    reciprocal rank of the first gold hit, then by metric and id.

    Returns:
        (regressions, improvements) without question/chunk details (see `case_details`).
    """
    metrics = list(_FLIP_METRICS)
    if k is not None:
        metrics.insert(0, (metric_key("recall_any", k), metric_key("recall_any", k), False))
    order = {name: i for i, (_, name, _) in enumerate(metrics)}
    rr_key = metric_key("mrr", k) if k is not None else None
    rr_a = ta.column(rr_key)[ia] if rr_key in ta.cols else np.full(len(ia), math.nan)
    rr_b = tb.column(rr_key)[ib] if rr_key in tb.cols else np.full(len(ib), math.nan)
    regressions: list[tuple[tuple, Flip]] = []
    improvements: list[tuple[tuple, Flip]] = []
    for column, name, judged in metrics:
        va, vb = ta.column(column)[ia], tb.column(column)[ib]
        both = ~(np.isnan(va) | np.isnan(vb))
        d = np.where(both, vb - va, 0.0)
        limit = _JUDGE_FLIP_POINTS + _EPS if judged else 0.5
        for i in np.flatnonzero(np.abs(d) > limit):
            size = abs(float(d[i])) / (5.0 if judged else 1.0)
            ra, rb = float(rr_a[i]), float(rr_b[i])
            drr = abs((0.0 if math.isnan(rb) else rb) - (0.0 if math.isnan(ra) else ra))
            flip = Flip(
                id=ids[i], metric=name, a=float(va[i]), b=float(vb[i]), size=size,
                first_hit_rank_a=_rank(ra), first_hit_rank_b=_rank(rb),
            )
            key = (-size, -drr, order[name], ids[i])
            (regressions if d[i] < 0 else improvements).append((key, flip))
    return [f for _, f in sorted(regressions, key=lambda t: t[0])], [f for _, f in sorted(improvements, key=lambda t: t[0])]


def stage_transitions(ta: CaseTable, tb: CaseTable, ia: np.ndarray, ib: np.ndarray, ids: Sequence[str], k: int | None) -> StageTransitions:
    """The failure-stage transition matrix over the paired cases (`ids`, rows `ia` in a and
    `ib` in b, in id order): one cell per (stage in a, stage in b) with the ids behind it.
    Every paired case is in exactly one cell, so the cells' n sum to len(ids)."""
    codes_a = np.frombuffer(ta.stages, dtype=np.int8)[ia] if len(ta.stages) else np.empty(0, np.int8)
    codes_b = np.frombuffer(tb.stages, dtype=np.int8)[ib] if len(tb.stages) else np.empty(0, np.int8)
    cell = codes_a.astype(np.int64) * len(STAGES) + codes_b
    cells = []
    for code in np.unique(cell).tolist():  # sorted: row-major in STAGES order
        members = np.flatnonzero(cell == code).tolist()
        cells.append(StageCell(a=STAGES[code // len(STAGES)], b=STAGES[code % len(STAGES)], n=len(members),
                               ids=[ids[i] for i in members]))
    count_a = np.bincount(codes_a, minlength=len(STAGES)).tolist()
    count_b = np.bincount(codes_b, minlength=len(STAGES)).tolist()
    return StageTransitions(
        available=True, k=k, order=list(STAGES), n=len(ids),
        a={s: n for s, n in zip(STAGES, count_a, strict=True) if n},
        b={s: n for s, n in zip(STAGES, count_b, strict=True) if n},
        cells=cells,
    )


# ---------------------------------------------------------------- details (second pass)


def _refs(items: Iterable[Any]) -> list[ChunkRef]:
    out = []
    for item in items:
        if isinstance(item, Mapping):
            out.append(ChunkRef(rel_path=item.get("rel_path"), heading_path=item.get("heading_path")))
    return out


def case_details(source: RunSource, wanted: set[str], *, top_chunks: int = 3) -> dict[str, dict[str, Any]]:
    """Question, top chunks, gold anchors, answer and references of the `wanted` cases.

    One pass over the run's records; only the wanted ids are parsed (where their line says
    its id unparsed) and kept.
    """
    out: dict[str, dict[str, Any]] = {}
    if not wanted:
        return out
    for record in source.iter_records(ids=wanted):
        case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
        cid = record.get(Rec.CASE_ID, case.get("id"))
        if cid is None or str(cid) not in wanted:
            continue
        abstention = record.get("abstention") if isinstance(record.get("abstention"), Mapping) else {}
        abstained = abstention.get("abstained")
        out[str(cid)] = {
            # A conversation's turn (DESIGN.md §10): where it sits and what it was sent, each message cut.
            "turn": turn_place(case),
            "history": [[str(m.get("role")), str(m.get("content") or "")[:TRUNCATE_CHARS]] for m in record.get(Rec.HISTORY) or []
                        if isinstance(m, Mapping)],
            "question": record.get("question") or case.get("question"),
            "top": _refs(ranked_chunks(record)[:top_chunks]),
            "gold": _refs(case.get("gold_supports") or []),
            "answer": record.get("answer") if isinstance(record.get("answer"), str) else None,
            "references": _refs(record.get("references") or []),
            "abstained": abstained if isinstance(abstained, bool) else None,
        }
    return out


# ---------------------------------------------------------------- answer drift


def word_diff(a: str, b: str, *, context: int = 6) -> tuple[str, int, int, float]:
    """A word-level diff of two answers, git's `--word-diff=plain` notation.

    Words are whitespace-separated; removed runs print as `[-…-]`, added runs as `{+…+}`;
    unchanged runs longer than 2 × context keep `context` words on each side of an elision
    `…` (only the side next to a change at the start and end of the text).

    Returns:
        (diff text, words removed, words added, similarity = difflib ratio in [0, 1]).
    """
    wa, wb = a.split(), b.split()
    matcher = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
    ops = matcher.get_opcodes()
    parts: list[str] = []
    removed = added = 0
    for i, (op, i1, i2, j1, j2) in enumerate(ops):
        if op == "equal":
            words = wa[i1:i2]
            first, last = i == 0, i == len(ops) - 1
            if first and not last and len(words) > context:
                words = ["…", *words[-context:]]
            elif last and not first and len(words) > context:
                words = [*words[:context], "…"]
            elif not first and not last and len(words) > 2 * context:
                words = [*words[:context], "…", *words[-context:]]
            parts.append(" ".join(words))
            continue
        if i2 > i1:
            parts.append("[-" + " ".join(wa[i1:i2]) + "-]")
            removed += i2 - i1
        if j2 > j1:
            parts.append("{+" + " ".join(wb[j1:j2]) + "+}")
            added += j2 - j1
    return " ".join(p for p in parts if p), removed, added, matcher.ratio()


def drift_case(cid: str, da: Mapping[str, Any], db: Mapping[str, Any]) -> DriftCase:
    """One changed answer: its word diff and the references added and removed."""
    answer_a, answer_b = da.get("answer") or "", db.get("answer") or ""
    diff, removed, added, similarity = word_diff(answer_a, answer_b)
    refs_a = {(r.rel_path, r.heading_path): r for r in da.get("references") or []}
    refs_b = {(r.rel_path, r.heading_path): r for r in db.get("references") or []}
    return DriftCase(
        id=cid,
        question=db.get("question") or da.get("question"),
        similarity=similarity,
        words_removed=removed,
        words_added=added,
        diff=diff,
        answer_a=answer_a,
        answer_b=answer_b,
        references_added=[refs_b[key] for key in refs_b if key not in refs_a],
        references_removed=[refs_a[key] for key in refs_a if key not in refs_b],
    )
