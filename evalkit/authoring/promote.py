"""`evalkit promote`: move chosen questions of a run or a question log into an eval set, to label.

Questions without gold (production questions, a replayed log) are scored by the judges that
need none: context relevance (each retrieved chunk against the question) and groundedness.
The ones worth labeling are chosen by id or by a filter on those per-case scores
(`context_relevance<0.5`) and appended to an eval set as new, unlabeled cases:

- `gold_supports: []`, `answerable: true`, `label_source: "promoted"` and the tag `promoted`:
  the labeler's default queue (answerable cases without gold) takes them, and a person's edit
  there drops `label_source` as it does for auto labels (the tag stays, as `generated` does);
- `promoted_from`: where the question came from (run id or log file, its case id there) and
  the scores it was chosen on.

Writes go through the labeling tools' rules (authoring/labeling.py): `open_version` (an
`--output` version, refused when it exists and is not a version of the eval set, `--force`
keeps the old one as `.bak`), the freeze rule (`check_writable`), atomic writes, untouched
lines byte-identical. A question already in the eval set (whitespace-normalised) is skipped.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, BadEvalSet, InputError, Problem
from evalkit.schema import PROMOTED
from evalkit.store.runlog import Rec

__all__ = [
    "PROMOTED",
    "PROMOTED_TAG",
    "Candidate",
    "Filter",
    "PromoteResult",
    "candidates_from_log",
    "candidates_from_run",
    "parse_filters",
    "promote",
    "select",
]

PROMOTED_TAG = "promoted"
# The per-case scores a filter may name: the judges' verdicts a record holds (`<name>.score`).
SCORES = ("context_relevance", Rec.GROUNDEDNESS, Rec.CORRECTNESS, "answer_quality")
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq, "=": operator.eq,
}
_FILTER = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|==|<|>|=)\s*([-+]?(?:\d+\.?\d*|\.\d+))\s*$")


@dataclass(frozen=True)
class Candidate:
    """One question that may be promoted: its id where it came from, and its judge scores."""

    source_id: str
    question: str
    scores: dict[str, float | None]
    turn: bool = False  # a conversation's turn: its question needs the turns before it


@dataclass(frozen=True)
class Filter:
    """`name op value` on a candidate's score; a candidate without that score never matches."""

    name: str
    op: str
    value: float

    def __call__(self, c: Candidate) -> bool:
        score = c.scores.get(self.name)
        return score is not None and _OPS[self.op](score, self.value)

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value:g}"


@dataclass
class PromoteResult:
    """What promote did: the new case ids (with their source ids), the skipped, the file written."""

    written: Path | None = None
    backed_up: Path | None = None
    promoted: list[tuple[str, str]] = field(default_factory=list)  # (new id, source id)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (source id, why)

    def to_json(self) -> dict[str, Any]:
        return {
            "written": str(self.written) if self.written else None,
            "backed_up": str(self.backed_up) if self.backed_up else None,
            "promoted": [{"id": new, "source_id": src} for new, src in self.promoted],
            "skipped": [{"source_id": src, "reason": why} for src, why in self.skipped],
        }


def parse_filters(values: Sequence[str]) -> list[Filter]:
    """`--where` values ("context_relevance<0.5", several joined by commas or given again: all must hold).

    Raises:
        BadConfig: an expression that is not `name op number`, or a name not in SCORES.
    """
    out = []
    for value in values:
        for part in (p for p in value.split(",") if p.strip()):
            m = _FILTER.match(part)
            if m is None:
                raise BadConfig(Problem(f"cannot read {part.strip()!r}: expected NAME<VALUE (or <=, >, >=, =), "
                                        f"e.g. context_relevance<0.5", field="--where"))
            name = m.group(1)
            if name not in SCORES:
                raise BadConfig(Problem(f"unknown score {name!r}; expected one of {', '.join(SCORES)}", field="--where"))
            out.append(Filter(name, m.group(2), float(m.group(3))))
    return out


def _score(obj: Mapping[str, Any], name: str) -> float | None:
    """A record's `<name>.score`, or a log line's own number under `name`; None when absent."""
    v = obj.get(name)
    if isinstance(v, Mapping):
        v = v.get("score")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def candidates_from_run(results_dir: Path, run_id: str) -> list[Candidate]:
    """The run's records as candidates (a record the target failed has nothing judged, and is one too).

    Raises:
        InputError: an unknown run or unreadable results.
    """
    from evalkit.evalset.turns import record_turn
    from evalkit.store.runs import RunDir

    run = RunDir.open(results_dir, run_id)
    out = []
    for r in run.read_results():
        case = r.get("case") if isinstance(r.get("case"), Mapping) else {}
        question = r.get("question") or case.get("question") or ""
        out.append(Candidate(str(r.get(Rec.CASE_ID) or case.get("id") or ""), str(question),
                             {name: _score(r, name) for name in SCORES}, turn=record_turn(r) is not None))
    return out


