"""Side-by-side review of two runs' answers in the browser: for each case that changed between
run a and run b, which answer is better (a, b) or neither (equal), written to run b's
pairwise_review.jsonl by `compare.pairwise.append_choice` (its format and rules are there).

Which cases changed is what `evalkit compare` says: its flips (a case that went pass -> fail
or fail -> pass on a metric, `Comparison.flips`) and its answer drift (both runs answered, the
answers differ, `Comparison.drift.ids`). The comparison is made once per pair of runs and kept
while neither results.jsonl changes. The page sends the sha256 of the two answers it showed;
when a run's answer is no longer that (it was answered again since the page loaded), the
choice is refused (`PairConflict`) and nothing is written.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from evalkit.compare.pairwise import (
    CHOICES,
    answer_sha256,
    latest_choices,
    read_choice_lines,
    status_of,
)
from evalkit.errors import InputError, Problem
from evalkit.store.runlog import Rec
from evalkit.studio.project import StudioProject

__all__ = ["PAIR_FILTERS", "PairConflict", "changed_cases", "pair_rows", "pair_view", "save_choice"]

# changed: compare's flips and every case whose answer changed (drift); flips: the flips only;
# to review: the changed cases without a current choice of this reviewer
PAIR_FILTERS = ("changed", "flips", "to review")
# Flips do not depend on the resamples of compare's paired tests; a few keep the pass short.
_RESAMPLES = 200

_cache: dict[tuple[str, str, str], tuple[Any, dict[str, Any]]] = {}
_cache_lock = threading.Lock()


class PairConflict(InputError):
    """A run's answer is not the one the page showed; `shown` holds the hashes now."""

    def __init__(self, case_id: str, now: dict[str, str]):
        super().__init__(Problem(f"case {case_id!r}: an answer changed since the page was loaded (a run was answered "
                                 "again); nothing written: look at them as they are now, then choose again"))
        self.now = now


def _stamp(project: StudioProject, run_id: str) -> tuple[int, int]:
    from evalkit.store.runs import RunDir

    try:
        st = RunDir.open(project.results_dir, run_id).results_path.stat()
    except OSError:
        return (0, 0)
    return (st.st_size, st.st_mtime_ns)


def changed_cases(project: StudioProject, run_a: str, run_b: str) -> dict[str, Any]:
    """What compare says changed between the runs: {"flips": {id: [metric and direction]},
    "changed": [ids whose answer changed], "order": every id of either, flips first}.

    Raises:
        InputError: compare refused the pair (no records, an unreadable run).
    """
    from evalkit.compare import compare_runs

    key = (str(project.results_dir), run_a, run_b)
    stamp = (_stamp(project, run_a), _stamp(project, run_b))
    with _cache_lock:
        kept = _cache.get(key)
        if kept is not None and kept[0] == stamp:
            return kept[1]
    result = compare_runs(run_a, run_b, results_dir=project.results_dir, ignore_invariants=True, resamples=_RESAMPLES,
                          show_drift=0, allow_mixed_judges=True, allow_label_change=True)
    flips: dict[str, list[str]] = {}
    for label, group in (("worse in b", result.flips.regressions), ("better in b", result.flips.improvements)):
        for f in group:
            flips.setdefault(f.id, []).append(f"{f.metric} {label}")
    changed = list(result.drift.ids)
    out = {"flips": flips, "changed": changed, "order": list(dict.fromkeys([*flips, *changed]))}
    with _cache_lock:
        _cache[key] = (stamp, out)
        while len(_cache) > 4:
            _cache.pop(next(iter(_cache)))
    return out


