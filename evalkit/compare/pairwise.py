"""Human pairwise review of two runs' answers: for a case both runs answered, which answer is
better, run a's, run b's, or neither (equal). Kept with the comparison, in run b's folder.

`results/<run_b>/pairwise_review.jsonl`, one line per choice, appended and fsynced under run
b's writer lock (`RunDir.writer`), as human grades are (judges.grades): a killed session loses
at most the choice being written, and a torn last line is cut by the next append. A line:

    {"schema_version": 1, "test_case_id": "q-7", "run_a": "base", "run_b": "new",
     "answer_a_sha256": "…", "answer_b_sha256": "…", "choice": "a" | "b" | "equal",
     "reviewer": "ana", "reviewed_at": "2026-11-29T16:40:00+00:00"}

The hashes are sha256 of each record's `answer` (UTF-8), as `judges.grades.graded_item`
hashes an answer. The last line of a (case, run a, reviewer) wins, so changing one's mind is
appending; reviewers are kept apart (the unnamed reviewer is ""). A choice whose hashes are no
longer those of the two records (either run was answered again) is stale: shown as such, and
left out of the tally (`tally`). `compare_runs` adds the tally to its notes when run b's folder
holds the file (`comparison_note`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import Problem
from evalkit.store.atomic import append_fsynced, read_appended
from evalkit.store.runlog import Rec
from evalkit.store.runs import RunDir, RunFolderError

__all__ = [
    "CHOICES", "JUDGE_FILE", "PAIRWISE_FILE", "WRITER", "answer_sha256", "append_choice", "comparison_note",
    "append_judge_verdicts", "judge_note", "judge_path", "judge_tallies", "latest_choices", "pairwise_path", "read_choice_lines",
    "status_of", "tally",
]

PAIRWISE_FILE = "pairwise_review.jsonl"
SCHEMA_VERSION = 1
CHOICES = ("a", "b", "equal")
HASHES = ("answer_a_sha256", "answer_b_sha256")
# The job named in run b's writer lock while a choice is written.
WRITER = "studio pairwise review"


def pairwise_path(run_b: RunDir) -> Path:
    return run_b.path / PAIRWISE_FILE


def answer_sha256(record: Mapping[str, Any] | None) -> str:
    """sha256 (hex) of a record's answer, UTF-8 (an absent answer hashes as "")."""
    answer = (record or {}).get(Rec.ANSWER)
    return hashlib.sha256((answer if isinstance(answer, str) else "").encode("utf-8", "surrogatepass")).hexdigest()


def _check(line: Mapping[str, Any]) -> list[str]:
    problems = []
    for name in (Rec.CASE_ID, "run_a", "run_b"):
        if not isinstance(line.get(name), str) or not line.get(name):
            problems.append(f"{name}: expected a non-empty string, got {line.get(name)!r}")
    if line.get("choice") not in CHOICES:
        problems.append(f"choice: expected one of {', '.join(CHOICES)}, got {line.get('choice')!r}")
    for h in HASHES:
        v = line.get(h)
        if not (isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)):
            problems.append(f"{h}: expected a sha256 hex digest, got {v!r}")
    if not isinstance(line.get("reviewer", ""), str):
        problems.append(f"reviewer: expected a string, got {line.get('reviewer')!r}")
    return problems


