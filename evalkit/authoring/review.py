"""Review of generated / auto-labeled candidates into a new version of an eval set (issue 16, item 3).

"Review, not auto-accept": `evalkit generate` writes candidates to their own file; a
person steps through them (`evalkit label --review-auto --eval-set CANDIDATES --into
EVAL_SET`) with accept / edit / reject, and only the accepted cases are appended to a
new version of the eval set. A generated case never reaches a frozen set unreviewed.

This module is the logic, with no terminal I/O (the line prompts are in
`cli/label_eval.py`):

- The review log `<candidates stem>.review.jsonl` sits beside the candidates: one JSON
  line per decision, `{"id", "decision": "accept"|"reject", "case", "edited", "at",
  "reviewer"?}`, appended and fsynced per decision. A killed or quit session loses
  nothing and the next one resumes at the first undecided candidate; a later line for an
  id overrides an earlier one.
- The candidates left: the cases of the candidates file whose `label_source` is in
  `labeling.REVIEW_SOURCES`, in file order, minus the decided ones.
- The new version (`--output`, default `labeling.next_version_path(into)`): the bytes of
  `into` unchanged, then one line per accepted case of the log (log order), without
  `label_source` (a person reviewed it; the tags "generated" / "unretrievable" stay for
  provenance). An id already in `into` is not appended (a duplicate). `into` itself is
  never written; the destination passes `labeling.check_writable` (frozen or locked
  files are refused) and is written atomically. A destination left by an earlier
  session of the same review (its bytes start with `into`'s) is appended to: its lines
  stay byte for byte (a case labeled or edited there since keeps its edits), and the
  accepted cases it does not hold yet go after them, so later sessions extend the same
  new version and never replace what was saved. Any other existing destination is
  refused, unless `force`: then it is copied to a `.bak` (`store.atomic.backup`) and written
  again from `into`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from evalkit.errors import BadConfig, BadEvalSet, Problem

__all__ = [
    "KEEP",
    "Choice",
    "Decision",
    "ReviewSession",
    "ReviewSummary",
    "apply_edits",
    "case_problems",
    "log_path",
    "read_log",
    "run_review",
    "section_preview",
]

DecisionKind = Literal["accept", "reject"]
PREVIEW_CHARS = 600


_SYMLINK = "the review log is a symbolic link; evalkit does not read or write through one: remove it or pass another log"


def log_path(candidates: str | Path) -> Path:
    """`candidates.jsonl` -> `candidates.review.jsonl`, beside it."""
    p = Path(candidates)
    stem = p.name.removesuffix(".jsonl") if p.name.endswith(".jsonl") else p.stem
    return p.with_name(f"{stem}.review.jsonl")


@dataclass(frozen=True)
class Decision:
    """One line of the review log."""

    id: str
    decision: DecisionKind
    case: dict[str, Any] | None
    edited: bool
    at: str
    reviewer: str | None = None
    line: int | None = None  # where it was read from (None for a decision not yet written)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "decision": self.decision, "case": self.case, "edited": self.edited, "at": self.at}
        if self.reviewer:
            out["reviewer"] = self.reviewer
        return out


def read_log(path: str | Path) -> dict[str, Decision]:
    """The review log's decisions by id, the latest per id, in the order of their latest line.

    A missing log holds no decision.

    Raises:
        BadConfig: a line that is not a decision (names the file and the line).
    """
    from evalkit.interop.importers.base import jsonl_items

    path = Path(path)
    if not path.exists():
        return {}
    out: dict[str, Decision] = {}
    problems: list[Problem] = []
    for lineno, obj in jsonl_items(path, problems):
        why = _log_line_problem(obj)
        if why:
            problems.append(Problem(f"not a review decision: {why}", path=str(path), line=lineno))
            continue
        d = Decision(obj["id"], obj["decision"], obj.get("case"), bool(obj.get("edited", False)), str(obj.get("at", "")), obj.get("reviewer"), lineno)
        out.pop(d.id, None)  # a later line overrides, and takes the later place
        out[d.id] = d
    if problems:
        raise BadConfig([*problems, Problem("fix or delete the review log's lines named above, then rerun")])
    return out


def _log_line_problem(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        return "no string `id`"
    if obj.get("decision") not in ("accept", "reject"):
        return f"`decision` must be \"accept\" or \"reject\", got {obj.get('decision')!r}"
    if obj["decision"] == "accept":
        case = obj.get("case")
        if not isinstance(case, dict):
            return "an accept needs the accepted `case` (a JSON object)"
        if case.get("id") != obj["id"]:
            return f"the case's id {case.get('id')!r} is not the decision's id {obj['id']!r}"
    if "edited" in obj and not isinstance(obj["edited"], bool):
        return "`edited` must be true or false"
    return None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dumps(obj: dict[str, Any]) -> bytes:
    # eval_set.jsonl's house style (labeling._dumps): json.dumps defaults, unicode kept.
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def case_problems(case: dict[str, Any]) -> list[str]:
    """Why `case` would not load as an eval set line (schema.EvalCase, plus the eval set's
    own rules: a known category, no supports on an unanswerable case); empty when it would."""
    from pydantic import ValidationError

    from evalkit.evalset.load import case_problems, configured_categories
    from evalkit.schema import BUILTIN_CATEGORIES, EvalCase

    try:
        parsed = EvalCase.model_validate(case)
    except ValidationError as e:
        return [f"{'.'.join(map(str, err['loc'])) or 'case'}: {err['msg']}" for err in e.errors()]
    allowed = set(BUILTIN_CATEGORIES) | set(configured_categories())
    return [f"{p.field}: {p.message}" if p.field else p.message for p in case_problems(parsed, allowed, {})]


KEEP = object()


def apply_edits(
    case: dict[str, Any],
    *,
    question: str | None = None,
    key_facts: Sequence[str] | None = None,
    category: Any = KEEP,
    difficulty: Any = KEEP,
    answerable: bool | None = None,
) -> dict[str, Any]:
    """A copy of `case` with the given fields changed (None / not given = keep).

    `category` / `difficulty` set to None (or "") remove the field. Marking a case
    unanswerable drops its gold supports (an unanswerable case has none).
    """
    out = dict(case)
    if question is not None:
        out["question"] = question
    if key_facts is not None:
        if key_facts:
            out["expected_key_facts"] = list(key_facts)
        else:
            out.pop("expected_key_facts", None)
    for name, value in (("category", category), ("difficulty", difficulty)):
        if value is KEEP:
            continue
        if value in (None, ""):
            out.pop(name, None)
        else:
            out[name] = value
    if answerable is not None:
        out["answerable"] = answerable
        if not answerable:
            out["gold_supports"] = []
            out.pop("required_support_groups", None)
    return out


def section_preview(corpus: Any, support: dict[str, Any], limit: int = PREVIEW_CHARS) -> str | None:
    """The first `limit` characters of a support's section in the notes (raw markdown), or
    None when the file or heading is not there (or the corpus has no outlines)."""
    from evalkit.evalset.anchors import normalize_heading_path

    rel = support.get("rel_path")
    if not rel or corpus is None:
        return None
    found = corpus.find_file(rel)
    outline = corpus.outline(found) if found else None
    if outline is None:
        return None
    chain = outline.find_chain(normalize_heading_path(support.get("heading_path") or ""))
    if chain is None:
        return None
    start, end = outline.spans[chain]
    text = "\n".join(outline.lines[start - 1 : end]).strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " …"


@dataclass
class ReviewSummary:
    """What a review session did.

    Attributes:
        reviewed: decisions made in this session (accepts and rejects).
        accepted / rejected / edited: this session's (edited ones are counted in accepted too).
        skipped: candidates skipped in this session (left undecided).
        left: candidates still undecided after the session (skipped ones included).
        duplicates: accepted ids not appended because `into` already has them.
        appended: accepted cases the new version holds after `into`'s lines (all sessions).
        dest: the new version, or None (nothing accepted, or nothing new).
        changed: True when this session wrote `dest` (False: it already held exactly that).
    """

    reviewed: int = 0
    accepted: int = 0
    rejected: int = 0
    edited: int = 0
    skipped: int = 0
    left: int = 0
    duplicates: list[str] = field(default_factory=list)
    appended: int = 0
    dest: Path | None = None
    changed: bool = False


class ReviewSession:
    """A review of `candidates` into a new version of `into`.

    Opening it checks everything before a question is asked: both files load, `into` and
    the destination are different files, and the destination may be written.

    Args:
        candidates: the candidates file (`evalkit generate --output`).
        into: the eval set the accepted cases are added to (never written).
        output: the new version (default `labeling.next_version_path(into)`).
        results_dir: stored runs (the freeze check).
        reviewer: recorded with each decision.
        log: the review log (default `log_path(candidates)`).
        force: write the destination again from `into` + the accepted cases even when it
            exists (copied to a `.bak` first, named in `backed_up`).

    Raises:
        BadEvalSet: a file that does not load.
        BadConfig: the destination is `into` or the candidates, is frozen or locked, or
            exists with content that does not start with `into`'s (without `force`); a
            broken review log.
    """

    def __init__(
        self,
        candidates: str | Path,
        into: str | Path,
        *,
        output: str | Path | None = None,
        results_dir: str | Path = "results",
        reviewer: str | None = None,
        log: str | Path | None = None,
        force: bool = False,
    ):
        from evalkit.authoring import labeling
        from evalkit.evalset.load import load_eval_set

        self.candidates = Path(candidates)
        self.into = Path(into)
        self.dest = Path(output) if output is not None else labeling.next_version_path(self.into)
        self.results_dir = Path(results_dir)
        self.reviewer = reviewer or None
        self.log = Path(log) if log is not None else log_path(self.candidates)
        self.force = force
        self.backed_up: Path | None = None  # the `.bak` copy a `force` write made
        for other, what in ((self.into, "--into"), (self.candidates, "--eval-set (the candidates)")):
            if self.dest.resolve() == other.resolve():
                raise BadConfig(Problem(f"the new version must be another file than {what}; {self.into} is never written "
                                        f"(default: {labeling.next_version_path(self.into)})", path=str(self.dest), field="--output"))
        cand_set = load_eval_set([self.candidates])
        load_eval_set([self.into])  # it must be a valid (and, when locked, unchanged) eval set
        self._into_bytes = self.into.read_bytes()
        self._into_ids = set(labeling.EvalSetFile(self.into, self._into_bytes).ids)
        raw = labeling.EvalSetFile(self.candidates)
        self._candidates: list[dict[str, Any]] = []
        for case in cand_set.cases:
            if (case.model_extra or {}).get("label_source") in labeling.REVIEW_SOURCES:
                self._candidates.append(raw.case(case.id))
        if self.log.is_symlink():  # read or appended, it would be a file outside this folder
            raise BadConfig(Problem(_SYMLINK, path=str(self.log)))
        self.decisions = read_log(self.log)
        self.changed = False  # did the last write() change the destination
        self.check_dest()

    # ------------------------------------------------------------------ state

    @property
    def candidates_all(self) -> list[dict[str, Any]]:
        """Every reviewable candidate (label_source auto / generated), in file order."""
        return [dict(c) for c in self._candidates]

    def pending(self) -> list[dict[str, Any]]:
        """The candidates not decided yet, in file order."""
        return [dict(c) for c in self._candidates if c["id"] not in self.decisions]

    def in_into(self, case_id: str) -> bool:
        """True when `into` already has a case with this id (an accept would be a duplicate)."""
        return case_id in self._into_ids

    # ------------------------------------------------------------------ decisions

    def accept(self, candidate: dict[str, Any], case: dict[str, Any] | None = None) -> Decision:
        """Accept `candidate`, as `case` when it was edited (its id must stay).

        Raises:
            BadEvalSet: the (edited) case does not validate; nothing is recorded.
        """
        final = dict(case if case is not None else candidate)
        if final.get("id") != candidate["id"]:
            raise BadEvalSet(Problem(f"an edit must keep id {candidate['id']!r}", field="id"))
        problems = case_problems(final)
        if problems:
            raise BadEvalSet([Problem(p, field=candidate["id"]) for p in problems])
        return self._record(Decision(candidate["id"], "accept", final, final != candidate, _now(), self.reviewer))

    def reject(self, candidate: dict[str, Any]) -> Decision:
        """Reject `candidate` (it is never added)."""
        return self._record(Decision(candidate["id"], "reject", None, False, _now(), self.reviewer))

    def _record(self, decision: Decision) -> Decision:
        """Append one line to the log and fsync it before anything else happens."""
        from evalkit.store.atomic import default_mode, folder_lock

        self.log.parent.mkdir(parents=True, exist_ok=True)
        # Never through a symlink (it would append outside the folder the user named), and under
        # the folder's lock, so two reviewers of one candidates file cannot interleave lines.
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        with folder_lock(self.log.parent):
            try:
                fd = os.open(self.log, flags, default_mode())
            except OSError:
                if self.log.is_symlink():
                    raise BadConfig(Problem(_SYMLINK, path=str(self.log))) from None
                raise
            with os.fdopen(fd, "r+b") as f:
                size = os.fstat(fd).st_size
                if size > 0 and os.pread(fd, 1, size - 1) not in (b"\n", b"\r"):
                    f.write(b"\n")
                f.write(_dumps(decision.to_json()) + b"\n")
                f.flush()
                os.fsync(fd)
        self.decisions.pop(decision.id, None)
        self.decisions[decision.id] = decision
        return decision

    # ------------------------------------------------------------------ the new version

    def accepted(self) -> list[dict[str, Any]]:
        """The accepted cases of the log, in log order (the latest decision per id)."""
        return [dict(d.case) for d in self.decisions.values() if d.decision == "accept" and d.case is not None]

    def check_dest(self) -> None:
        """Refuse a destination that is frozen / locked, or that holds something else than a
        review of `into` (its bytes must start with `into`'s)."""
        from evalkit.authoring import labeling
        try:
            labeling.check_writable(self.dest, self.results_dir, source=self.into)
        except BadConfig as e:
            if not self.dest.exists():
                raise
            hint = Problem(f"to add more reviewed candidates after its cases, review into it: --into {self.dest}", path=str(self.dest))
            raise BadConfig([*e.problems, hint]) from None
        if self.dest.exists() and not self.force:
            current = self.dest.read_bytes()
            if not current.startswith(self._base()):
                from evalkit.evalset.lock import next_version_name

                raise BadConfig(Problem(
                    f"already exists and does not start with the lines of {self.into}, so it is not a review of it; "
                    f"nothing written: give another --output (e.g. {self.dest.with_name(next_version_name(self.dest))}), "
                    f"or --force to replace it (the old file is kept as {self.dest.name}.bak)",
                    path=str(self.dest), field="--output"))

    def _base(self) -> bytes:
        base = self._into_bytes
        if base and not base.endswith((b"\n", b"\r")):
            base += b"\n"
        return base

    def _start(self) -> bytes:
        """What the new version starts from: the destination as an earlier session left it
        (it starts with `into`'s bytes: `check_dest`), else `into`'s bytes."""
        if self.force or not self.dest.exists():
            return self._base()
        current = self.dest.read_bytes()
        if current and not current.endswith((b"\n", b"\r")):
            current += b"\n"
        return current

    def render(self) -> tuple[bytes, list[dict[str, Any]], list[str], list[dict[str, Any]]]:
        """(the new version's bytes, the accepted cases it holds after `into`'s lines, the
        duplicate ids left out, the cases among them that are new lines at its end).

        An accepted case the destination already holds (an earlier session's) keeps its
        line as it is there, edits made since included; the others are appended."""
        from evalkit.authoring import labeling

        start = self._start()
        there = set(labeling.EvalSetFile(self.dest, start).ids)
        out = [start]
        appended: list[dict[str, Any]] = []
        duplicates: list[str] = []
        fresh: list[dict[str, Any]] = []
        for case in self.accepted():
            if case["id"] in self._into_ids:
                duplicates.append(case["id"])
                continue
            case.pop("label_source", None)
            if case["id"] in there:
                appended.append(case)
                continue
            problems = case_problems(case)
            if problems:
                line = self.decisions[case["id"]].line
                raise BadConfig([Problem(f"accepted case {case['id']!r} does not validate: {p}", path=str(self.log), line=line) for p in problems])
            appended.append(case)
            fresh.append(case)
            out.append(_dumps(case) + b"\n")
        return b"".join(out), appended, duplicates, fresh

    def write(self) -> tuple[Path | None, list[dict[str, Any]], list[str]]:
        """Write the new version: `into` + every accepted case of the log not already in it.

        A destination an earlier session wrote is appended to (its lines are kept as they
        are, edits made there since included); with `force` an existing destination is
        copied to a `.bak` and written again from `into`. The log is read again under its folder's lock, and the new version written under
        it: two reviewers of one candidates file each end by writing it, and the one who
        writes last keeps the other's accepted cases too.

        Returns:
            (the file written, or None when no case is to be added; the cases appended;
            the duplicate ids left out). A destination that already holds exactly this is
            left as it is (and returned).

        Raises:
            BadConfig: the destination became frozen / locked or taken meanwhile; the log
                broke meanwhile; an accepted case the eval set loader refuses (named at its
                log line; the destination is then left as it was).
            BadEvalSet: the new version does not load for another reason (a bug).
        """
        from contextlib import nullcontext

        from evalkit.store.atomic import backup, folder_lock, write_atomic

        with folder_lock(self.log.parent) if self.log.parent.is_dir() else nullcontext():
            self.decisions = read_log(self.log)
            payload, appended, duplicates, fresh = self.render()
            if not appended:
                return None, appended, duplicates
            self.check_dest()
            self.changed = not (self.dest.exists() and self.dest.read_bytes() == payload)
            first = payload.count(b"\n") - len(fresh) + 1  # the line of the first case appended now
            if self.changed:
                if self.force and self.dest.exists() and self.backed_up is None:
                    self.backed_up = backup(self.dest)
                write_atomic(self.dest, payload, check=lambda tmp: self._check_version(tmp, fresh, first))
                self.force = False  # replaced once: from now on the same review goes on in it
            else:
                self._check_version(self.dest, fresh, first)
        return self.dest, appended, duplicates

    def _check_version(self, path: Path, fresh: list[dict[str, Any]], first: int) -> None:
        """Load the new version at `path` as every command will; a problem on a case
        appended now (`fresh`, from line `first` on) is the log's (a hand-edited or damaged
        line that case_problems passes, such as an unknown field), named at that case's log
        line."""
        from evalkit.evalset.load import read_eval_set

        _, problems = read_eval_set([path])
        if not problems:
            return
        blamed = []
        for p in problems:
            i = (p.line or 0) - first
            if 0 <= i < len(fresh):
                d = self.decisions[fresh[i]["id"]]
                what = f"{p.field}: {p.message}" if p.field else p.message
                blamed.append(Problem(f"accepted case {d.id!r} does not validate: {what}", path=str(self.log), line=d.line))
        if not blamed:
            raise BadEvalSet([Problem(p.message, path=str(self.dest), line=p.line, field=p.field) for p in problems])
        raise BadConfig([*blamed, Problem("fix or delete the review log's lines named above, then rerun")])


@dataclass(frozen=True)
class Choice:
    """What the reviewer chose for one candidate: accept (with `case` when edited), reject,
    skip or quit."""

    action: Literal["accept", "reject", "skip", "quit"]
    case: dict[str, Any] | None = None


def run_review(session: ReviewSession, choose: Callable[[dict[str, Any], int, int], Choice | None]) -> ReviewSummary:
    """Step through the pending candidates, then write the new version.

    Args:
        session: the open review.
        choose: called with (candidate, 1-based position, number pending); returns a Choice,
            or None at the end of input (= quit). An accepted `case` must validate
            (`case_problems`): the caller asks again until it does.

    Returns:
        The summary (the new version is written with everything accepted so far, whether
        the session ran to the end, quit or hit the end of input; Ctrl-C too).
    """
    summary = ReviewSummary()
    pending = session.pending()
    try:
        for n, candidate in enumerate(pending, start=1):
            choice = choose(candidate, n, len(pending))
            if choice is None or choice.action == "quit":
                break
            if choice.action == "skip":
                summary.skipped += 1
            elif choice.action == "reject":
                session.reject(candidate)
                summary.rejected += 1
            else:
                d = session.accept(candidate, choice.case)
                summary.accepted += 1
                summary.edited += d.edited
    finally:
        summary.reviewed = summary.accepted + summary.rejected
        summary.left = len(session.pending())
        summary.dest, appended, summary.duplicates = session.write()
        summary.appended = len(appended)
        summary.changed = summary.dest is not None and session.changed
    return summary