def candidates_from_log(path: Path) -> list[Candidate]:
    """A JSONL log of questions: one object a line with `question` (and optionally `id`, and
    scores a system already gave, as numbers or {"score": n} under the SCORES names). A
    line without an id is named by its line number (`line-7`).

    Raises:
        InputError: a missing file, or lines that are not objects with a string `question`.
    """
    from evalkit.jsonio import loads

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(Problem(f"cannot read the log: {e.strerror or e}", path=str(path), field="--log")) from None
    out, problems = [], []
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = loads(raw)
        except Exception:  # noqa: BLE001 - any parse failure is this line's problem
            problems.append(Problem("not JSON", path=str(path), line=n))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("question"), str) or not obj["question"].strip():
            problems.append(Problem("expected an object with a non-empty string `question`", path=str(path), line=n))
            continue
        out.append(Candidate(str(obj.get("id") or f"line-{n}"), obj["question"], {name: _score(obj, name) for name in SCORES}))
    if problems:
        raise InputError(problems)
    return out


def select(
    candidates: Sequence[Candidate], *, ids: Sequence[str] | None = None, filters: Sequence[Filter] = (),
    limit: int | None = None,
    worst_first: bool = False,
) -> list[Candidate]:
    """The candidates named by `ids` (in that order) or else all, kept when every filter holds;
    with `worst_first` (or `limit`), ordered by the first filter's score, worst first (lowest
    for `<`, `<=`, `=`; highest for `>`, `>=`), ties in source order; with `limit`, the first
    `limit` of them.

    Raises:
        BadConfig: an id that is not among the candidates.
    """
    if ids:
        by_id = {c.source_id: c for c in candidates}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise BadConfig([Problem(f"no question with id {i!r} in the source", field="--ids") for i in unknown])
        chosen = [by_id[i] for i in dict.fromkeys(ids)]
    else:
        chosen = list(candidates)
    chosen = [c for c in chosen if all(f(c) for f in filters)]
    if limit is not None or worst_first:
        if filters:
            first = filters[0]
            sign = -1.0 if first.op in (">", ">=") else 1.0
            chosen = sorted(chosen, key=lambda c: sign * float(c.scores[first.name]))  # type: ignore[arg-type]
        chosen = chosen[:limit]
    return chosen


def _normalised(question: str) -> str:
    return " ".join(question.split()).casefold()


def promote(
    eval_set: str | Path,
    chosen: Sequence[Candidate],
    *,
    origin: Mapping[str, Any],
    output: str | Path | None = None,
    force: bool = False,
    results_dir: str | Path = "results",
    tags: Sequence[str] = (),
    filters: Sequence[Filter] = (),
    dry_run: bool = False,
    limit: int | None = None,
) -> PromoteResult:
    """Append `chosen` to `eval_set` (or its `output` version) as unlabeled cases (module docstring).

    Args:
        eval_set: the eval set file to add to.
        chosen: the candidates, in the order to append them.
        origin: what `promoted_from` names as the source: {"run_id": ...} or {"log": ...}.
        output: write a new version here instead (labeling.open_version's rules).
        force: replace an `output` that is not a version of `eval_set` (kept as `.bak`).
        results_dir: where stored runs are (the freeze check).
        tags: more tags for every new case, after `promoted`.
        filters: the filters they were chosen by (recorded in `promoted_from`).
        dry_run: decide everything, write nothing.
        limit: stop after this many are added (a skipped question does not count).

    Raises:
        BadConfig: the file to write is locked, or `output` exists and is not a version of it.
        BadEvalSet: a new case that does not validate.
    """
    from pydantic import ValidationError

    from evalkit.authoring.labeling import check_writable, fresh_id, open_version
    from evalkit.schema import EvalCase

    dest = Path(output) if output is not None else Path(eval_set)
    doc, write_to = open_version(eval_set, output, force=force)
    check_writable(dest, results_dir, source=eval_set)
    known: dict[str, str] = {}
    for case_id in doc.ids:
        q = doc.case(case_id).get("question")
        if isinstance(q, str):
            known.setdefault(_normalised(q), case_id)
    result = PromoteResult()
    case_tags = list(dict.fromkeys([PROMOTED_TAG, *(t for t in tags if t)]))
    for c in chosen:
        if limit is not None and len(result.promoted) >= limit:
            break
        if c.turn:
            result.skipped.append((c.source_id, "a conversation's turn: its question needs the turns before it "
                                                 "(add the conversation by hand)"))
            continue
        if not c.question.strip():
            result.skipped.append((c.source_id, "no question"))
            continue
        seen = known.get(_normalised(c.question))
        if seen is not None:
            result.skipped.append((c.source_id, f"already in the eval set as {seen!r}"))
            continue
        new_id = fresh_id(doc.ids)
        scores = {k: v for k, v in c.scores.items() if v is not None}
        case: dict[str, Any] = {
            "id": new_id, "question": c.question.strip(), "answerable": True, "gold_supports": [], "tags": case_tags,
            "label_source": PROMOTED,
            "promoted_from": {**origin, "id": c.source_id, "scores": scores, "where": [str(f) for f in filters]},
        }
        try:
            EvalCase.model_validate(case)
        except ValidationError as e:
            raise BadEvalSet([Problem(f"{c.source_id}: {'.'.join(map(str, err['loc']))}: {err['msg']}")
                              for err in e.errors()]) from None
        doc.append(case)
        known[_normalised(c.question)] = new_id
        result.promoted.append((new_id, c.source_id))
    if result.promoted and not dry_run:
        result.written = doc.write(write_to, adopt=True, replace=force)
        result.backed_up = doc.backed_up
    return result
