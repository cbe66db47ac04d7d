"""Gold-label maintenance: safe rewrites of an eval set, stale-label checks, fixes, auto-labels.

The non-interactive half of `label_eval.py`; the full-screen labeler sits on the same pieces:

- `EvalSetFile` holds a JSONL eval set as its raw lines. Cases are replaced by id or
  appended, and the file is written atomically (temp file, fsync, rename). Every line
  that was not replaced keeps its exact bytes, so case order, unknown fields, spacing and
  unicode escapes survive, and a session that writes after each case can stop anywhere.
- `check_writable`: the one freeze rule (docs/sample-data.md, "The freeze rule"): a file
  locked in the `eval_sets.lock` beside it (baselined, or `evalkit lock`) is never written;
  `frozen_by` names the stored runs that used a file as it is (information, not a lock).
- `validate_labels` checks every gold support: directly against the notes (anchorcheck,
  the one implementation of "does this anchor exist, and what is the closest one") and
  through the target's own retrieval (the question asked with a large K).
- `plan_fixes` / `apply_fixes` move anchors to anchorcheck's suggestions in a new version.
- `accept_top` labels cases with the target's top N chunks, marked `label_source: auto`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from evalkit.errors import BadConfig, InputError, Problem, TargetError
from evalkit.evalset.anchorcheck import Corpus, check_support, corpus_from_index_stats, corpus_from_vault
from evalkit.evalset.anchors import heading_components, match_support, normalize_heading_path, normalize_rel_path
from evalkit.evalset.load import EvalSet, load_eval_set
from evalkit.evalset.turns import TURNS, expand, reference_history, turn_id
from evalkit.store.atomic import backup
from evalkit.schema import (  # the label sources: in schema, read by the runner too
    AUTO,
    GENERATED,
    REVIEW_SOURCES,
    EvalCase,
)

__all__ = [
    "AUTO",
    "GENERATED",
    "REVIEW_SOURCES",
    "AcceptTopResult",
    "EvalSetFile",
    "Fix",
    "LabelIssue",
    "LabelValidation",
    "accept_top",
    "allowed_categories",
    "anchors_from_chunks",
    "avalidate_labels",
    "apply_fixes",
    "auto_labeled",
    "backup",
    "check_writable",
    "frozen_by",
    "next_version_path",
    "open_version",
    "plan_fixes",
    "validate_labels",
]

DEFAULT_K = 50

IssueKind = Literal["file_gone", "heading_gone", "snippet_gone", "span_gone", "not_retrieved", "ask_failed", "all_stale"]
# anchorcheck's AnchorIssue.field (relative to the support) -> our kind
_KIND_BY_FIELD = {"rel_path": "file_gone", "heading_path": "heading_gone", "start_line": "span_gone", "end_line": "span_gone"}


# --------------------------------------------------------------------------- safe writes


class EvalSetFile:
    """A JSONL eval set held as raw lines, for edits that leave everything else byte-identical.

    Lines that are blank or not a JSON object with a string `id` are kept verbatim and
    cannot be addressed. A replaced case is written as one `json.dumps` line (`", "` and
    `": "` separators, unicode kept) with the line ending of the line it replaces.

    Args:
        path: the file.
        data: its bytes (read from `path` when None).
    """

    def __init__(self, path: str | Path, data: bytes | None = None):
        self.path = Path(path)
        if data is None:
            data = self.path.read_bytes()
        self._lines: list[bytes] = data.splitlines(keepends=True)
        self._index: dict[str, int] = {}
        self._dupes: set[str] = set()
        # A conversation's turns (evalset/turns.py): turn case id -> (line, index in `turns`).
        self._turns: dict[str, tuple[int, int]] = {}
        for i, raw in enumerate(self._lines):
            case_id, n_turns = _addressed(raw)
            if case_id is None:
                continue
            if case_id in self._index:
                self._dupes.add(case_id)
            else:
                self._index[case_id] = i
                for n in range(n_turns):
                    self._turns[turn_id(case_id, n + 1)] = (i, n)
        self._sha = hashlib.sha256(data).hexdigest()  # what is on disk, to detect edits behind our back
        self.dirty = False
        self.backed_up: Path | None = None  # the `.bak` copy a `write(replace=True)` made

    @property
    def ids(self) -> list[str]:
        """Case ids in file order (the first line of a duplicated id); a conversation's line
        gives its turns' ids (`c1#1`, `c1#2`, ...), as the loader reads it."""
        turns: dict[int, list[str]] = {}
        for tid, (line, _) in self._turns.items():
            turns.setdefault(line, []).append(tid)
        return [x for cid, line in self._index.items() for x in turns.get(line, [cid])]

    def line_of(self, case_id: str) -> int:
        """1-based line number of a case (as read_eval_set numbers lines); a turn's is its conversation's."""
        if case_id in self._turns:
            return self._turns[case_id][0] + 1
        return self._where(case_id) + 1

    def case(self, case_id: str) -> dict[str, Any]:
        """A fresh copy of the case's JSON object, key order and unknown fields included; a
        turn's is the turn case the loader makes of it (evalset/turns.py)."""
        if case_id in self._turns:
            line, n = self._turns[case_id]
            return self._turn_case(line, n)[1]
        return orjson.loads(self._lines[self._where(case_id)])

    def _turn_case(self, line: int, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the conversation's line, its turn `n` as a case)."""
        obj = orjson.loads(self._lines[line])
        flats, problems = expand(obj, {"path": str(self.path), "line": line + 1})
        if problems:
            raise InputError(problems)
        return obj, dict(flats[n][1])

    def _replace_turn(self, case_id: str, obj: dict[str, Any]) -> None:
        """A turn case edited (a labeler's gold supports, answerable...) written back into its
        conversation's line: each changed field into the turn's own object, the tags the turn
        adds to the line's as its own `tags`; the line's shared fields are left as they are."""
        line, n = self._turns[case_id]
        conv, old = self._turn_case(line, n)
        turn = conv["turns"][n]
        shared_tags = conv.get("tags") if isinstance(conv.get("tags"), list) else []
        for key in [*old, *(k for k in obj if k not in old)]:
            if key in ("id", "conversation") or obj.get(key) == old.get(key):
                continue
            if key == "tags" and isinstance(obj.get("tags"), list):
                own = [t for t in obj["tags"] if t not in shared_tags]
                if own:
                    turn["tags"] = own
                else:
                    turn.pop("tags", None)
            elif key not in obj:
                turn.pop(key, None)
            else:
                turn[key] = obj[key]
        self.replace(conv["id"], conv)

    def replace(self, case_id: str, obj: dict[str, Any]) -> None:
        """Replace the line of case `case_id` with `obj` (its id must stay the same).

        An `obj` equal to the line's JSON leaves the line's bytes as they are.

        Raises:
            InputError: no such id, an id on several lines, or `obj` changes the id.
        """
        if case_id in self._turns:
            if obj.get("id") != case_id:
                raise InputError(Problem(f"a replacement must keep id {case_id!r}, got {obj.get('id')!r}", path=str(self.path),
                                         line=self._turns[case_id][0] + 1, field="id"))
            self._replace_turn(case_id, obj)
            return
        i = self._where(case_id)
        if obj.get("id") != case_id:
            raise InputError(Problem(f"a replacement must keep id {case_id!r}, got {obj.get('id')!r}", path=str(self.path), line=i + 1, field="id"))
        if case_id in self._dupes:
            raise InputError(Problem(f"id {case_id!r} is on several lines; fix the duplicate first", path=str(self.path), line=i + 1, field="id"))
        old = self._lines[i]
        if orjson.loads(old) == obj:
            return  # same content: keep the line's own spelling
        ending = old[len(old.rstrip(b"\r\n")) :] or b"\n"
        new = _dumps(obj) + ending
        if new != old:
            self._lines[i] = new
            self.dirty = True

    def append(self, obj: dict[str, Any]) -> None:
        """Add a case at the end of the file.

        Raises:
            InputError: the case has no string id, or its id is already in the file.
        """
        case_id = obj.get("id")
        if not isinstance(case_id, str) or case_id in self._index:
            raise InputError(Problem(f"cannot append a case with id {case_id!r} (missing or already in the file)", path=str(self.path), field="id"))
        if self._lines and not self._lines[-1].endswith((b"\n", b"\r")):
            self._lines[-1] += b"\n"
        self._index[case_id] = len(self._lines)
        self._lines.append(_dumps(obj) + b"\n")
        self.dirty = True

    def dumps(self) -> bytes:
        """The file's bytes as they would be written."""
        return b"".join(self._lines)

    def write(self, output: str | Path | None = None, *, adopt: bool = False, replace: bool = False) -> Path:
        """Write atomically to `output` (default: the file itself) and return the path written.

        Writing back over the file refuses when it changed on disk since it was read (or
        last written), so a labeling session never overwrites someone else's edit.
        Writing to another file refuses when that file exists, unless `replace`: then the
        old file is first copied to a free `<name>.bak` (`.bak.1`, ...; see `backup`), and
        `backed_up` names the copy. No labels are ever lost to a write.
        With `adopt`, `output` becomes this document's file: later writes go there.

        Raises:
            InputError: the file changed on disk meanwhile.
            BadConfig: `output` is another file that exists, and `replace` is not set.
            OSError: the OS refused.
        """
        dest = Path(output) if output is not None else self.path
        payload = self.dumps()
        if _same_file(dest, self.path):
            current = hashlib.sha256(self.path.read_bytes()).hexdigest() if self.path.exists() else None
            if current is not None and current != self._sha:
                raise InputError(Problem("changed on disk since it was read; nothing written (rerun to start from the new version)", path=str(self.path)))
            write_bytes_atomic(dest, payload)
            self._sha = hashlib.sha256(payload).hexdigest()
            self.dirty = False
        else:
            if dest.exists() or dest.is_symlink():
                if not replace:
                    raise BadConfig(Problem(f"already exists; nothing written: pass --force to replace it (the old file is kept as "
                                            f"{dest.name}.bak)", path=str(dest), field="--output"))
                self.backed_up = backup(dest)
            write_bytes_atomic(dest, payload)
            if adopt:
                self.path, self._sha, self.dirty = dest, hashlib.sha256(payload).hexdigest(), False
        return dest

    def _where(self, case_id: str) -> int:
        if case_id not in self._index:
            raise InputError(Problem(f"no case with id {case_id!r}", path=str(self.path), field="id"))
        return self._index[case_id]


def _addressed(raw: bytes) -> tuple[str | None, int]:
    """A line's case id (None: not addressable) and how many turns it holds (0: not a
    conversation), from one parse."""
    if not raw.strip():
        return None, 0
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, 0
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        return None, 0
    turns = obj.get(TURNS)
    return obj["id"], len(turns) if isinstance(turns, list) else 0


def _dumps(obj: dict[str, Any]) -> bytes:
    # The house style of eval_set.jsonl (json.dumps defaults), so a rewritten line reads like its neighbours.
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def write_bytes_atomic(path: Path, payload: bytes) -> None:
    """Write `payload` to a temp file next to `path`, fsync it, then os.replace over `path`.

    The file keeps its permission bits when it exists (a new one gets 0666 minus the umask).
    """
    from evalkit.store.atomic import write_atomic

    write_atomic(path, payload)
    try:  # makes the rename durable; some filesystems refuse fsync on a folder
        dfd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def allowed_categories(path: str | Path | None = None) -> list[str]:
    """The categories a case of the eval set file `path` may have, as the loader allows them:
    the built-in ones, the project's (`evalkit.toml` in the working directory) and the file's
    own (`evalkit.toml` beside it)."""
    from evalkit.evalset.load import configured_categories, sidecar_categories
    from evalkit.schema import BUILTIN_CATEGORIES

    extra = [*configured_categories(), *(sidecar_categories(Path(path)) if path is not None else [])]
    return list(dict.fromkeys([*BUILTIN_CATEGORIES, *extra]))


def open_version(source: str | Path, output: str | Path | None, *, force: bool = False) -> tuple[EvalSetFile, Path | None]:
    """The file an interactive session (the labeler, `--new`) edits, and where its first write goes.

    - No `output`, or `output` is `source`: `source`, written in place.
    - `output` does not exist: `source`; the first write creates `output` (then edits it).
    - `output` exists and holds every case id of `source`: it is a version of `source` an
      earlier session of the same command wrote, so the session goes on in it, in place:
      what was saved is edited and appended to, never replaced.
    - `output` exists and is something else: refused, unless `force`: then `source`, and
      the first write replaces `output` after copying it to a `.bak` (EvalSetFile.write).

    Returns:
        (the document, where its first write goes: `output`, or None for in place).

    Raises:
        BadConfig: `output` exists, is not a version of `source`, and `force` is not set.
    """
    src = Path(source)
    if output is None or _same_file(Path(output), src):
        return EvalSetFile(src), None
    dest = Path(output)
    if not dest.exists() or force:
        return EvalSetFile(src), dest
    doc, base = EvalSetFile(dest), EvalSetFile(src)
    missing = [i for i in base.ids if i not in set(doc.ids)]
    if missing:
        raise BadConfig(Problem(
            f"already exists and is not a version of {src}: it lacks {len(missing)} of its case ids (e.g. {missing[0]!r}); "
            f"nothing written: give another --output, pass --eval-set {dest} (without --output) to edit it, or --force to "
            f"start it again from {src} (the old file is kept as {dest.name}.bak)",
            path=str(dest), field="--output"))
    return doc, None


def next_version_path(path: str | Path) -> Path:
    """`eval_set.jsonl` -> `eval_set.v2.jsonl`; `eval_set.v2.jsonl` -> `eval_set.v3.jsonl`."""
    p = Path(path)
    stem = p.name.removesuffix(".jsonl")
    m = re.fullmatch(r"(.*)\.v(\d+)", stem)
    name = f"{m.group(1)}.v{int(m.group(2)) + 1}" if m else f"{stem}.v2"
    return p.with_name(name + ".jsonl")


def frozen_by(path: str | Path, results_dir: str | Path) -> list[str]:
    """Runs that used this file, as it is now, as (part of) their eval set.

    A run's config.json records `eval_set.files[].sha256`; a run folder without a readable
    config.json, or with another shape, is skipped.

    Args:
        path: an eval set file (a missing file is frozen by nothing).
        results_dir: the folder of run folders.

    Returns:
        Run ids, newest first; empty when the file may be edited.
    """
    from evalkit.jsonio import MAX_WRITTEN_DEPTH, read_json
    from evalkit.store.runs import CONFIG_FILE, list_runs

    try:
        sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return []
    found = []
    for run_id in list_runs(Path(results_dir)):
        try:
            # bounded (size, depth): another run's config.json is not a file this command wrote
            cfg = read_json(Path(results_dir) / run_id / CONFIG_FILE, max_depth=MAX_WRITTEN_DEPTH)
        except InputError:
            continue
        files = cfg.get("eval_set", {}).get("files") if isinstance(cfg, dict) and isinstance(cfg.get("eval_set"), dict) else None
        if isinstance(files, list) and any(isinstance(f, dict) and f.get("sha256") == sha for f in files):
            found.append(run_id)
    return found


def check_writable(dest: str | Path, results_dir: str | Path, *, source: str | Path | None = None) -> None:
    """Refuse to write over a frozen eval set file: one locked in the `eval_sets.lock` beside
    it (evalkit.evalset.lock: a baselined file, or one `evalkit lock` froze).

    That is the one freeze rule. A stored run that used the file does not freeze it (it
    did until issue 28: the quick start's first run froze the file every labeling example
    edits): such a run keeps the file's sha256 as its dataset_version, and re-scoring or
    comparing it against the edited file says the version changed.

    Args:
        dest: the file about to be written.
        results_dir: the folder of run folders (kept for callers; the rule needs none).
        source: the file the edit started from (names the suggested new version).

    Raises:
        BadConfig: `dest` is locked; the message names the `--output` to use.
    """
    from evalkit.evalset.lock import check_writable as check_not_locked

    check_not_locked(dest, source=source)  # locked by name, whatever its content now


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class LabelIssue:
    """One stale or doubtful gold label, located by file, line and field.

    Attributes:
        kind: file_gone | heading_gone | snippet_gone | span_gone (the direct look at the
            notes); not_retrieved (no chunk of the target's top K matches the support);
            ask_failed (the target failed on the question); all_stale (an answerable case
            none of whose supports is left).
        stale: True when this fails validation. The direct look is authoritative: when it
            was possible, not_retrieved / ask_failed are warnings about retrieval only.
        suggestion: the closest real value for `field` (anchorcheck's), or None.
        support: index into the case's gold_supports; None for case-level items.
    """

    kind: IssueKind
    stale: bool
    case_id: str
    path: str | None
    line: int | None
    field: str
    message: str
    suggestion: str | None = None
    support: int | None = None

    def problem(self) -> Problem:
        """As a located Problem: `file:line: field: stale|warning: kind: message`."""
        label = "stale" if self.stale else "warning"
        return Problem(f"{label}: {self.kind}: {self.message}", path=self.path, line=self.line, field=self.field)


@dataclass
class LabelValidation:
    """What validate_labels found.

    Attributes:
        eval_set: the loaded set.
        issues: in case order, then support order.
        corpus: the notes looked at directly (None when there was none).
        retrieval_k: K asked of the target; None when no target was asked.
        n_supports: gold supports checked.
    """

    eval_set: EvalSet
    issues: list[LabelIssue]
    corpus: Corpus | None
    retrieval_k: int | None
    n_supports: int

    @property
    def stale(self) -> list[LabelIssue]:
        return [i for i in self.issues if i.stale]

    @property
    def warnings(self) -> list[LabelIssue]:
        return [i for i in self.issues if not i.stale]

    @property
    def ok(self) -> bool:
        return not self.stale


def validate_labels(
    eval_set_paths: Sequence[str | Path],
    *,
    vault: str | Path | None = None,
    target: Any = None,
    k: int = DEFAULT_K,
    concurrency: int = 4,
) -> LabelValidation:
    """Check every gold support of an eval set against the current corpus.

    Sync wrapper of `avalidate_labels` (for an event loop that is already running, await that).
    """
    return asyncio.run(avalidate_labels(eval_set_paths, vault=vault, target=target, k=k, concurrency=concurrency))


async def avalidate_labels(
    eval_set_paths: Sequence[str | Path],
    *,
    vault: str | Path | None = None,
    target: Any = None,
    k: int = DEFAULT_K,
    concurrency: int = 4,
) -> LabelValidation:
    """Check every gold support of an eval set against the current corpus.

    Two looks. Directly at the notes, when a vault is at hand (`vault`, else the
    in-process reference target's vault, else a target whose index stats list its files:
    file existence only), through anchorcheck. And through the target's retrieval, when
    one is given: each answerable case's question asked with `k` and debug, and every
    anchor support matched (anchors.match_support, snippets not required) against the
    retrieved chunks. Finally, an answerable case whose supports are all stale is reported.

    Args:
        eval_set_paths: eval set files and/or folders.
        vault: notes folder for the direct look.
        target: a Target to ask (HttpTarget, ReferenceTarget, ...); None = no retrieval look.
        k: chunks to ask for per question.
        concurrency: questions in flight at once.

    Returns:
        The LabelValidation.

    Raises:
        BadEvalSet: the eval set itself is invalid (every problem listed).
        InputError: the vault does not exist.
    """
    eval_set = load_eval_set(eval_set_paths)
    corpus = await _corpus_for(vault, target)
    retrieved: dict[int, list[dict[str, Any]] | TargetError] = {}
    if target is not None:
        retrieved = await _retrieve(target, eval_set.cases, k, concurrency)

    issues: list[LabelIssue] = []
    n_supports = 0
    direct = corpus is not None and corpus.has_outlines
    for n, case in enumerate(eval_set.cases):
        path, line = eval_set.location(n)
        base = {"case_id": case.id, "path": path, "line": line}
        case_issues: list[LabelIssue] = []
        stale_supports: set[int] = set()
        got = retrieved.get(n)
        if isinstance(got, TargetError):
            case_issues.append(LabelIssue("ask_failed", not direct, field="question", message=f"the target failed on the question ({got}); its retrieval was not checked", **base))
        for i, support in enumerate(case.gold_supports):
            gold = support.model_dump(mode="json", exclude_none=True)
            if not normalize_rel_path(support.rel_path) and support.chunk_id is None:
                continue
            n_supports += 1
            found = False
            if corpus is not None and support.rel_path:
                for a in check_support(gold, corpus):
                    kind = _KIND_BY_FIELD.get(a.field, "snippet_gone")
                    case_issues.append(LabelIssue(kind, True, field=f"gold_supports[{i}].{a.field}", message=a.message, suggestion=a.suggestion, support=i, **base))
                    found = True
            if found:
                stale_supports.add(i)
            elif isinstance(got, list) and not any(match_support(gold, c) for c in got):
                # A chunk_id-only support cannot be looked up in the notes: retrieval is its only check.
                checked = direct and bool(normalize_rel_path(support.rel_path))
                what = _describe(support)
                case_issues.append(
                    LabelIssue(
                        "not_retrieved",
                        not checked,
                        field=f"gold_supports[{i}]",
                        message=f"{what} matches none of the top {k} chunks the target retrieved for the question"
                        + (" (it exists in the notes: a retrieval miss, not a stale label)" if checked else ""),
                        support=i,
                        **base,
                    )
                )
                if not checked:
                    stale_supports.add(i)
        if case.answerable and case.gold_supports and len(stale_supports) == len(case.gold_supports):
            case_issues.append(LabelIssue("all_stale", True, field="gold_supports", message=f"answerable case {case.id!r}: " + ("its only gold support is stale" if len(case.gold_supports) == 1 else f"all {len(case.gold_supports)} gold supports are stale") + "; relabel it", **base))
        issues.extend(case_issues)
    return LabelValidation(eval_set, issues, corpus, k if target is not None else None, n_supports)


def _describe(support: Any) -> str:
    if support.chunk_id is not None and not support.rel_path:
        return f"chunk {support.chunk_id!r}"
    heading = normalize_heading_path(support.heading_path)
    return f"{support.rel_path!r}" + (f" > {heading!r}" if heading else "")


async def _corpus_for(vault: str | Path | None, target: Any) -> Corpus | None:
    """The notes to look at directly: --vault, the reference target's vault, or the target's file list."""
    if vault is not None:
        return corpus_from_vault(vault)
    if target is None:
        return None
    if getattr(target, "name", None) == "reference" and getattr(target, "vault", None) is not None:
        return corpus_from_vault(target.vault)
    stats = await target.index_stats()
    return corpus_from_index_stats(stats, source=f"the {getattr(target, 'name', 'target')} target's file list")


async def _retrieve(
    target: Any, cases: Sequence[EvalCase], k: int, concurrency: int, *, only: set[int] | None = None
) -> dict[int, list[dict[str, Any]] | TargetError]:
    """Each answerable case's retrieved chunks (dicts, in rank order), or the TargetError it got."""
    from evalkit.config import RunSettings
    from evalkit.run.records import build_request

    settings = RunSettings(k=[k])
    gate = asyncio.Semaphore(concurrency)
    out: dict[int, list[dict[str, Any]] | TargetError] = {}

    async def one(n: int, case: EvalCase) -> None:
        async with gate:
            try:
                result = await target.ask(build_request(case, settings, history=reference_history(case)), case_id=case.id)
            except TargetError as e:
                out[n] = e
                return
        debug = result.response.debug
        chunks = [c.model_dump(mode="json") for c in (debug.retrieved_chunks if debug else [])]
        out[n] = sorted(chunks, key=lambda c: c.get("rank") or 0) if all(c.get("rank") for c in chunks) else chunks

    wanted = [(n, c) for n, c in enumerate(cases) if (only is None and c.answerable) or (only is not None and n in only)]
    await asyncio.gather(*(one(n, c) for n, c in wanted))
    return out


# --------------------------------------------------------------------------- fixes


@dataclass(frozen=True)
class Fix:
    """One anchor field moved to anchorcheck's suggestion."""

    path: str
    line: int
    case_id: str
    support: int
    field: Literal["rel_path", "heading_path"]
    old: str | None
    new: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: gold_supports[{self.support}].{self.field}: {self.old!r} -> {self.new!r}"


def plan_fixes(validation: LabelValidation) -> tuple[list[Fix], list[LabelIssue]]:
    """The fixes --fix would make, and the stale items it cannot fix.

    A file_gone or heading_gone item with a suggestion becomes a Fix. When a file moves,
    its heading path is re-checked in the new file and fixed too when it needs it.
    Snippets, spans, retrieval misses and all_stale need a person.

    Returns:
        (fixes in file order, stale items left unfixed).
    """
    corpus = validation.corpus
    fixes: list[Fix] = []
    fixed: set[tuple[str, int]] = set()  # (case_id, support) whose path/heading was planned
    left: list[LabelIssue] = []
    cases = {c.id: c for c in validation.eval_set.cases}
    for issue in validation.stale:
        if issue.kind not in ("file_gone", "heading_gone") or issue.suggestion is None or issue.path is None or issue.line is None:
            if issue.kind != "all_stale":
                left.append(issue)
            continue
        if issue.support is None:  # support-level kinds always carry it
            continue
        support = cases[issue.case_id].gold_supports[issue.support]
        field_name: Literal["rel_path", "heading_path"] = "rel_path" if issue.kind == "file_gone" else "heading_path"
        fixes.append(Fix(issue.path, issue.line, issue.case_id, issue.support, field_name, getattr(support, field_name), issue.suggestion))
        fixed.add((issue.case_id, issue.support))
        if field_name == "rel_path" and corpus is not None:
            moved = support.model_dump(mode="json", exclude_none=True) | {"rel_path": issue.suggestion}
            for a in check_support(moved, corpus):
                if a.field == "heading_path" and a.suggestion is not None:
                    fixes.append(Fix(issue.path, issue.line, issue.case_id, issue.support, "heading_path", support.heading_path, a.suggestion))
    # A case whose supports are all fixed is no longer all-stale; the others still need a person.
    for issue in validation.stale:
        if issue.kind == "all_stale":
            supports = range(len(cases[issue.case_id].gold_supports))
            if not all((issue.case_id, i) in fixed for i in supports):
                left.append(issue)
    return fixes, left


def apply_fixes(fixes: Sequence[Fix], outputs: dict[str, Path], *, force: bool = False, on_backup: Any = None) -> list[Path]:
    """Write each file's fixes into its new version.

    Args:
        fixes: from plan_fixes.
        outputs: source file path (as in Fix.path) -> the new file to write.
        force: replace a new version that exists (copied to a `.bak` first); without it,
            an existing one is refused.
        on_backup: called with (the new version, its `.bak` copy) for each one replaced.

    Returns:
        The files written.

    Raises:
        BadConfig: a new version exists and `force` is not set.
    """
    written = []
    by_file: dict[str, list[Fix]] = {}
    for f in fixes:
        by_file.setdefault(f.path, []).append(f)
    for path, file_fixes in by_file.items():
        doc = EvalSetFile(path)
        for case_id in dict.fromkeys(f.case_id for f in file_fixes):
            obj = doc.case(case_id)
            for f in file_fixes:
                if f.case_id == case_id:
                    obj["gold_supports"][f.support][f.field] = f.new
            doc.replace(case_id, obj)
        written.append(doc.write(outputs[path], replace=force))
        if doc.backed_up is not None and on_backup is not None:
            on_backup(written[-1], doc.backed_up)
    return written


# --------------------------------------------------------------------------- auto labels


def anchors_from_chunks(chunks: Sequence[Any], n: int) -> list[dict[str, Any]]:
    """Anchors {rel_path, heading_path} of the top `n` chunks, de-duplicated, in rank order.

    Chunk ids are never stored: they change with the chunker and the vault id. A chunk under
    the note's top heading alone (`# Home server`) or under none also keeps its line span:
    by the heading-prefix rule `# Home server` matches every chunk of the note, which would
    credit any of them (issue 28); with the span, only chunks that overlap those lines match
    (EVAL.md, "Anchors": the span decides when a chunk has lines, the heading otherwise).
    """
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for chunk in list(chunks)[:n]:
        get = chunk.get if isinstance(chunk, dict) else lambda key, c=chunk: getattr(c, key, None)
        rel, heading = get("rel_path"), normalize_heading_path(get("heading_path") or "")
        if not rel:
            continue
        anchor: dict[str, Any] = {"rel_path": rel, "heading_path": heading}
        start, end = get("start_line"), get("end_line")
        if len(heading_components(heading)) <= 1 and type(start) is int and type(end) is int and 1 <= start <= end:
            anchor.update(start_line=start, end_line=end)
        key = tuple(anchor.values())
        if key in seen:
            continue
        seen.add(key)
        out.append(anchor)
    return out


@dataclass
class AcceptTopResult:
    """What accept_top did: labeled ids, skipped (id, reason), and target failures (id, error)."""

    written: Path | None = None
    backed_up: Path | None = None  # the `.bak` copy of the --output that `force` replaced
    labeled: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


async def accept_top(
    path: str | Path,
    target: Any,
    n: int,
    *,
    ids: Sequence[str] | None = None,
    output: str | Path | None = None,
    results_dir: str | Path = "results",
    k: int | None = None,
    on_case: Any = None,
    force: bool = False,
) -> AcceptTopResult:
    """Label cases with the target's top `n` chunks, marked `"label_source": "auto"`.

    Selected: every answerable case without gold supports, or exactly the `ids` given
    (their supports are replaced). Unanswerable cases are skipped: they have no supports.
    The file is written after every labeled case (atomically), so an interrupted session
    keeps what it did and a rerun goes on with the cases still unlabeled.

    Args:
        path: one eval set file.
        target: the Target to ask.
        n: chunks to take per case (anchors are de-duplicated, so a case may get fewer).
        ids: case ids to (re)label instead of the unlabeled ones.
        output: write here instead of over `path` (it must not exist yet, unless `force`).
        results_dir: where stored runs are (the freeze check).
        k: K to ask for (default n).
        on_case: called with (case_id, anchors) after each case is written (progress).
        force: replace an existing `output`, copied to a `.bak` first (at the first write).

    Returns:
        The AcceptTopResult.

    Raises:
        BadEvalSet: the eval set is invalid.
        BadConfig: the file to write is frozen, `output` already exists (without `force`), an unknown id.
    """
    source = Path(path)
    eval_set = load_eval_set([source])
    dest = Path(output) if output is not None else source
    if output is not None and dest.exists() and not _same_file(dest, source) and not force:
        raise BadConfig(Problem(f"already exists; nothing written: to go on labeling it, pass --eval-set {dest} (without --output); "
                                f"--force replaces it (the old file is kept as {dest.name}.bak)", path=str(dest), field="--output"))
    check_writable(dest, results_dir, source=source)
    doc = EvalSetFile(source)
    if ids:
        known = {c.id for c in eval_set.cases}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise BadConfig([Problem(f"no case with id {i!r} in {source}", field="--ids") for i in unknown])
    result = AcceptTopResult()
    chosen: set[int] = set()
    for idx, case in enumerate(eval_set.cases):
        if ids and case.id not in ids:
            continue
        if not case.answerable:
            if ids:
                result.skipped.append((case.id, "answerable is false: an unanswerable case has no supports"))
            continue
        if case.gold_supports and not ids:
            continue
        chosen.add(idx)
    got = await _retrieve(target, eval_set.cases, k or n, 4, only=chosen)
    for idx in sorted(chosen):
        case = eval_set.cases[idx]
        chunks = got[idx]
        if isinstance(chunks, TargetError):
            result.failed.append((case.id, str(chunks)))
            continue
        anchors = anchors_from_chunks(chunks, n)
        if not anchors:
            result.skipped.append((case.id, "the target retrieved no chunk with a rel_path"))
            continue
        obj = doc.case(case.id)
        obj["gold_supports"] = anchors
        obj["label_source"] = AUTO
        doc.replace(case.id, obj)
        doc.write(dest, adopt=True, replace=force)  # from the first case on, the new version is the file edited
        if doc.backed_up is not None and result.backed_up is None:
            result.backed_up = doc.backed_up
        result.labeled.append(case.id)
        result.written = dest
        if on_case is not None:
            on_case(case.id, anchors)
    return result


def auto_labeled(paths: Sequence[str | Path]) -> list[tuple[str, int, dict[str, Any]]]:
    """Cases marked `"label_source": "auto"` or `"generated"`, as (file, line, case JSON), in file order.

    Raises:
        BadEvalSet: the eval set is invalid.
    """
    eval_set = load_eval_set(paths)
    out = []
    for n, case in enumerate(eval_set.cases):
        if (case.model_extra or {}).get("label_source") in REVIEW_SOURCES:
            path, line = eval_set.location(n)
            out.append((path, line, case.model_dump(mode="json", exclude_none=True)))
    return out


# --------------------------------------------------------------------------- new cases


def fresh_id(existing: Sequence[str]) -> str:
    """The next id in the file's own style: `sv-059` after `sv-001`..`sv-058` (the most
    common `<prefix><number>` pattern, zero-padded as it is), else `case-<n>`."""
    import re
    from collections import Counter

    shapes: Counter[tuple[str, int]] = Counter()
    numbers: dict[tuple[str, int], int] = {}
    for case_id in existing:
        m = re.fullmatch(r"(.*?)(\d+)", case_id)
        if m:
            key = (m.group(1), len(m.group(2)))
            shapes[key] += 1
            numbers[key] = max(numbers.get(key, 0), int(m.group(2)))
    taken = set(existing)
    if shapes:
        (prefix, width), _ = shapes.most_common(1)[0]
        n = numbers[(prefix, width)] + 1
        while f"{prefix}{n:0{width}d}" in taken:
            n += 1
        return f"{prefix}{n:0{width}d}"
    n = len(taken) + 1
    while f"case-{n}" in taken:
        n += 1
    return f"case-{n}"


def new_case(
    path: str | Path,
    *,
    question: str,
    answerable: bool = True,
    category: str | None = None,
    difficulty: str | None = None,
    tags: Sequence[str] = (),
    output: str | Path | None = None,
    results_dir: str | Path = "results",
    force: bool = False,
    on_backup: Any = None,
) -> tuple[str, Path]:
    """Append a new, unlabeled case with a fresh id; returns (id, file written).

    The case is validated as an eval set line before anything is written, and the frozen
    guard applies (write a new version with `output`). An `output` that exists is gone on
    with (`open_version`): it holds the cases added (and labeled) before, and the new case
    goes after them; with `force` it is started again from `path` (the old file kept as a
    `.bak`; `on_backup` is called with (output, the `.bak`)).

    Raises:
        BadConfig / BadEvalSet: a frozen file, an `output` that is not a version of `path`
            (without `force`), or a case that does not validate.
    """
    from pydantic import ValidationError

    from evalkit.errors import BadEvalSet
    from evalkit.schema import EvalCase

    dest = Path(output) if output is not None else Path(path)
    doc, write_to = open_version(path, output, force=force)
    check_writable(dest, results_dir, source=path)
    case: dict[str, Any] = {"id": fresh_id(doc.ids), "question": question.strip(), "answerable": answerable,
                            "gold_supports": [], "tags": [t for t in tags if t]}
    if category:
        allowed = allowed_categories(dest)
        if category not in allowed:
            raise BadEvalSet(Problem(f"unknown category {category!r}; expected one of {', '.join(allowed)}", field="category"))
        case["category"] = category
    if difficulty:
        case["difficulty"] = difficulty
    try:
        EvalCase.model_validate(case)
    except ValidationError as e:
        raise BadEvalSet([Problem(f"{'.'.join(map(str, err['loc']))}: {err['msg']}", field="--new") for err in e.errors()]) from None
    doc.append(case)
    written = doc.write(write_to, adopt=True, replace=force)
    if doc.backed_up is not None and on_backup is not None:
        on_backup(written, doc.backed_up)
    return case["id"], written
