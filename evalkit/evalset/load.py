"""Eval set loading and validation.

An eval set is JSONL: one case per line, from one file, several files, or a folder of
per-domain files (domain = file stem unless a case says otherwise, for several files or a
file in a `domains/` folder; `resolve_eval_set_paths`). The whole input is
validated before anything runs, and every problem is reported with file, line and field.

Unknown fields are kept (a user's extras survive a rewrite), except a key within a small
edit distance of a known field (`golde_supports`, `rel_paht`): that is a typo that would
silently drop a label, so it is an error that names the field meant.

Also accepted, converted on load:
- B.O.B golden lines (`expected_chunks: [ids]`): each id becomes a `chunk_id` gold
  support; an empty list marks a negative example (answerable: false).

A loaded set keeps its cases as the bytes they were read from, compressed (`StoredCases`):
each line is validated as it is read, and a case is rebuilt when it is read. 100,000
EvalCase models took about 470 MB for a 37 MB file; their compressed lines take 5 MB.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import subprocess
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, overload

import orjson
from pydantic import ValidationError

from evalkit.errors import BadConfig, BadEvalSet, InputError, Problem, did_you_mean
from evalkit.evalset.anchors import support_forms
from evalkit.evalset.lock import eval_set_problem
from evalkit.evalset.turns import TURNS, expand, in_turn
from evalkit.jsonio import loads
from evalkit.project import PROJECT_CONFIG, read_project_config
from evalkit.schema import BUILTIN_CATEGORIES, RECENCY_RULES, CaseConstraints, CaseExpectations, EvalCase, GoldSupport

# StoredCases compresses the lines of about this many bytes together: large enough for
# zlib to find the repeats between cases, small enough to decompress in a fraction of a ms.
_BLOCK_BYTES = 1 << 16
# Difflib ratio at or above which an unknown key is taken for a misspelled known field:
# catches `golde_supports`, `snippet`, `rel_paht`, `tag`; leaves `heading`, `reviewer` alone.
TYPO_CUTOFF = 0.8
# Unknown keys that are never typos: B.O.B's golden field (converted, then kept).
_KNOWN_EXTRAS = frozenset({"expected_chunks"})
# Short or other-tool names of a field, too far from it for difflib (`lang` is 0.67 of `language`).
_SHORT_NAMES = {
    "lang": "language",
    "query_language": "language",
    "doc_lang": "doc_language",
    "document_language": "doc_language",
    "docs_language": "doc_language",
}


class CaseKey(NamedTuple):
    """What selecting cases reads of a case (`--ids`, `--tag`, `--category`); an EvalCase has the same attributes."""

    id: str
    tags: Sequence[str]
    category: str | None


class _Column(Sequence):
    """A read-only sequence computed per item; equal to any sequence of the same items (a list)."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))


