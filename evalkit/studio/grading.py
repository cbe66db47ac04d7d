"""Grading a run's answers in the browser, through `judges.grades`, the terminal's door.

A grade is written by `grades.append_grade(run, grade, record=record)`, exactly as
`label_eval --grade-answers` writes it: one line of the run's human_grades.jsonl, under the
run's writer lock, with the grader's name and the sha256 of what was graded (the answer, the
context shown, the expected facts: `grades.graded_item`). The page sends the hashes of what it
showed; when the run's record no longer hashes the same (the run was re-run or re-judged
since the page loaded), the grade is refused (`GradeConflict`) instead of being written as a
grade of something the grader never saw. A grade whose answer hash differs from the record's
is shown as stale (grades.py leaves it out of the agreement).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.errors import InputError, Problem
from evalkit.judges.grades import HASHES, KINDS
from evalkit.store.runlog import Rec
from evalkit.studio.project import StudioProject

__all__ = ["GRADE_FILTERS", "SAMPLE", "GradeConflict", "grade_rows", "grade_view", "sample_ids", "save_grade", "shown_ids"]

# "sample": the seeded sample `label --grade-answers --sample N --seed S` grades (its defaults:
# 20 and 0). Grading a random sample, not the answers one happens to open, keeps the human
# grades a random subset of the run, which the prediction-powered intervals assume.
GRADE_FILTERS = ("sample", "ungraded", "all")
SAMPLE = (20, 0)


class GradeConflict(InputError):
    """What the page showed is not what the run holds now; `item` is graded_item of the record now."""

    def __init__(self, case_id: str, item: dict[str, str]):
        super().__init__(Problem(f"case {case_id!r}: the run's answer, context or expected facts changed since the page "
                                 "was loaded; nothing written: look at it as it is now, then grade again"))
        self.item = item


def _run(project: StudioProject, run_id: str) -> Any:
    from evalkit.store.runs import RunDir

    return RunDir.open(project.results_dir, run_id)


def _gradable(record: Mapping[str, Any]) -> bool:
    # as grades.sample_cases: an answer the target did not fail
    return not record.get(Rec.ERROR) and bool(str(record.get(Rec.ANSWER) or "").strip())


def _status(grade: Mapping[str, Any] | None, item: Mapping[str, str]) -> str:
    if grade is None:
        return "to grade"
    stale = [h for h in HASHES if grade.get(h) not in (None, item[h])]
    return "stale" if stale else "graded"


def grade_rows(project: StudioProject, run_id: str, grader: str) -> list[dict[str, Any]]:
    """The run's gradable answers in case order, with this grader's status: to grade, graded,
    or stale (graded when the answer, context or facts were other than now)."""
    from evalkit.judges.grades import graded_item, read_grades

    records = project.run_records(run_id) or {}
    done = read_grades(_run(project, run_id))
    rows = []
    for case_id, record in records.items():
        if not _gradable(record):
            continue
        mine = done.get(case_id, {}).get(grader)
        rows.append({"id": case_id, "question": str(record.get(Rec.QUESTION) or ""), "status": _status(mine, graded_item(record)),
                     "grade": mine, "graders": len(done.get(case_id, {}))})
    return rows


def sample_ids(project: StudioProject, run_id: str, n: int, seed: int) -> list[str]:
    """The case ids of the seeded sample, drawn as grades.sample_cases draws it (every answer
    the target did not fail, in file order; `sample_indices(len, n, seed)`), graded or not."""
    from evalkit.judges.reliability import sample_indices

    eligible = [r for r in _run(project, run_id).read_results() if _gradable(r)]
    return [str(eligible[i].get(Rec.CASE_ID)) for i in sample_indices(len(eligible), n, seed)]


def shown_ids(project: StudioProject, run_id: str, rows: list[dict[str, Any]], filter_: str, sample: tuple[int, int]) -> list[str]:
    """The ids a grading list shows, in case order: the sample, the ones not graded yet, or all."""
    if filter_ == "sample":
        chosen = set(sample_ids(project, run_id, *sample))
        return [r["id"] for r in rows if r["id"] in chosen]
    return [r["id"] for r in rows if filter_ == "all" or r["status"] != "graded"]


def _judge(record: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    v = record.get(kind)
    return {"score": v.get("score"), "method": v.get("method")} if isinstance(v, Mapping) and v.get("score") is not None else None


def grade_view(project: StudioProject, run_id: str, case_id: str, grader: str, filter_: str,
               sample: tuple[int, int] = SAMPLE) -> dict[str, Any] | None:
    """The grading page of one answer, or None when the run has no gradable record `case_id`."""
    from evalkit.judges.grades import graded_item, read_grades

    records = project.run_records(run_id) or {}
    record = records.get(case_id)
    if record is None or not _gradable(record):
        return None
    filter_ = filter_ if filter_ in GRADE_FILTERS else "sample"
    rows = grade_rows(project, run_id, grader)
    order = [r["id"] for r in rows]
    shown = shown_ids(project, run_id, rows, filter_, sample)
    at = order.index(case_id)
    before = [i for i in shown if order.index(i) < at]
    after = [i for i in shown if order.index(i) > at]
    item = graded_item(record)
    mine = read_grades(_run(project, run_id)).get(case_id, {}).get(grader)
    case = record.get(Rec.CASE) if isinstance(record.get(Rec.CASE), Mapping) else {}
    return {
        "run": run_id, "case_id": case_id, "grader": grader, "filter": filter_, "item": item, "n": sample[0], "seed": sample[1],
        "question": str(record.get(Rec.QUESTION) or ""), "answer": str(record.get(Rec.ANSWER) or ""),
        "facts": [str(f) for f in case.get("expected_key_facts") or []], "expected_answer": case.get("expected_answer"),
        "chunks": [c for c in record.get(Rec.RETRIEVED_CHUNKS) or [] if isinstance(c, Mapping)],
        "judge": {k: _judge(record, k) for k in KINDS},
        "mine": mine, "status": _status(mine, item),
        "prev": before[-1] if before else None, "next": after[0] if after else None,
        "position": order.index(case_id) + 1, "total": len(order),
    }


def save_grade(project: StudioProject, run_id: str, case_id: str, grader: str, groundedness: Any, correctness: Any,
               item: Mapping[str, Any]) -> dict[str, Any]:
    """Append one grade of case `case_id` by `grader`, if the record still hashes to `item`.

    Returns:
        The line written (grades.append_grade's).

    Raises:
        InputError: no such run or gradable case, or grades that are not whole numbers 0-5.
        GradeConflict: the record changed since the page showed it.
        RunBusy: another command is changing the run.
    """
    from evalkit.judges.grades import append_grade, graded_item
    from evalkit.judges.reliability import SCALE

    record = (project.run_records(run_id) or {}).get(case_id)
    if record is None or not _gradable(record):
        raise InputError(Problem(f"run {run_id!r} has no answer of case {case_id!r} to grade"))
    for name, v in ((Rec.GROUNDEDNESS, groundedness), (Rec.CORRECTNESS, correctness)):
        if type(v) is not int or not SCALE[0] <= v <= SCALE[1]:
            raise InputError(Problem(f"{name}: expected a whole number {SCALE[0]}-{SCALE[1]}, got {v!r}", field=name))
    now = graded_item(record)
    if dict(item) != now:
        raise GradeConflict(case_id, now)
    grade: dict[str, Any] = {Rec.CASE_ID: case_id, Rec.GROUNDEDNESS: groundedness, Rec.CORRECTNESS: correctness}
    if grader:  # as grade_cases: an unnamed grader's line names none
        grade["grader"] = grader
    return append_grade(_run(project, run_id), grade, record=record)