def append_choice(run_b: RunDir, choice: Mapping[str, Any]) -> dict[str, Any]:
    """Append one choice to run b's pairwise_review.jsonl, under run b's writer lock.

    Args:
        run_b: run b's folder (the new run of the comparison).
        choice: {test_case_id, run_a, run_b, answer_a_sha256, answer_b_sha256, choice,
            reviewer?, reviewed_at?}; reviewed_at defaults to now (UTC, ISO 8601).

    Returns:
        The line written.

    Raises:
        ValueError: the line breaks the rules above (a caller's bug).
        RunBusy: another command is changing run b.
        RunFolderError: the OS refused the write (the reason said).
    """
    line = {
        **choice,
        "reviewer": choice.get("reviewer") or "",
        "schema_version": SCHEMA_VERSION,
        "reviewed_at": choice.get("reviewed_at") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    problems = _check(line)
    if line["run_b"] != run_b.run_id:
        problems.append(f"run_b: {line['run_b']!r} is not the run folder written ({run_b.run_id!r})")
    if problems:
        raise ValueError("; ".join(problems))
    path = pairwise_path(run_b)
    try:
        with run_b.writer(WRITER):
            append_fsynced(path, orjson.dumps(line) + b"\n")
    except OSError as e:
        raise RunFolderError(Problem(f"cannot write {PAIRWISE_FILE}: {e.strerror or e}", path=str(path))) from None
    return line


def read_choice_lines(run_b: RunDir) -> list[dict[str, Any]]:
    """Every valid line of run b's pairwise_review.jsonl, in file order; a torn last line
    (killed mid-write) is ignored (`store.atomic.read_appended`).

    Raises:
        InputError: every unreadable or invalid line, with file and line number.
    """
    path = pairwise_path(run_b)
    try:
        return read_appended(path, _check)
    except OSError as e:
        raise RunFolderError(Problem(f"cannot read {PAIRWISE_FILE}: {e.strerror or e}", path=str(path))) from None


def latest_choices(lines: Iterable[Mapping[str, Any]], run_a: str, run_b: str) -> dict[str, dict[str, dict[str, Any]]]:
    """case id -> reviewer -> the last line of that pair, for the comparison of run_a with run_b."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for x in lines:
        if x["run_a"] == run_a and x["run_b"] == run_b:
            out.setdefault(x[Rec.CASE_ID], {})[x.get("reviewer") or ""] = dict(x)
    return out


def status_of(line: Mapping[str, Any] | None, sha_a: str, sha_b: str) -> str:
    """"to review" (no line), "stale" (either answer changed since), or the choice."""
    if line is None:
        return "to review"
    if line["answer_a_sha256"] != sha_a or line["answer_b_sha256"] != sha_b:
        return "stale"
    return str(line["choice"])


def tally(choices: Mapping[str, Mapping[str, Mapping[str, Any]]], answers: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """Count the choices over (case, reviewer), each reviewer's last choice of a case.

    Args:
        choices: `latest_choices`.
        answers: case id -> (sha256 of run a's answer, of run b's) as the runs hold them now;
            a case missing there (no longer in a run) counts as stale.

    Returns:
        {"a": n, "b": n, "equal": n, "stale": n, "cases": cases with a current choice,
         "reviewers": reviewers with a current choice}
    """
    out: dict[str, Any] = {c: 0 for c in CHOICES}
    out["stale"] = 0
    cases: set[str] = set()
    reviewers: set[str] = set()
    for cid, by_reviewer in choices.items():
        sha = answers.get(cid)
        for who, line in by_reviewer.items():
            status = "stale" if sha is None else status_of(line, *sha)
            out[status] += 1
            if status != "stale":
                cases.add(cid)
                reviewers.add(who)
    out["cases"], out["reviewers"] = len(cases), len(reviewers)
    return out


def comparison_note(a: Any, b: Any) -> str | None:
    """compare's line about the human pairwise review of run a (`compare.sources.RunSource`)
    against run b, or None when run b is not a run folder or its folder has no choice about
    run a. Only the reviewed cases' records are read (`RunSource.iter_records(ids=...)`)."""
    if a.run is None or b.run is None or not pairwise_path(b.run).exists():
        return None
    choices = latest_choices(read_choice_lines(b.run), a.run_id, b.run_id)
    if not choices:
        return None
    wanted = set(choices)
    sha_a = {str(r.get(Rec.CASE_ID)): answer_sha256(r) for r in a.iter_records(ids=wanted) if str(r.get(Rec.CASE_ID)) in wanted}
    sha_b = {str(r.get(Rec.CASE_ID)): answer_sha256(r) for r in b.iter_records(ids=wanted) if str(r.get(Rec.CASE_ID)) in wanted}
    answers = {cid: (sha_a[cid], sha_b[cid]) for cid in wanted if cid in sha_a and cid in sha_b}
    t = tally(choices, answers)
    who = f"{t['reviewers']} reviewer{'s' if t['reviewers'] != 1 else ''}"
    stale = f"; {t['stale']} stale (an answer changed since), left out" if t["stale"] else ""
    return (f"human pairwise review ({PAIRWISE_FILE}): run a better {t['a']}, run b better {t['b']}, equal {t['equal']} "
            f"over {t['cases']} case(s), {who}{stale}")


# ---------------------------------------------------------------- the pairwise LLM judge
# Its verdicts are kept as the human choices are, in a file of their own beside them
# (`results/<run_b>/pairwise_judge.jsonl`): the same line (reviewer "judge:<name>"), plus what the
# position probe saw (`first`, `swapped`, `flipped`), the verbosity probe's outcome on the pairs
# that had it (`verbosity`), the prompt version and the reasoning; the
# last line of a (case, run a, judge) wins and a changed answer makes it stale, so `tally`
# counts both files alike. judges/pairwise.py is the judge, rescore/pairwise.py asks it.
JUDGE_FILE = "pairwise_judge.jsonl"
JUDGE_WRITER = "evalkit compare --pairwise-judge"
JUDGE_PREFIX = "judge:"  # a verdict line's reviewer: judge:<provider:model> or judge:heuristic


def judge_path(run_b: RunDir) -> Path:
    return run_b.path / JUDGE_FILE


def append_judge_verdicts(run_b: RunDir, lines: list[dict[str, Any]]) -> None:
    """Append a pairwise judge's verdict lines (rescore.pairwise) to run b's pairwise_judge.jsonl
    at once, under run b's writer lock.

    Raises:
        ValueError: a line breaks the rules of a choice (a caller's bug).
        RunBusy: another command is changing run b; RunFolderError: the OS refused the write.
    """
    problems = [f"line {i}: {p}" for i, line in enumerate(lines, start=1) for p in _check(line)]
    if problems:
        raise ValueError("; ".join(problems))
    if not lines:
        return
    path = judge_path(run_b)
    try:
        with run_b.writer(JUDGE_WRITER):
            append_fsynced(path, b"".join(orjson.dumps(line) + b"\n" for line in lines))
    except OSError as e:
        raise RunFolderError(Problem(f"cannot write {JUDGE_FILE}: {e.strerror or e}", path=str(path))) from None


def judge_tallies(a: Any, b: Any) -> list[dict[str, Any]]:
    """Per pairwise judge that has verdicts about run a against run b in run b's
    pairwise_judge.jsonl: `tally`'s counts (its current verdicts; stale ones left out) plus the
    position probe's `n_flipped` and `flip_rate` (share of current verdicts whose winner changed
    when the order was swapped), and the verbosity probe's `n_verbosity_probed`, `n_prefers_padded`
    and `verbosity_rate` (share of probed cases whose answer padded with itself beat it). [] when
    there is none."""
    if a.run is None or b.run is None or not judge_path(b.run).exists():
        return []
    try:
        lines = read_appended(judge_path(b.run), _check)
    except OSError as e:
        raise RunFolderError(Problem(f"cannot read {JUDGE_FILE}: {e.strerror or e}", path=str(judge_path(b.run)))) from None
    choices = latest_choices(lines, a.run_id, b.run_id)
    if not choices:
        return []
    wanted = set(choices)
    sha_a = {str(r.get(Rec.CASE_ID)): answer_sha256(r) for r in a.iter_records(ids=wanted) if str(r.get(Rec.CASE_ID)) in wanted}
    sha_b = {str(r.get(Rec.CASE_ID)): answer_sha256(r) for r in b.iter_records(ids=wanted) if str(r.get(Rec.CASE_ID)) in wanted}
    answers = {cid: (sha_a[cid], sha_b[cid]) for cid in wanted if cid in sha_a and cid in sha_b}
    judges = sorted({who for by in choices.values() for who in by})
    out = []
    for who in judges:
        mine = {cid: {who: by[who]} for cid, by in choices.items() if who in by}
        t = tally(mine, answers)
        current = [line for cid, by in mine.items() for line in by.values()
                   if cid in answers and status_of(line, *answers[cid]) != "stale"]
        flipped = sum(1 for line in current if line.get("flipped") is True)
        probed = [line["verbosity"] for line in current if line.get("verbosity") in ("original", "padded", "equal")]
        longer = probed.count("padded")
        out.append({"judge": who.removeprefix(JUDGE_PREFIX), **{k: t[k] for k in (*CHOICES, "stale", "cases")},
                    "n_flipped": flipped, "flip_rate": flipped / len(current) if current else None,
                    "n_verbosity_probed": len(probed), "n_prefers_padded": longer,
                    "verbosity_rate": longer / len(probed) if probed else None})
    return out


def judge_note(t: Mapping[str, Any]) -> str:
    """compare's line about one pairwise judge's tally (`judge_tallies`)."""
    stale = f"; {t['stale']} stale (an answer changed since), left out" if t["stale"] else ""
    flips = "" if t["flip_rate"] is None else (
        f"; position probe: {t['n_flipped']} of {t['cases']} verdict(s) flipped when the order was swapped "
        f"({t['flip_rate']:.0%}, counted as equal)")
    longer = "" if t.get("verbosity_rate") is None else (
        f"; verbosity probe: {t['n_prefers_padded']} of {t['n_verbosity_probed']} preferred an answer padded "
        f"with itself ({t['verbosity_rate']:.0%})")
    return (f"pairwise judge {t['judge']} ({JUDGE_FILE}): run a better {t['a']}, run b better {t['b']}, equal "
            f"{t['equal']} over {t['cases']} case(s){flips}{longer}{stale}")