class StoredCases(_Column):
    """The validated cases of eval set files, kept as the bytes they were read from.

    Reading a case (`cases[i]`, iterating) rebuilds it from its line with the load's own
    steps (parse, B.O.B conversion, a folder's domain, EvalCase validation), so it is the
    model the load validated; it is a new object each time and not kept. What selection
    reads (`keys`: id, tags, category) is kept per case, shared between equal cases.

    The lines are kept zlib-compressed in blocks of about 64 KB (a 37 MB set in about
    5 MB); the last block read stays decompressed, so reading cases in order (a run, a
    re-scoring) decompresses each block once.
    """

    def __init__(self) -> None:
        self._domains: list[str | None] = []  # per file: the domain a folder gives its cases
        self._file = array("l")  # per case: file number, block number, start and end in the block
        self._block = array("l")
        self._start = array("l")
        self._end = array("l")
        self._blocks: list[bytes] = []
        self._open = bytearray()  # the block being filled, compressed once full
        self._last: tuple[int, bytes] = (-1, b"")  # the block last read, decompressed
        self.ids: list[str] = []
        self._facets: list[tuple[tuple[str, ...], str | None]] = []  # (tags, category) per case
        # A conversation's turn cases (evalset/turns.py): index -> (conversation id, turn).
        self.turns: dict[int, tuple[str, int]] = {}
        self._shared: dict[tuple[tuple[str, ...], str | None], tuple[tuple[str, ...], str | None]] = {}

    def _add_file(self, domain: str | None) -> int:
        self._domains.append(domain)
        return len(self._domains) - 1

    def _add(self, file_no: int, line: bytes, case: EvalCase) -> None:
        facets = (tuple(case.tags), case.category)
        self._file.append(file_no)
        self._block.append(len(self._blocks))
        self._start.append(len(self._open))
        self._open += line
        self._end.append(len(self._open))
        if len(self._open) >= _BLOCK_BYTES:
            self._seal()
        if case.conversation is not None:
            self.turns[len(self.ids)] = (case.conversation.id, case.conversation.turn)
        self.ids.append(case.id)
        self._facets.append(self._shared.setdefault(facets, facets))

    def _seal(self) -> None:
        """Compress the block being filled (after the last case, and whenever one is full)."""
        if self._open:
            self._blocks.append(zlib.compress(self._open, 1))
            self._open = bytearray()

    def _line(self, i: int) -> bytes:
        block = self._block[i]
        number, data = self._last
        if number != block:
            data = zlib.decompress(self._blocks[block])
            self._last = (block, data)
        return data[self._start[i] : self._end[i]]

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> EvalCase: ...

    @overload
    def __getitem__(self, index: slice) -> list[EvalCase]: ...

    def __getitem__(self, index: int | slice) -> EvalCase | list[EvalCase]:
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("case index out of range")
        return self._build(index)

    def __iter__(self) -> Iterator[EvalCase]:
        for i in range(len(self)):
            yield self._build(i)

    def _build(self, i: int) -> EvalCase:
        domain = self._domains[self._file[i]]
        obj = _convert_bob(orjson.loads(self._line(i)))
        if domain is not None and obj.get("domain") is None:
            obj["domain"] = domain
        return EvalCase.model_validate(obj)

    def key(self, i: int) -> CaseKey:
        tags, category = self._facets[i]
        return CaseKey(self.ids[i], tags, category)

    @property
    def keys(self) -> Sequence[CaseKey]:
        return _Keys(self)


class _Keys(_Column):
    def __init__(self, cases: StoredCases) -> None:
        self._cases = cases

    def __len__(self) -> int:
        return len(self._cases)

    def __getitem__(self, index: int) -> CaseKey:  # type: ignore[override]
        return self._cases.key(range(len(self._cases))[index])