def _records(project: StudioProject, run_a: str, run_b: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    return project.run_records(run_a) or {}, project.run_records(run_b) or {}


def _choices(project: StudioProject, run_a: str, run_b: str) -> dict[str, dict[str, dict[str, Any]]]:
    from evalkit.store.runs import RunDir

    return latest_choices(read_choice_lines(RunDir.open(project.results_dir, run_b)), run_a, run_b)


def pair_rows(project: StudioProject, run_a: str, run_b: str, reviewer: str, filter_: str) -> list[dict[str, Any]]:
    """The changed cases to review, flips first (compare's order), with this reviewer's status."""
    filter_ = filter_ if filter_ in PAIR_FILTERS else PAIR_FILTERS[0]
    changed = changed_cases(project, run_a, run_b)
    ra, rb = _records(project, run_a, run_b)
    mine = _choices(project, run_a, run_b)
    rows = []
    for cid in changed["order"]:
        a, b = ra.get(cid), rb.get(cid)
        if a is None or b is None:
            continue
        status = status_of(mine.get(cid, {}).get(reviewer), answer_sha256(a), answer_sha256(b))
        row = {"id": cid, "question": str(b.get(Rec.QUESTION) or a.get(Rec.QUESTION) or ""), "flips": changed["flips"].get(cid, []),
               "answer_changed": cid in set(changed["changed"]), "status": status,
               "reviewers": len(mine.get(cid, {}))}
        if filter_ == "flips" and not row["flips"]:
            continue
        if filter_ == "to review" and status not in ("to review", "stale"):
            continue
        rows.append(row)
    return rows


def _chunks(record: Mapping[str, Any], n: int = 5) -> list[dict[str, Any]]:
    return [c for c in record.get(Rec.RETRIEVED_CHUNKS) or [] if isinstance(c, Mapping)][:n]


def pair_view(project: StudioProject, run_a: str, run_b: str, case_id: str, reviewer: str, filter_: str) -> dict[str, Any] | None:
    """The side-by-side page of one case, or None when either run has no record of it."""
    ra, rb = _records(project, run_a, run_b)
    a, b = ra.get(case_id), rb.get(case_id)
    if a is None or b is None:
        return None
    filter_ = filter_ if filter_ in PAIR_FILTERS else PAIR_FILTERS[0]
    changed = changed_cases(project, run_a, run_b)
    shown = [r["id"] for r in pair_rows(project, run_a, run_b, reviewer, filter_)]
    order = {cid: n for n, cid in enumerate(changed["order"])}
    at = order.get(case_id, -1)
    before = [i for i in shown if order[i] < at]
    after = [i for i in shown if order[i] > at]
    sha = {"answer_a_sha256": answer_sha256(a), "answer_b_sha256": answer_sha256(b)}
    mine = _choices(project, run_a, run_b).get(case_id, {}).get(reviewer)
    case = b.get(Rec.CASE) if isinstance(b.get(Rec.CASE), Mapping) else {}
    return {
        "a": run_a, "b": run_b, "case_id": case_id, "reviewer": reviewer, "filter": filter_, "sha": sha,
        "question": str(b.get(Rec.QUESTION) or a.get(Rec.QUESTION) or ""),
        "facts": [str(f) for f in case.get("expected_key_facts") or []], "expected_answer": case.get("expected_answer"),
        "answer_a": str(a.get(Rec.ANSWER) or ""), "answer_b": str(b.get(Rec.ANSWER) or ""),
        "chunks_a": _chunks(a), "chunks_b": _chunks(b), "flips": changed["flips"].get(case_id, []),
        "mine": mine, "status": status_of(mine, sha["answer_a_sha256"], sha["answer_b_sha256"]),
        "prev": before[-1] if before else None, "next": after[0] if after else None,
        "position": (shown.index(case_id) + 1) if case_id in shown else None, "total": len(shown),
    }


def save_choice(project: StudioProject, run_a: str, run_b: str, case_id: str, reviewer: str, choice: Any,
                shown: Mapping[str, Any]) -> dict[str, Any]:
    """Append one choice of case `case_id`, if both answers still hash to `shown`.

    Returns:
        The line written (compare.pairwise.append_choice's).

    Raises:
        InputError: no record of the case in a run, a choice not in a|b|equal, the same run twice.
        PairConflict: an answer changed since the page showed it.
        RunBusy: another command is changing run b.
    """
    from evalkit.compare.pairwise import append_choice
    from evalkit.store.runs import RunDir

    if run_a == run_b:
        raise InputError(Problem("compare two different runs", field="b"))
    if choice not in CHOICES:
        raise InputError(Problem(f"choice: expected one of {', '.join(CHOICES)}, got {choice!r}", field="choice"))
    ra, rb = _records(project, run_a, run_b)
    a, b = ra.get(case_id), rb.get(case_id)
    if a is None or b is None:
        raise InputError(Problem(f"runs {run_a!r} and {run_b!r} do not both hold case {case_id!r}"))
    now = {"answer_a_sha256": answer_sha256(a), "answer_b_sha256": answer_sha256(b)}
    if {k: shown.get(k) for k in now} != now:
        raise PairConflict(case_id, now)
    return append_choice(RunDir.open(project.results_dir, run_b), {
        Rec.CASE_ID: case_id, "run_a": run_a, "run_b": run_b, **now, "choice": choice, "reviewer": reviewer})
