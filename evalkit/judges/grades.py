"""Human grades of a run's answers, and how well the judge agrees with them.

A person grades a seeded sample of a run's answers for groundedness and correctness on the
judge's 0-5 scale (`label_eval.py --grade-answers`). Each grade is one line appended to
`results/<run_id>/human_grades.jsonl` as soon as it is given, so a killed session loses at
most the case on screen; the last line for a case wins, so regrading is appending.

`agreement` compares those grades with the judge scores stored in results.jsonl:
quadratic weighted kappa (judges/reliability.py) on integer grades, the judge's score
rounded half up and clipped to 0-5 (4.5 -> 5, as `to_grade` does for the spot-check), and
the mean absolute error on the raw scores. Only judge-made scores count (method "llm" or
"heuristic"): a score set by rule (abstained, empty answer) is not the judge's opinion.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import InputError, Problem
from evalkit.jsonio import MAX_WRITTEN_DEPTH, loads
from evalkit.judges.reliability import (
    SCALE,
    quadratic_weighted_kappa,
    sample_indices,
    to_grade,
)
from evalkit.store.atomic import open_no_follow
from evalkit.store.runlog import Rec
from evalkit.store.runs import RunDir, RunFolderError

__all__ = [
    "GRADES_FILE", "KINDS", "GradingOutcome", "agreement", "agreement_of", "append_grade", "format_case", "grade_cases",
    "grades_path", "parse_grade", "read_grades", "sample_cases",
]

GRADES_FILE = "human_grades.jsonl"
SCHEMA_VERSION = 1
KINDS = (Rec.GROUNDEDNESS, Rec.CORRECTNESS)
JUDGE_METHODS = ("llm", "heuristic")
QUIT = "quit"
# The job named in the run's writer lock (store.runs.RunDir.writer) while grades are written.
WRITER = "label_eval --grade-answers"


def grades_path(run: RunDir) -> Path:
    return run.path / GRADES_FILE


def _gradable(record: Mapping[str, Any]) -> bool:
    """An answered case the target did not fail: there is an answer to grade."""
    return not record.get("error") and bool((record.get("answer") or "").strip())


def sample_cases(run: RunDir, n: int, seed: int) -> list[dict[str, Any]]:
    """The seeded sample of a run's answers still to grade, in eval-set order.

    The sample is drawn over every answered case without a target error
    (`sample_indices(len(eligible), n, seed)`, eligible in case_index order), and only
    then are already-graded cases dropped: the same n and seed give the same sample, so a
    rerun resumes it instead of drawing new cases.

    Returns:
        The records (dicts from results.jsonl) of the sampled cases not yet graded.
    """
    eligible = [r for r in run.read_results() if _gradable(r)]
    done = read_grades(run)
    chosen = [eligible[i] for i in sample_indices(len(eligible), n, seed)]
    return [r for r in chosen if r.get(Rec.CASE_ID) not in done]


def _check_grade(grade: Mapping[str, Any]) -> list[str]:
    problems = []
    if not isinstance(grade.get(Rec.CASE_ID), str) or not grade.get(Rec.CASE_ID):
        problems.append(f"test_case_id: expected a non-empty string, got {grade.get(Rec.CASE_ID)!r}")
    for kind in KINDS:
        v = grade.get(kind)
        if isinstance(v, bool) or not isinstance(v, int) or not SCALE[0] <= v <= SCALE[1]:
            problems.append(f"{kind}: expected a whole number {SCALE[0]}-{SCALE[1]}, got {v!r}")
    return problems


def append_grade(run: RunDir, grade: Mapping[str, Any]) -> dict[str, Any]:
    """Append one grade as one line of human_grades.jsonl, flushed and fsynced.

    Args:
        run: the run folder.
        grade: {test_case_id, groundedness, correctness (whole numbers 0-5), grader?, graded_at?};
            graded_at defaults to now (UTC, ISO 8601). The input is not modified.

    Returns:
        The line written, as a dict (with schema_version and graded_at).

    Raises:
        ValueError: the grade breaks the rules above (a caller's bug: the prompt validates).
        RunBusy: another command is changing the run (its writer lock).
        RunFolderError: the OS refused the write.
    """
    problems = _check_grade(grade)
    if problems:
        raise ValueError("; ".join(problems))
    line = {
        "schema_version": SCHEMA_VERSION,
        **grade,
        "graded_at": grade.get("graded_at") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    path = grades_path(run)
    try:
        # Appended and cut in place: never through a symbolic link (a file outside the run folder).
        with run.writer(WRITER), os.fdopen(open_no_follow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT), "ab+") as f:
            # A torn last line (killed mid-write) would glue onto this one: cut it first.
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.seek(0)
                    data = f.read()
                    f.truncate(data.rfind(b"\n") + 1)
            f.write(orjson.dumps(line) + b"\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise RunFolderError(Problem(f"cannot write {GRADES_FILE}: {e.strerror or e}", path=str(path))) from None
    return line


def read_grades(run: RunDir) -> dict[str, dict[str, Any]]:
    """The grades of human_grades.jsonl by case id; the last line for a case wins.

    A partial last line (killed mid-write) is ignored.

    Raises:
        InputError: every unreadable or invalid line, with file and line number.
    """
    path = grades_path(run)
    if not path.exists():
        return {}
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RunFolderError(Problem(f"cannot read {GRADES_FILE}: {e.strerror or e}", path=str(path))) from None
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    grades: dict[str, dict[str, Any]] = {}
    problems = []
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            g = loads(raw, max_depth=MAX_WRITTEN_DEPTH, path=str(path), line=lineno)
        except InputError as e:  # not JSON, not UTF-8 or too deep, said at its line
            problems.extend(e.problems)
            continue
        bad = _check_grade(g) if isinstance(g, dict) else ["expected a JSON object"]
        if bad:
            problems += [Problem(b, path=str(path), line=lineno) for b in bad]
            continue
        grades[g[Rec.CASE_ID]] = g
    if torn.strip():
        try:
            g = orjson.loads(torn)
            if isinstance(g, dict) and not _check_grade(g):
                grades[g[Rec.CASE_ID]] = g
        except orjson.JSONDecodeError:
            pass  # the line being written when the session died
    if problems:
        raise InputError(problems)
    return grades


def _judge_score(record: Mapping[str, Any] | None, kind: str) -> float | None:
    v = record.get(kind) if record else None
    if isinstance(v, Mapping) and v.get("method") in JUDGE_METHODS and v.get("score") is not None:
        return float(v["score"])
    return None


def agreement(run: RunDir) -> dict[str, dict[str, Any]]:
    """Judge-vs-human agreement of a run: `agreement_of(read_grades(run), results.jsonl)`."""
    return agreement_of(read_grades(run), run.iter_results())


def agreement_of(grades: Mapping[str, Mapping[str, Any]], records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Judge-vs-human agreement per kind, over graded cases the judge scored.

    For each kind, pairs (h, j) = (human grade, stored judge score), judge-made only:
      kappa_quadratic = quadratic_weighted_kappa(h, to_grade(j)) on the 0-5 scale, where
          to_grade rounds half up and clips (4.49 -> 4, 4.5 -> 5); None when n = 0 or
          both raters gave one and the same grade to every case.
      mae = Σ |h - j| / n on the raw judge score; None when n = 0.
      n = number of pairs; n_without_judge_score = grades whose case has no judge-made
          score of that kind (rule-scored, judge error, not judged, not in the run).

    Args:
        grades: case id -> grade (from `read_grades`).
        records: results.jsonl records (only the graded ones are kept).

    Returns:
        {"groundedness": {kappa_quadratic, mae, n, n_without_judge_score}, "correctness": {...}}
    """
    by_id = {r.get(Rec.CASE_ID): r for r in records if r.get(Rec.CASE_ID) in grades}
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        human: list[int] = []
        judge: list[float] = []
        for cid, g in grades.items():
            j = _judge_score(by_id.get(cid), kind)
            if j is not None:
                human.append(int(g[kind]))
                judge.append(j)
        n = len(human)
        out[kind] = {
            "kappa_quadratic": quadratic_weighted_kappa(human, [to_grade(j) for j in judge]),
            "mae": sum(abs(h - j) for h, j in zip(human, judge, strict=True)) / n if n else None,
            "n": n,
            "n_without_judge_score": len(grades) - n,
        }
    return out


# ---------------------------------------------------------------- the prompt-based session


def _clean(text: str) -> str:
    # User and model text must not drive the terminal: control characters as escapes.
    return "".join(c if c.isprintable() or c in "\t\n" else repr(c)[1:-1] for c in text)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_case(record: Mapping[str, Any], *, n_chunks: int = 3, max_chars: int = 400) -> str:
    """What a grader reads: question, answer, the top chunks (cut to max_chars, with
    rel_path > heading_path), and the expected answer / key facts when the case has them.
    Not the judge's scores: they would anchor the grader."""
    case = record.get("case") or {}
    lines = [f"question: {record.get('question') or case.get('question') or ''}", "answer:"]
    lines += ["  " + ln for ln in (record.get("answer") or "").strip().splitlines()]
    chunks = sorted(record.get("retrieved_chunks") or [], key=lambda c: c.get("rank") or 0)[:n_chunks]
    for i, c in enumerate(chunks, 1):
        where = f"{c.get('rel_path') or '?'} > {c.get('heading_path') or ''}".rstrip(" >")
        cut = " (stored text cut)" if c.get("text_truncated") else ""
        lines.append(f"[{i}] {where}{cut}")
        lines.append("    " + _cut(c.get("text") or "", max_chars))
    if not chunks:
        lines.append("(no retrieved chunks)")
    if case.get("expected_answer"):
        lines.append(f"expected answer: {case['expected_answer']}")
    facts = case.get("expected_key_facts") or []
    if facts:
        lines.append("key facts: " + "; ".join(str(f) for f in facts))
    return _clean("\n".join(lines))


def parse_grade(text: str | None, *, allow_skip: bool) -> int | None | str:
    """One answer to a grade prompt: an int 0-5, None (blank: skip), QUIT ("q" or end of
    input), or raises ValueError with what was expected."""
    if text is None:
        return QUIT
    t = text.strip().lower()
    if t in ("q", "quit"):
        return QUIT
    if t == "" and allow_skip:
        return None
    if t.isdigit() and SCALE[0] <= int(t) <= SCALE[1]:
        return int(t)
    expected = f"a whole number {SCALE[0]}-{SCALE[1]}" + (", blank to skip" if allow_skip else "") + " or q to quit"
    raise ValueError(f"expected {expected}, got {text.strip()!r}")


@dataclass
class GradingOutcome:
    """What a grading session did: case ids graded and skipped, and whether the grader quit."""

    graded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    quit: bool = False


def _ask(ask: Callable[[str], str | None], show: Callable[[str], None], prompt: str, allow_skip: bool) -> int | None | str:
    while True:
        try:
            return parse_grade(ask(prompt), allow_skip=allow_skip)
        except ValueError as e:
            show(f"  {e}")


def grade_cases(
    run: RunDir,
    cases: Iterable[Mapping[str, Any]],
    *,
    ask: Callable[[str], str | None],
    show: Callable[[str], None],
    grader: str | None = None,
    total: int | None = None,
) -> GradingOutcome:
    """Show each case and ask for its grades; append each grade as soon as both are given.

    Args:
        run: the run folder (grades go to its human_grades.jsonl).
        cases: records to grade (from `sample_cases`).
        ask: shows a prompt and returns the line typed, or None at end of input.
        show: prints one block of text.
        grader: stored with each grade when given.
        total: cases in the session, for the "case i/total" header.

    Returns:
        The outcome. Groundedness blank skips the case (asked again next session); q or end
        of input quits, dropping the case on screen. Junk is re-asked.

    Raises:
        RunBusy: another command is changing the run; the session holds the run's writer
            lock from the first case to the last (see `append_grade`).
    """
    with run.writer(WRITER):
        return _grade_cases(run, cases, ask=ask, show=show, grader=grader, total=total)


def _grade_cases(
    run: RunDir, cases: Iterable[Mapping[str, Any]], *, ask: Callable[[str], str | None],
    show: Callable[[str], None], grader: str | None, total: int | None,
) -> GradingOutcome:
    """grade_cases' session, under the run's writer lock."""
    out = GradingOutcome()
    cases = list(cases)
    total = total or len(cases)
    for i, record in enumerate(cases, 1):
        cid = str(record.get(Rec.CASE_ID))
        show(f"\n=== case {i}/{total}: {_clean(cid)} ===\n{format_case(record)}")
        g = _ask(ask, show, f"groundedness {SCALE[0]}-{SCALE[1]} (blank = skip, q = quit): ", True)
        if g == QUIT:
            out.quit = True
            break
        if g is None:
            out.skipped.append(cid)
            continue
        c = _ask(ask, show, f"correctness {SCALE[0]}-{SCALE[1]}: ", False)
        if c == QUIT:
            out.quit = True
            break
        grade: dict[str, Any] = {Rec.CASE_ID: cid, Rec.GROUNDEDNESS: g, Rec.CORRECTNESS: c}
        if grader:
            grade["grader"] = grader
        append_grade(run, grade)
        out.graded.append(cid)
    return out