class _Locations(_Column):
    """(file path, 1-based line) per case, from a column of file numbers and one of lines."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.file = array("l")
        self.line = array("l")

    def __len__(self) -> int:
        return len(self.line)

    def __getitem__(self, index: int) -> tuple[str, int]:  # type: ignore[override]
        return self.paths[self.file[index]], self.line[index]


@dataclass
class EvalSet:
    """A validated eval set and where it came from.

    Attributes:
        cases: the cases, in file order (a StoredCases when read from files).
        files: per file: path, sha256, git_commit, git_dirty.
        version: sha256 of the set (see `_version`).
        commit_hash: the newest commit touching the set's files; None when untracked.
        warnings: (case index, Problem) for what a valid case asks that scoring cannot
            check (`case_warnings`); said before a run, never a reason not to run.
        recency_rules: case index -> recency_conflict_rule, for the cases with one; empty
            for a set built in code (callers then look at the cases).
        locations: per case (parallel to `cases`), the (file path, 1-based line) it was
            read from; empty for a set built in code. Kept out of EvalCase because
            records dump the case.
        cases_version: sha256 of the cases' ids and questions (`CaseIdentity`): two files
            with the same cases and other gold labels share it, not their `version`.
        gold_forms: the forms its gold supports use (`anchors.SUPPORT_FORMS`): which fields
            of a retrieved chunk scoring these labels reads.
    """

    cases: Sequence[EvalCase]
    files: list[dict[str, Any]] = field(default_factory=list)
    version: str = ""
    cases_version: str = ""
    gold_forms: list[str] = field(default_factory=list)
    commit_hash: str | None = None
    locations: Sequence[tuple[str, int]] = field(default_factory=list)
    # (index of the case, warning): what a case asks that scoring cannot check (`case_warnings`).
    warnings: list[tuple[int, Problem]] = field(default_factory=list)
    # index of the case -> its recency_conflict_rule, for the cases that have one (which
    # judges a run needs is known without rebuilding every case).
    recency_rules: dict[int, str] = field(default_factory=dict)
    _turns: dict[int, tuple[str, int]] | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.cases)

    @property
    def turns(self) -> Mapping[int, tuple[str, int]]:
        """Case index -> (conversation id, 1-based turn) for each turn of a conversation
        (evalset/turns.py); empty for a set of single questions."""
        if isinstance(self.cases, StoredCases):
            return self.cases.turns
        if self._turns is None:  # a set built in code: its cases looked at once
            self._turns = {i: (c.conversation.id, c.conversation.turn) for i, c in enumerate(self.cases)
                           if c.conversation is not None}
        return self._turns

    @property
    def has_conversations(self) -> bool:
        return bool(self.turns)

    def turn_of(self, index: int) -> tuple[str, int] | None:
        """(conversation id, turn) of case `index`, or None for a single question."""
        return self.turns.get(index)

    def location(self, index: int) -> tuple[str | None, int | None]:
        """(path, line) of case `index`, or (None, None) when the set was not read from a file."""
        if index < len(self.locations):
            return self.locations[index]
        return None, None

    @property
    def ids(self) -> Sequence[str]:
        """Each case's id, in order, without rebuilding the cases of a stored set."""
        return self.cases.ids if isinstance(self.cases, StoredCases) else [c.id for c in self.cases]

    @property
    def keys(self) -> Sequence[CaseKey]:
        """Each case's id, tags and category, without rebuilding the cases of a stored set."""
        return self.cases.keys if isinstance(self.cases, StoredCases) else self.cases  # type: ignore[return-value]


class CaseIdentity:
    """The identity of a set's cases apart from their labels, fed one case at a time.

    `cases_version` is the sha256 of the count and the sum (mod 2^256) of each case's sha256
    over `[id, question]` as JSON: a sum holds whatever order the lines are in, in constant
    memory. A relabelled copy of a set (other gold supports, answerable flags, expected
    answers) keeps it while its file hash, the dataset_version, changes. `gold_forms` are the
    gold supports' forms.
    """

    def __init__(self) -> None:
        self._sum = 0
        self._n = 0
        self._forms: set[str] = set()

    def add(self, case: EvalCase | Any) -> None:
        digest = hashlib.sha256(orjson.dumps([str(case.id), case.question])).digest()
        self._sum = (self._sum + int.from_bytes(digest, "big")) % (1 << 256)
        self._n += 1
        for support in case.gold_supports:
            # A GoldSupport's declared fields (all support_forms reads) as its field dict: read
            # as a dict, not through the per-field Mapping check a model fails (half the cost).
            self._forms |= support_forms(support.__dict__ if type(support) is GoldSupport else support)

    @property
    def cases_version(self) -> str:
        return hashlib.sha256(f"{self._n}:{self._sum:064x}".encode()).hexdigest()

    @property
    def gold_forms(self) -> list[str]:
        return sorted(self._forms)


def configured_categories(start: Path | None = None) -> list[str]:
    """Extra categories from `evalkit.toml` (`[eval_set] categories = [...]`) in the working dir."""
    try:
        found = read_project_config(start)
    except BadConfig as e:
        raise BadEvalSet(e.problems) from None
    if found is None:
        return []
    path, data = found
    cats = data.get("eval_set", {}).get("categories", [])
    if not isinstance(cats, list) or not all(isinstance(c, str) for c in cats):
        raise BadEvalSet(Problem("expected a list of strings", path=str(path), field="eval_set.categories"))
    return cats


def sidecar_categories(eval_set_file: Path) -> list[str]:
    """The categories an eval set file declares: `[eval_set] categories` of the evalkit.toml
    in the file's own folder (none when that folder is the working directory: that file is
    the project's, read by `configured_categories`)."""
    folder = eval_set_file.parent
    try:
        if folder.resolve() == Path.cwd().resolve():
            return []
    except OSError:
        return []
    return configured_categories(folder)


