"""Human grades of a run's answers, and how well the judge and the graders agree.

A person grades a seeded sample of a run's answers for groundedness and correctness on the
judge's 0-5 scale (`label_eval.py --grade-answers`); the browser workbench and imports
(`evalkit.interop.importers.mtrag_ratings`) write the same lines. Each grade is one line
appended to `results/<run_id>/human_grades.jsonl` as soon as it is given, so a killed
session loses at most the case on screen. A line names its grader and what was graded
(sha256 of the answer, of the context shown and of the expected facts); several graders of
one case are kept apart, and the last line of a (case, grader) wins, so regrading is
appending. Lines written before graders and hashes were stored (schema_version 1) still
read: they are the grader "" (unnamed) and graded whatever the record holds.

The public door, for every writer and reader: `append_grade`, `read_grades`,
`read_grade_lines`, `graded_item`, `agreement` / `agreement_of`.

`agreement_of` compares the grades with the judge scores stored in results.jsonl, and the
graders with each other (formulas: evalkit.metrics.agreement; EVAL.md "Judge vs human
grades"). Only judge-made scores count (method "llm" or "heuristic"): a score set by rule
(abstained, empty answer) is not the judge's opinion. A grade whose answer hash differs
from the record's answer graded another answer (the run was re-run): it is stale, left out
and counted.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import Problem
from evalkit.judges.cache import context_hash
from evalkit.judges.reliability import (
    SCALE,
    quadratic_weighted_kappa,
    sample_indices,
    to_grade,
)
from evalkit.metrics.agreement import (
    cohen_kappa,
    confusion_matrix,
    fleiss_kappa,
    krippendorff_alpha,
    pairwise_kappas,
    spearman,
)
from evalkit.store.atomic import append_fsynced, read_appended
from evalkit.store.runlog import Rec
from evalkit.store.runs import RunDir, RunFolderError

__all__ = [
    "GRADES_FILE", "KINDS", "UNNAMED", "GradingOutcome", "agreement", "agreement_of", "append_grade", "format_case",
    "ScoreRow", "corrected_means", "next_cases", "plan_grading", "grade_cases", "graded_item", "grades_path", "human_reference", "score_row", "parse_grade", "read_grade_lines", "read_grades",
    "sample_cases",
]

GRADES_FILE = "human_grades.jsonl"
SCHEMA_VERSION = 2
KINDS = (Rec.GROUNDEDNESS, Rec.CORRECTNESS)
JUDGE_METHODS = ("llm", "heuristic")
# The grader of a line that names none (schema_version 1, or `label_eval` without --grader).
UNNAMED = ""
HASHES = ("answer_sha256", "context_sha256", "facts_sha256")
QUIT = "quit"
# The job named in the run's writer lock (store.runs.RunDir.writer) while grades are written.
WRITER = "label_eval --grade-answers"


def grades_path(run: RunDir) -> Path:
    return run.path / GRADES_FILE


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def graded_item(record: Mapping[str, Any]) -> dict[str, str]:
    """What a grade of this record is a grade of, as three sha256 hex digests.

    - answer_sha256: of the record's `answer` (UTF-8), as the judge's `judge_input` hashes it.
    - context_sha256: `judges.cache.context_hash` over the record's retrieved chunks in rank
      order, ids and texts as stored (what the grader was shown).
    - facts_sha256: of the canonical JSON `[expected_key_facts, expected_answer]` of the case.
    """
    from evalkit.judges.runner import context_from_record

    case = record.get("case") or {}
    facts = orjson.dumps([case.get("expected_key_facts") or [], case.get("expected_answer")])
    return {
        "answer_sha256": _sha256(record.get("answer") or ""),
        "context_sha256": context_hash(context_from_record(dict(record))),
        "facts_sha256": hashlib.sha256(facts).hexdigest(),
    }


def _gradable(record: Mapping[str, Any]) -> bool:
    """An answered case the target did not fail: there is an answer to grade."""
    return not record.get("error") and bool((record.get("answer") or "").strip())


def sample_cases(run: RunDir, n: int, seed: int, *, grader: str | None = None) -> list[dict[str, Any]]:
    """The seeded sample of a run's answers still to grade, in eval-set order.

    The sample is drawn over every answered case without a target error
    (`sample_indices(len(eligible), n, seed)`, eligible in case_index order), and only
    then are cases this grader already graded dropped: the same n and seed give the same
    sample, so a rerun resumes it instead of drawing new cases, and a second grader gets
    the same sample as the first.

    Returns:
        The records (dicts from results.jsonl) of the sampled cases not yet graded.
    """
    eligible = [r for r in run.read_results() if _gradable(r)]
    done = read_grades(run)
    who = grader or UNNAMED
    chosen = [eligible[i] for i in sample_indices(len(eligible), n, seed)]
    return [r for r in chosen if who not in done.get(r.get(Rec.CASE_ID), {})]


def _whole(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and SCALE[0] <= v <= SCALE[1]


def _check_grade(grade: Mapping[str, Any]) -> list[str]:
    problems = []
    if not isinstance(grade.get(Rec.CASE_ID), str) or not grade.get(Rec.CASE_ID):
        problems.append(f"test_case_id: expected a non-empty string, got {grade.get(Rec.CASE_ID)!r}")
    v1 = grade.get("schema_version", 1) == 1
    for kind in KINDS:
        v = grade.get(kind)
        # schema 1 lines hold both grades; later ones may hold one (an import rating one aspect)
        if (v is not None or v1) and not _whole(v):
            problems.append(f"{kind}: expected a whole number {SCALE[0]}-{SCALE[1]}, got {v!r}")
    if not v1 and all(grade.get(k) is None for k in KINDS):
        problems.append(f"expected a grade: {' or '.join(KINDS)}")
    grader = grade.get("grader")
    if grader is not None and not isinstance(grader, str):
        problems.append(f"grader: expected a string, got {grader!r}")
    for h in HASHES:
        if grade.get(h) is not None and not isinstance(grade.get(h), str):
            problems.append(f"{h}: expected a hex string, got {grade.get(h)!r}")
    return problems


def append_grade(run: RunDir, grade: Mapping[str, Any], *, record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Append one grade as one line of human_grades.jsonl, flushed and fsynced.

    Args:
        run: the run folder.
        grade: {test_case_id, groundedness?, correctness? (whole numbers 0-5, at least one),
            grader?, graded_at?, answer_sha256?, context_sha256?, facts_sha256?, source?};
            graded_at defaults to now (UTC, ISO 8601). The input is not modified.
        record: the results.jsonl record graded: its `graded_item` hashes fill the hashes
            the grade does not give.

    Returns:
        The line written, as a dict (with schema_version and graded_at).

    Raises:
        ValueError: the grade breaks the rules above (a caller's bug: the prompt validates).
        RunBusy: another command is changing the run (its writer lock).
        RunFolderError: the OS refused the write.
    """
    line = {
        **(graded_item(record) if record is not None else {}),
        **{k: v for k, v in grade.items() if v is not None or k in KINDS},
        "schema_version": SCHEMA_VERSION,
        "graded_at": grade.get("graded_at") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    problems = _check_grade(line)
    if problems:
        raise ValueError("; ".join(problems))
    append_lines(run, [line])
    return line


def append_lines(run: RunDir, lines: Iterable[Mapping[str, Any]]) -> int:
    """Append checked grade lines to human_grades.jsonl in one write, fsynced (an import's
    many grades); returns how many. `append_grade` is the one-grade door."""
    data = b"".join(orjson.dumps(dict(x)) + b"\n" for x in lines)
    path = grades_path(run)
    try:
        # Never through a symbolic link; a torn last line (killed mid-write) is cut first.
        with run.writer(WRITER):
            append_fsynced(path, data)
    except OSError as e:
        raise RunFolderError(Problem(f"cannot write {GRADES_FILE}: {e.strerror or e}", path=str(path))) from None
    return data.count(b"\n")


def read_grade_lines(run: RunDir) -> list[dict[str, Any]]:
    """Every valid line of human_grades.jsonl, in file order (schema 1 and 2). A partial last
    line (killed mid-write) is ignored (`store.atomic.read_appended`).

    Raises:
        InputError: every unreadable or invalid line, with file and line number.
    """
    path = grades_path(run)
    try:
        return read_appended(path, _check_grade)
    except OSError as e:
        raise RunFolderError(Problem(f"cannot read {GRADES_FILE}: {e.strerror or e}", path=str(path))) from None


def read_grades(run: RunDir) -> dict[str, dict[str, dict[str, Any]]]:
    """The grades of human_grades.jsonl: case id -> grader -> that grader's last line for
    the case (`latest_grades(read_grade_lines(run))`)."""
    return latest_grades(read_grade_lines(run))


def latest_grades(lines: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """case id -> grader (UNNAMED when a line names none) -> the last line of that pair."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for g in lines:
        out.setdefault(g[Rec.CASE_ID], {})[g.get("grader") or UNNAMED] = dict(g)
    return out


def _judge_score(record: Mapping[str, Any] | None, kind: str) -> float | None:
    v = record.get(kind) if record else None
    if isinstance(v, Mapping) and v.get("method") in JUDGE_METHODS and v.get("score") is not None:
        return float(v["score"])
    return None


def _stale(grade: Mapping[str, Any], record: Mapping[str, Any] | str | None) -> bool:
    """The grade names an answer other than the record's (the case was answered again);
    `record` may be given as its answer's sha256."""
    h = grade.get("answer_sha256")
    if record is None or h is None:
        return False
    return h != (record if isinstance(record, str) else _sha256(record.get("answer") or ""))


def human_reference(by_grader: Mapping[str, Mapping[str, Any]], kind: str,
                    record: Mapping[str, Any] | str | None = None) -> tuple[float | None, int]:
    """The humans' value of one case: the mean of its graders' `kind` grades, leaving out
    grades of another answer than the record's (stale; `record` or its answer's sha256).
    Returns (mean or None, n stale)."""
    vals = []
    stale = 0
    for g in by_grader.values():
        if g.get(kind) is None:
            continue
        if _stale(g, record):
            stale += 1
        else:
            vals.append(int(g[kind]))
    return (math.fsum(vals) / len(vals) if vals else None), stale


def agreement(run: RunDir) -> dict[str, dict[str, Any]]:
    """Judge-vs-human and human-vs-human agreement of a run:
    `agreement_of(read_grades(run), results.jsonl)`."""
    return agreement_of(read_grades(run), run.iter_results())


def _humans(by_case: Mapping[str, Mapping[str, Mapping[str, Any]]], kind: str,
            records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """Agreement among the graders of `kind` over cases graded by two or more; None without such a case."""
    units: list[list[int]] = []
    ratings: dict[str, dict[str, int]] = {}
    for cid, by_grader in by_case.items():
        vals = {who: int(g[kind]) for who, g in by_grader.items() if g.get(kind) is not None and not _stale(g, records.get(cid))}
        if len(vals) >= 2:
            units.append(list(vals.values()))
            for who, v in vals.items():
                ratings.setdefault(who, {})[cid] = v
    if not units:
        return None
    scale = list(range(SCALE[0], SCALE[1] + 1))
    # Fleiss' kappa needs one number of raters per case: the commonest one (ties: the larger).
    m = max(Counter(len(u) for u in units).items(), key=lambda x: (x[1], x[0]))[0]
    table = [[u.count(c) for c in scale] for u in units if len(u) == m]
    pairs = pairwise_kappas(ratings, scale, weights="quadratic")
    kappas = [p["kappa"] for p in pairs if p["kappa"] is not None]
    return {
        "n_cases": len(units),
        "n_grades": sum(len(u) for u in units),
        "n_graders": len(ratings),
        "alpha_ordinal": krippendorff_alpha(units, "ordinal"),
        "alpha_interval": krippendorff_alpha(units, "interval"),
        "fleiss_kappa": fleiss_kappa(table),
        "fleiss_n": len(table),
        "fleiss_raters": m,
        "pairwise_kappa_quadratic": pairs,
        "mean_pairwise_kappa_quadratic": math.fsum(kappas) / len(kappas) if kappas else None,
    }


def agreement_of(grades: Mapping[str, Mapping[str, Mapping[str, Any]]], records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Judge-vs-human and human-vs-human agreement per kind.

    The humans' value h of a case is the mean of its graders' grades (`human_reference`;
    one grader: that grade). For each kind, pairs (h, j) = (humans' value, stored judge
    score) over graded cases the judge scored, judge-made only:
      kappa_quadratic = quadratic_weighted_kappa(to_grade(h), to_grade(j)) on the 0-5 scale,
          where to_grade rounds half up and clips (4.49 -> 4, 4.5 -> 5); None when n = 0 or
          both sides gave one and the same grade to every case.
      kappa = the same without weights (Cohen's kappa).
      spearman = Spearman's rho of (h, j) on the raw values; None under 2 pairs or constant.
      confusion = 6 × 6 counts, row = to_grade(h), column = to_grade(j), grades 0..5.
      mae = Σ |h - j| / n on the raw judge score; None when n = 0.
      n = number of pairs; n_without_judge_score = graded cases without a judge-made score
          of that kind (rule-scored, judge error, not judged, not in the run);
          n_stale = grades of another answer than the record's, left out.
      humans = agreement among graders (`_humans`): Krippendorff's alpha (ordinal, interval),
          Fleiss' kappa, pairwise quadratic Cohen's kappa; None when no case has 2 graders.
      by_grader = [{grader, n, kappa_quadratic}]: the judge's grade against each grader's
          alone (graders with 2+ such cases); mean_kappa_quadratic_by_grader their mean.

    Args:
        grades: case id -> grader -> grade (from `read_grades`).
        records: results.jsonl records (only the graded ones are kept).

    Returns:
        {"groundedness": {...}, "correctness": {...}}
    """
    by_id = {r.get(Rec.CASE_ID): r for r in records if r.get(Rec.CASE_ID) in grades}
    scale = list(range(SCALE[0], SCALE[1] + 1))
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        human: list[float] = []
        judge: list[float] = []
        n_graded = n_stale = 0
        for cid, by_grader in grades.items():
            h, stale = human_reference(by_grader, kind, by_id.get(cid))
            n_stale += stale
            if h is None:
                continue
            n_graded += 1
            j = _judge_score(by_id.get(cid), kind)
            if j is not None:
                human.append(h)
                judge.append(j)
        n = len(human)
        hg, jg = [to_grade(h) for h in human], [to_grade(j) for j in judge]
        out[kind] = {
            "kappa_quadratic": quadratic_weighted_kappa(hg, jg),
            "kappa": cohen_kappa(hg, jg, scale),
            "spearman": spearman(human, judge),
            "confusion": confusion_matrix(hg, jg, scale),
            "mae": math.fsum(abs(h - j) for h, j in zip(human, judge, strict=True)) / n if n else None,
            "n": n,
            "n_without_judge_score": n_graded - n,
            "n_stale": n_stale,
            "humans": _humans(grades, kind, by_id),
            **_by_grader(grades, kind, by_id),
        }
    return out


def _by_grader(grades: Mapping[str, Mapping[str, Mapping[str, Any]]], kind: str,
               records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The judge against each grader alone, as the graders are held against each other
    (`humans.pairwise_kappa_quadratic`): so the judge's agreement with one person can be read
    beside one person's with another."""
    pairs: dict[str, tuple[list[int], list[int]]] = {}
    for cid, by_grader in grades.items():
        j = _judge_score(records.get(cid), kind)
        if j is None:
            continue
        for who, g in by_grader.items():
            if g.get(kind) is not None and not _stale(g, records.get(cid)):
                h, jj = pairs.setdefault(who, ([], []))
                h.append(int(g[kind]))
                jj.append(to_grade(j))
    rows = [{"grader": who, "n": len(h), "kappa_quadratic": quadratic_weighted_kappa(h, jj)}
            for who, (h, jj) in sorted(pairs.items()) if len(h) >= 2]
    kappas = [r["kappa_quadratic"] for r in rows if r["kappa_quadratic"] is not None]
    return {"by_grader": rows, "mean_kappa_quadratic_by_grader": math.fsum(kappas) / len(kappas) if kappas else None}


ScoreRow = tuple[str, str, float | None, float | None]


def score_row(record: Mapping[str, Any]) -> ScoreRow:
    """What `corrected_means` needs of a record: (case id, sha256 of its answer, its
    groundedness score, its correctness score), a score being any non-null one (rule scores
    included, as the run's means include them)."""
    def score(kind: str) -> float | None:
        v = record.get(kind)
        return float(v["score"]) if isinstance(v, Mapping) and v.get("score") is not None else None

    return (str(record.get(Rec.CASE_ID)), _sha256(record.get("answer") or ""), score(KINDS[0]), score(KINDS[1]))


def _split(grades: Mapping[str, Mapping[str, Mapping[str, Any]]], rows: Iterable[ScoreRow],
           kind: str) -> tuple[list[float], list[float], list[float]]:
    """(h, judge score) of the scored cases with a human value, and the judge scores of the rest."""
    pos = 2 + KINDS.index(kind)
    y: list[float] = []
    f: list[float] = []
    fu: list[float] = []
    for row in rows:
        j = row[pos]
        if j is None:
            continue
        h = human_reference(grades[row[0]], kind, row[1])[0] if row[0] in grades else None
        if h is None:
            fu.append(j)
        else:
            y.append(h)
            f.append(j)
    return y, f, fu


def corrected_means(grades: Mapping[str, Mapping[str, Mapping[str, Any]]], rows: Iterable[ScoreRow], *,
                    confidence: float = 0.95) -> dict[str, Any]:
    """The judge means of a run corrected by its human grades (PPI++, evalkit.metrics.ppi).

    Per kind, over the cases with a score (the population the run's `<kind>_avg` is the mean
    of): labeled = those with a (non-stale) human value h (`human_reference`), unlabeled =
    the rest. `judge` = the raw judge mean over every scored case and its normal interval
    (`classical_mean_ci`); `humans` = the humans' mean over the labeled cases and theirs;
    `estimate`, `ci`, `se`, `lambda` = `ppi_mean_ci(h, judge on labeled, judge on unlabeled)`.
    When every scored case is graded, the estimate is the humans' mean and its interval
    (`lambda` 0). A kind with fewer than 2 labeled cases is None.

    Returns:
        {"method": "ppi++", "confidence": c, "groundedness": {...} | None, "correctness": ...}
    """
    from evalkit.metrics.ppi import classical_mean_ci, ppi_mean_ci

    rows = list(rows)
    out: dict[str, Any] = {"method": "ppi++", "confidence": confidence}
    for kind in KINDS:
        y, f, fu = _split(grades, rows, kind)
        if len(y) < 2:
            out[kind] = None
            continue
        humans = classical_mean_ci(y, confidence=confidence)
        if fu:
            est = ppi_mean_ci(y, f, fu, confidence=confidence)
        else:
            est = {"estimate": humans["mean"], "ci": humans["ci"], "se": humans["se"], "lambda": 0.0,
                   "n_labeled": len(y), "n_unlabeled": 0}
        out[kind] = {**est, "judge": classical_mean_ci(f + fu, confidence=confidence), "humans": humans}
    return out


def next_cases(rows: Iterable[ScoreRow], grades: Mapping[str, Mapping[str, Mapping[str, Any]]], n: int,
               seed: int) -> list[str]:
    """Which cases to grade next: a seeded uniform draw (`sample_indices`) of n scored cases
    (a groundedness or correctness score) that nobody graded yet (stale grades do not
    count), in run order. Uniform on purpose: PPI's interval needs the graded cases to be a
    uniform sample of the scored ones, and an earlier uniform sample plus a uniform draw
    from the rest is one (EVAL.md, "Corrected means")."""
    left = [r[0] for r in rows if (r[2] is not None or r[3] is not None)
            and not any(not _stale(g, r[1]) for g in grades.get(r[0], {}).values())]
    return [left[i] for i in sample_indices(len(left), n, seed)]


def plan_grading(run: RunDir, width: float, *, seed: int = 0, confidence: float = 0.95,
                 max_next: int = 50) -> dict[str, Any]:
    """How many graded cases would narrow each corrected interval to `width`, and which to grade.

    Returns:
        {"width", "confidence", "groundedness": grading_plan(...) | None (under 2 graded
        cases, or nothing left ungraded), "correctness": ..., "n_more": the larger n_more
        (None when a kind cannot reach the width), "next": up to min(n_more, max_next) case
        ids (`next_cases`, seeded)}
    """
    from evalkit.metrics.ppi import grading_plan

    grades = read_grades(run)
    rows = [score_row(r) for r in run.iter_results()]
    out: dict[str, Any] = {"width": width, "confidence": confidence}
    more: list[int | None] = []
    for kind in KINDS:
        y, f, fu = _split(grades, rows, kind)
        out[kind] = grading_plan(y, f, fu, width, confidence=confidence) if len(y) >= 2 and fu else None
        if out[kind] is not None:
            more.append(out[kind]["n_more"])
    out["n_more"] = None if None in more or not more else max(more)
    out["next"] = next_cases(rows, grades, min(out["n_more"] or 0, max_next), seed)
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
        append_grade(run, grade, record=record)
        out.graded.append(cid)
    return out