# Seed 001 keeps its per-domain golden sets in `docs/eval/domains/<domain>.jsonl` and runs one
# with `--golden docs/eval/domains/cdc.jsonl`: a file in a folder of this name is a domain's.
DOMAINS_FOLDER = "domains"


def resolve_eval_set_paths(paths: Sequence[str | Path]) -> list[tuple[Path, bool]]:
    """Expand folders into their *.jsonl files. Returns (file, names_a_domain) pairs.

    A file's stem is the domain of its cases that name none (`names_a_domain`) when it is
    one of several files (a folder's, or several paths), or a lone file in a `domains`
    folder (seed 001's layout); a lone file elsewhere (`eval_set.jsonl`) names no domain.
    """
    out: list[tuple[Path, bool]] = []
    problems: list[Problem] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(p.glob("*.jsonl"))
            if not files:
                problems.append(Problem("folder holds no .jsonl files", path=str(p)))
            out.extend((f, True) for f in files)
        elif p.is_file():
            out.append((p, False))
        else:
            problems.append(Problem("no such file or folder" + did_you_mean(p), path=str(p), field="--eval-set"))
    if not paths:
        problems.append(Problem("no eval set given", field="--eval-set"))
    if problems:
        raise BadEvalSet(problems)
    if len(out) > 1:
        return [(f, True) for f, _ in out]
    return [(f, named or f.parent.name == DOMAINS_FOLDER) for f, named in out]


def load_eval_set(paths: Sequence[str | Path], extra_categories: Sequence[str] | None = None) -> EvalSet:
    """Load and validate eval set files.

    Args:
        paths: files and/or folders of per-domain .jsonl files.
        extra_categories: categories allowed beyond the seed's six; None reads evalkit.toml.

    Returns:
        The validated EvalSet, cases in file order.

    Raises:
        BadEvalSet: with every problem found (file, line, field); nothing should run. A
            file changed since the `eval_sets.lock` beside it locked it is one
            (`evalset_lock`: a baselined eval set is immutable).
    """
    eval_set, problems = read_eval_set(paths, extra_categories)
    if problems:
        raise BadEvalSet(problems)
    return eval_set


def read_eval_set(
    paths: Sequence[str | Path],
    extra_categories: Sequence[str] | None = None,
    *,
    visit: Callable[[int, EvalCase, str, int], None] | None = None,
) -> tuple[EvalSet, list[Problem]]:
    """Read eval set files and collect every problem instead of raising on them.

    For `evalkit validate`, which reports the file's own problems together with the
    anchor check of the cases that did load. Anything that should run uses
    `load_eval_set`.

    Each line is validated as it is read and only its bytes are kept (`StoredCases`), so
    memory follows the files' size, not the number of models.

    Args:
        paths: files and/or folders of per-domain .jsonl files.
        extra_categories: categories allowed beyond the seed's six; None reads evalkit.toml.
        visit: called with (index, case, path, line) for each case that validated, while
            its model is at hand (the anchor check of `evalkit validate`), so the cases are
            not rebuilt for a second pass.

    Returns:
        (the cases that validated, with their locations; every problem found, in file order).

    Raises:
        BadEvalSet: a path that does not exist, or a bad evalkit.toml (nothing to read).
    """
    allowed = set(BUILTIN_CATEGORIES) | set(
        configured_categories() if extra_categories is None else extra_categories
    )
    files = resolve_eval_set_paths(paths)
    problems: list[Problem] = []
    cases = StoredCases()
    locations = _Locations()
    seen: dict[str, int] = {}  # id -> index of the case that has it first
    warnings: list[tuple[int, Problem]] = []
    recency_rules: dict[int, str] = {}
    file_infos: list[dict[str, Any]] = []
    identity = CaseIdentity()

    for path, names_domain in files:
        digest = hashlib.sha256()
        file_problems = len(problems)
        file_no = cases._add_file(path.stem if names_domain else None)
        # Issue 30: a file may declare its categories in an evalkit.toml beside it.
        file_allowed = allowed | set(sidecar_categories(path))
        locations.paths.append(str(path))
        with open(path, "rb") as f:
            for lineno, raw in _file_lines(f, digest):
                if not raw.strip():
                    continue
                where = {"path": str(path), "line": lineno}
                for line, case, turn in _read_cases(raw, where, problems, domain=path.stem if names_domain else None):
                    named = (lambda found: found) if turn is None else partial(in_turn, index=turn[0], turn=turn[1])
                    problems.extend(named(case_problems(case, file_allowed, where)))
                    warnings.extend((len(cases), w) for w in named(case_warnings(case, where)))
                    if case.recency_conflict_rule is not None:
                        recency_rules[len(cases)] = case.recency_conflict_rule
                    first = seen.get(case.id)
                    if first is not None:
                        at_path, at_line = locations[first]
                        problems.append(Problem(f"id {case.id!r} duplicates {at_path}:{at_line}", field="id", **where))
                    else:
                        seen[case.id] = len(cases)
                    if visit is not None:
                        visit(len(cases), case, str(path), lineno)
                    identity.add(case)
                    cases._add(file_no, line, case)
                    locations.file.append(file_no)
                    locations.line.append(lineno)
        info = {"path": str(path), "sha256": digest.hexdigest(), **_git_info(path)}
        file_infos.append(info)
        if (locked_out := eval_set_problem(path, info["sha256"])) is not None:
            problems.insert(file_problems, locked_out)  # baselined, then changed: first of its file's problems

    cases._seal()
    if not problems and not cases:
        problems.append(Problem("eval set has no cases", path=", ".join(str(p) for p, _ in files)))
    eval_set = EvalSet(
        cases=cases,
        files=file_infos,
        version=_version(file_infos),
        cases_version=identity.cases_version,
        gold_forms=identity.gold_forms,
        commit_hash=_set_commit(files),
        locations=locations,
        warnings=warnings,
        recency_rules=recency_rules,
    )
    return eval_set, problems


def _read_cases(
    raw: bytes, where: dict[str, Any], problems: list[Problem], *, domain: str | None
) -> list[tuple[bytes, EvalCase, tuple[int, dict[str, Any]] | None]]:
    """The cases of one line, each with the bytes StoredCases keeps for it and, for a turn
    of a conversation (evalset/turns.py), (its index, the turn's object); none once the
    line's problems are added. A conversation with a bad turn gives no case at all."""
    try:
        obj = loads(raw, **where)  # the one reader's rules: strict UTF-8, depth, said where
    except InputError as e:
        problems.extend(e.problems)
        return []
    if not isinstance(obj, dict):
        problems.append(Problem(f"expected a JSON object, got {type(obj).__name__}", **where))
        return []
    if TURNS not in obj:
        if "conversation" in obj:
            problems.append(Problem("set by evalkit on each turn of a conversation; write `turns` instead",
                                    field="conversation", **where))
            return []
        case = _read_case(obj, where, problems, domain=domain)
        return [] if case is None else [(raw, case, None)]
    flats, shape = expand(obj, where)
    problems.extend(shape)
    out = []
    for index, flat in flats:
        turn = obj[TURNS][index]
        found: list[Problem] = []
        case = _read_case(flat, where, found, domain=domain)
        # A shared field's problem is found in every turn: said once.
        problems.extend(p for p in in_turn(found, index, turn) if p not in problems)
        if case is not None:
            out.append((orjson.dumps(flat), case, (index, turn)))
    return out if not shape and len(out) == len(flats) else []


def _read_case(obj: dict[str, Any], where: dict[str, Any], problems: list[Problem], *, domain: str | None) -> EvalCase | None:
    """One case's object as an EvalCase, or None once its problems are added: fields the
    model refuses (with the typo hints, which are added either way). `domain`: the folder
    file's stem, for a case that names none."""
    obj = _convert_bob(obj)
    if domain is not None and obj.get("domain") is None:
        obj["domain"] = domain
    typos = _typo_problems(obj, where)
    try:
        case = EvalCase.model_validate(obj)
    except ValidationError as e:
        problems.extend(_pydantic_problems(e, obj, where))
        problems.extend(typos)
        return None
    problems.extend(typos)
    return case


_EOL = re.compile(rb"\r\n|\r|\n")
_READ_BYTES = 1 << 20


def _file_lines(f: BinaryIO, digest: Any) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) of an open file, numbered as `data.splitlines()` numbers
    them, read a megabyte at a time (`digest` sees every byte): a large set is never held whole."""
    lineno, rest = 0, b""
    while True:
        chunk = f.read(_READ_BYTES)
        digest.update(chunk)
        buf = rest + chunk
        if chunk:
            # Up to the last line end; a \r that ends the chunk may be half of \r\n: it waits.
            cut = max(buf.rfind(b"\n"), buf.rfind(b"\r", 0, len(buf) - 1)) + 1
            whole, rest = buf[:cut], buf[cut:]
        else:
            whole, rest = buf, b""
        for start, end in _line_spans(whole):
            lineno += 1
            yield lineno, whole[start:end]
        if not chunk:
            return


def _line_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line of `data`, as `data.splitlines()` cuts them (\\n, \\r\\n and
    \\r end a line), without making every line at once."""
    pos, size = 0, len(data)
    has_cr = b"\r" in data  # rare: a regex finds \r\n and lone \r too
    while pos < size:
        if has_cr:
            m = _EOL.search(data, pos)
            end, after = (m.start(), m.end()) if m is not None else (size, size)
        else:
            end = data.find(b"\n", pos)
            end, after = (end, end + 1) if end >= 0 else (size, size)
        yield pos, end
        pos = after


def _version(file_infos: list[dict[str, Any]]) -> str:
    """sha256 of the file's bytes (`sha256sum eval_set.jsonl`); for several files, sha256 of
    their sha256s in load order. Names do not count: a copied or renamed set keeps its version."""
    if len(file_infos) == 1:
        return file_infos[0]["sha256"]
    return hashlib.sha256("\n".join(f["sha256"] for f in file_infos).encode()).hexdigest()


def _convert_bob(obj: dict[str, Any]) -> dict[str, Any]:
    """B.O.B golden format: expected_chunks -> chunk_id gold supports (negative if empty)."""
    if "expected_chunks" not in obj or "gold_supports" in obj:
        return obj
    chunks = obj["expected_chunks"]
    if not isinstance(chunks, list):
        return obj  # let validation of gold_supports not trip; report the real field below
    out = {k: v for k, v in obj.items() if k != "expected_chunks"}
    out["gold_supports"] = [{"chunk_id": c} for c in chunks]
    out.setdefault("answerable", bool(chunks))
    out["expected_chunks"] = chunks  # kept: unknown fields survive a rewrite
    return out


def _field_names(model: type[EvalCase] | type[GoldSupport]) -> list[str]:
    names = list(model.model_fields)
    names += [f.alias for f in model.model_fields.values() if f.alias]
    return names


# A line's keys: a case's fields (`conversation` is evalkit's own) and a conversation's `turns`.
_CASE_FIELDS = [*(f for f in _field_names(EvalCase) if f != "conversation"), TURNS]
_SUPPORT_FIELDS = _field_names(GoldSupport)
# Snake names first (the messages list them), then seed 004's camelCase spellings.
_CONSTRAINT_FIELDS = [*CaseConstraints.model_fields, "tokenBudget", "topK"]
_EXPECTED_FIELDS = [*CaseExpectations.model_fields, "mustInclude", "mustExclude", "orderedHints"]


def _typo(key: Any, known: list[str]) -> str | None:
    """The known field an unknown key is probably a misspelling of, or None."""
    if not isinstance(key, str) or key in known or key in _KNOWN_EXTRAS:
        return None
    if _SHORT_NAMES.get(key) in known:
        return _SHORT_NAMES[key]
    close = difflib.get_close_matches(key, known, n=1, cutoff=TYPO_CUTOFF)
    if not close:
        # A case slip (`Answerable`) is a typo however long the name.
        close = [k for k in known if k.casefold() == key.casefold()]
    return close[0] if close else None


def _typo_problems(obj: dict[str, Any], where: dict[str, Any]) -> list[Problem]:
    """Unknown keys close to a known field, at the top level and inside each gold support."""
    found: list[tuple[str, str, str]] = []  # (field path, key, meant)
    for key in obj:
        meant = _typo(key, _CASE_FIELDS)
        if meant:
            found.append((key, key, meant))
    constraints = obj.get("constraints")
    if isinstance(constraints, dict):
        for key in constraints:
            meant = _typo(key, _CONSTRAINT_FIELDS)
            if meant:
                found.append((f"constraints.{key}", key, meant))
    supports = obj.get("gold_supports")
    if isinstance(supports, list):
        for i, support in enumerate(supports):
            if not isinstance(support, dict):
                continue
            for key in support:
                meant = _typo(key, _SUPPORT_FIELDS)
                if meant:
                    found.append((f"gold_supports[{i}].{key}", key, meant))
    return [
        Problem(f"unknown field {key!r}; did you mean {meant!r}?", field=loc, **where) for loc, key, meant in found
    ]


def case_problems(case: EvalCase, allowed: set[str], where: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    if case.category is not None and case.category not in allowed:
        problems.append(
            Problem(
                f"unknown category {case.category!r}; expected one of {', '.join(sorted(allowed))} "
                f"(declare more with --categories, or under [eval_set] categories in {PROJECT_CONFIG}, in the working "
                "directory or beside the eval set file)",
                field="category",
                **where,
            )
        )
    if not case.answerable and case.gold_supports:
        problems.append(
            Problem(
                f"answerable is false but {len(case.gold_supports)} gold supports are given "
                "(an unanswerable case has no supports)",
                field="gold_supports",
                **where,
            )
        )
    if case.required_support_groups is not None:
        n = len(case.gold_supports)
        if not case.required_support_groups:
            problems.append(Problem("must hold at least one group, or be null", field="required_support_groups", **where))
        for gi, group in enumerate(case.required_support_groups):
            if not group:
                problems.append(Problem("empty group", field=f"required_support_groups[{gi}]", **where))
            for ii, idx in enumerate(group):
                if not 0 <= idx < n:
                    problems.append(
                        Problem(
                            f"index {idx} is out of range: the case has {n} gold supports (0..{n - 1})",
                            field=f"required_support_groups[{gi}][{ii}]",
                            **where,
                        )
                    )
                elif case.gold_supports[idx].graded_only:
                    problems.append(
                        Problem(
                            f"index {idx} points to a graded_only support, which counts for nDCG only and can never "
                            "satisfy a group; drop it from the group or set graded_only to false",
                            field=f"required_support_groups[{gi}][{ii}]",
                            **where,
                        )
                    )
    collection = (case.model_extra or {}).get("collection")
    if collection is not None and not (isinstance(collection, str) and collection.strip()):
        # seed 002's collection: sent as options.collection under --send-scope collection
        problems.append(
            Problem(f"expected a collection name (a non-empty string), got {_short(collection)}", field="collection", **where)
        )
    graded = [i for i, s in enumerate(case.gold_supports) if s.graded_only]
    if graded and case.recency_conflict_rule is not None:
        problems.append(
            Problem(
                f"recency_conflict_rule cannot be combined with graded_only supports (gold_supports{graded}): "
                "the rule decides which supports an answer must cite",
                field="recency_conflict_rule",
                **where,
            )
        )
    return problems


def case_warnings(case: EvalCase, where: dict[str, Any]) -> list[Problem]:
    """What a valid case asks that scoring cannot check (the run still measures the rest).

    - `cite_newer` needs a `date` on each gold support: with none, `recency.pass` is null
      (never checked); an undated support is neither newer nor older; with one date shared
      by every support none is older, so citing any of them passes.

    Each warning names the case by its id and says what to add.
    """
    if case.recency_conflict_rule != "cite_newer" or not case.gold_supports:
        return []
    undated = [i for i, s in enumerate(case.gold_supports) if s.date is None]
    add = 'add "date": "YYYY-MM-DD" (ISO 8601, the date the note was written or last updated) to '
    at = {**where, "field": "gold_supports"}
    if len(undated) == len(case.gold_supports):
        return [Problem(
            f"warning: case {case.id!r}: recency_conflict_rule cite_newer needs a date on each gold support and "
            f"none has one, so recency.pass stays null (the rule is never checked); {add}"
            + _listed(f"gold_supports[{i}]" for i in undated), **at,
        )]
    if undated:
        return [Problem(
            f"warning: case {case.id!r}: recency_conflict_rule cite_newer: "
            + _listed(f"gold_supports[{i}]" for i in undated)
            + f" {'has' if len(undated) == 1 else 'have'} no date, so cite_newer counts "
            f"{'it' if len(undated) == 1 else 'them'} as neither newer nor older; {add}"
            + ("it" if len(undated) == 1 else "each"), **at,
        )]
    dates = {_instant(s.date) for s in case.gold_supports if s.date}
    if len(case.gold_supports) > 1 and len(dates) == 1:
        return [Problem(
            f"warning: case {case.id!r}: recency_conflict_rule cite_newer: every gold support has the date "
            f"{case.gold_supports[0].date}, so none is older and citing any of them passes; give each note its own date",
            **at,
        )]
    return []


def _instant(value: str) -> datetime:
    # As the recency rule compares dates: a date-time as UTC, a plain date as midnight.
    d = datetime.fromisoformat(value.strip())
    return d.astimezone(timezone.utc).replace(tzinfo=None) if d.tzinfo is not None else d


def _listed(items: Iterator[str] | Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _pydantic_problems(err: ValidationError, obj: dict[str, Any], where: dict[str, Any]) -> list[Problem]:
    problems = []
    for e in err.errors():
        loc = _loc(e["loc"])
        if loc == "answerable" and e["type"] == "missing":
            msg = "required field is missing: set it to true or false (does the corpus hold the answer?)"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "bool_type":
            msg = f"expected a JSON boolean (true/false), got {_short(e.get('input'))}"
        elif loc == "recency_conflict_rule":
            msg = f"must be one of {', '.join(RECENCY_RULES)}, got {_short(e.get('input'))}"
        elif e["type"] == "extra_forbidden":
            msg = "unexpected field"
            if loc.startswith("expected."):
                # `expected` is closed: a misspelt key would otherwise score nothing.
                meant = _typo(loc.removeprefix("expected."), _EXPECTED_FIELDS)
                msg += f"; did you mean {meant!r}?" if meant else f"; expected one of {', '.join(_EXPECTED_FIELDS[:3])}"
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] not in {"value_error", "assertion_error"} and "input" in e:
                msg += f", got {_short(e['input'])}"
        problems.append(Problem(msg, field=loc or None, **where))
    return problems


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def git_output(args: Sequence[str], cwd: Path) -> str | None:
    """`git ARGS` in `cwd`: its stripped stdout, or None when git is missing, fails or hangs.

    The one way evalkit asks git (the eval set's commit here, the checkout's for config.json).
    GIT_OPTIONAL_LOCKS=0: `git status` would otherwise refresh the user's .git/index when its
    stat data is stale, a write outside the run's folders (tests/integration/test_reliability_loop.py).
    """
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _git_info(path: Path) -> dict[str, Any]:
    """The last commit that touched the file, and whether the working copy differs from it."""
    folder = path.resolve().parent
    commit = git_output(["log", "-1", "--format=%H", "--", path.resolve().name], folder)
    if not commit:
        return {"git_commit": None, "git_dirty": None}
    status = git_output(["status", "--porcelain", "--", path.resolve().name], folder)
    return {"git_commit": commit, "git_dirty": bool(status)}


def _set_commit(files: list[tuple[Path, bool]]) -> str | None:
    """The newest commit touching any file of the set; None when any file is untracked."""
    if not files:
        return None
    folder = files[0][0].resolve().parent
    names = [str(p.resolve()) for p, _ in files]
    for name in names:
        if not git_output(["log", "-1", "--format=%H", "--", name], folder):
            return None
    return git_output(["log", "-1", "--format=%H", "--", *names], folder)
