"""One edit of one case from the browser, written the terminal labeler's way, or refused.

An edit names the case's *version*: a hash of the case as the page showed it. The file is
read again, under a per-file lock, before each edit; when the case is no longer that
version (another tab, or the terminal labeler, changed it since the page loaded) the edit is
refused with the case as it is now (`Conflict`), and nothing is written. Otherwise the edit
is made by the terminal labeler's own session methods (`authoring.labeler.LabelSession`:
toggle, add_snippet, shallower, unanswerable, group, drop_support, set_key_facts) and saved through
`authoring.labeling.EvalSetFile` (every other line byte-identical, atomic write, refused
when the file changed on disk since it was read, so a write between the read and the
rename is not overwritten either), after the freeze rule (`check_writable`). A case that
would not load any more (`review.case_problems`) is refused the same way, nothing written.

Versions hash the case's JSON with sorted keys, so two tabs agree on a version whatever the
spelling of the line; editing one case never conflicts with an edit of another.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import InputError, Problem

__all__ = ["OPS", "Conflict", "Edited", "EditRefused", "case_version", "edit_case", "file_lock", "support_warnings"]

OPS = ("toggle", "snippet", "shallower", "answerable", "group", "drop_support", "key_facts")

_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


def file_lock(path: Path) -> threading.Lock:
    """The studio's one lock per eval set file (by its real path): every write to it holds it."""
    with _locks_guard:
        return _locks.setdefault(path.resolve(), threading.Lock())


def case_version(case: Mapping[str, Any]) -> str:
    """The version of a case: the first 16 hex characters of sha256 over its JSON, keys sorted."""
    return hashlib.sha256(orjson.dumps(case, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


class Conflict(InputError):
    """The case changed since the edit's version: `current` is the case now, `version` its version."""

    def __init__(self, path: Path, case_id: str, current: dict[str, Any]):
        super().__init__(Problem(f"case {case_id!r} changed since the page was loaded (in another tab or the terminal); "
                                 "nothing written: look at it as it is now, then redo the edit", path=str(path)))
        self.current = current
        self.version = case_version(current)


class EditRefused(InputError):
    """The edit is not one we make (an unknown op, bad arguments) or would break the case."""


@dataclass
class Edited:
    """A written edit: the case as written, its new version, and whether the file changed."""

    case: dict[str, Any]
    version: str
    written: bool
    warnings: list[str] = field(default_factory=list)


def edit_case(path: Path, case_id: str, version: str, op: str, args: Mapping[str, Any], *, results_dir: Path,
              corpus: Any = None) -> Edited:
    """Make one edit of case `case_id` of the eval set `path`, if it is still at `version`.

    Args:
        path: the eval set file.
        case_id: the case (a conversation's turn: `c1#2`).
        version: `case_version` of the case the edit was made against.
        op: one of OPS. toggle {rel_path, heading_path}: the terminal's space on a chunk
            (selects it as a support, or drops the support covering it); snippet {rel_path,
            heading_path, text}: the terminal's `s` (the text added to the snippets of the support
            covering that place, which is selected first); shallower {rel_path, heading_path}:
            the terminal's `d` (the support covering that place one heading up); answerable {value};
            group (the multi-hop group of all supports, toggled); drop_support {index};
            key_facts {facts: [str]}.
        args: the op's arguments.
        results_dir: the folder of run folders (the freeze rule's argument).
        corpus: the notes, for the warnings shown with the result.

    Returns:
        The Edited case.

    Raises:
        Conflict: the case is not at `version` any more.
        EditRefused: an unknown op, bad arguments, or a case that would not load.
        InputError / BadConfig: no such case, the file is frozen, or it changed on disk meanwhile.
    """
    from evalkit.authoring.labeler import LabelSession
    from evalkit.authoring.labeling import EvalSetFile, check_writable
    from evalkit.authoring.review import case_problems

    with file_lock(path):
        check_writable(path, results_dir)
        doc = EvalSetFile(path)
        current = doc.case(case_id)
        if case_version(current) != version:
            raise Conflict(path, case_id, current)
        session = LabelSession(doc, [case_id])
        _apply(session, op, args)
        problems = case_problems(session.case.obj)
        if problems:
            raise EditRefused([Problem(p, path=str(path), line=doc.line_of(case_id)) for p in problems])
        written = session.save() is not None
        now = doc.case(case_id)
        return Edited(now, case_version(now), written, support_warnings(now, corpus))


def _apply(session: Any, op: str, args: Mapping[str, Any]) -> None:
    """Run the labeler's method for `op` on the session's one case."""
    def text(name: str) -> str:
        value = args.get(name)
        if not isinstance(value, str):
            raise EditRefused(Problem(f"{op}: {name} must be a string, got {type(value).__name__}", field=name))
        return value

    if op == "toggle":
        session.set_chunks([{"rel_path": text("rel_path"), "heading_path": text("heading_path")}])
        session.toggle(0)
    elif op == "snippet":
        session.set_chunks([{"rel_path": text("rel_path"), "heading_path": text("heading_path")}])
        if not text("text").strip():
            raise EditRefused(Problem("snippet: the text is blank", field="text"))
        session.add_snippet(text("text"), 0)
    elif op == "shallower":
        session.set_chunks([{"rel_path": text("rel_path"), "heading_path": text("heading_path")}])
        session.shallower(0)
    elif op == "answerable":
        value = args.get("value")
        if not isinstance(value, bool):
            raise EditRefused(Problem("answerable: value must be true or false", field="value"))
        if (session.case.obj.get("answerable") is not False) != value:
            session.unanswerable()  # the terminal's `u`: a toggle; here only when it changes something
    elif op == "group":
        session.group()
    elif op == "drop_support":
        index = args.get("index")
        if type(index) is not int:
            raise EditRefused(Problem("drop_support: index must be an integer", field="index"))
        session.drop_support(index)
    elif op == "key_facts":
        facts = args.get("facts")
        if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
            raise EditRefused(Problem("key_facts: facts must be a list of strings", field="facts"))
        session.set_key_facts(facts)
    else:
        raise EditRefused(Problem(f"unknown edit {op!r}; one of {', '.join(OPS)}", field="op"))


def support_warnings(case: Mapping[str, Any], corpus: Any, chunks: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """What `evalkit validate --labels` would say of this case's supports: anchorcheck's
    stale anchors (against the notes) and, given a run's chunks, the supports none of them
    matches (the anchor rule, anchors.match_support)."""
    from evalkit.evalset.anchorcheck import check_support
    from evalkit.evalset.anchors import match_support

    out: list[str] = []
    for i, support in enumerate(case.get("gold_supports") or []):
        if not isinstance(support, Mapping):
            continue
        stale = check_support(support, corpus) if corpus is not None else []
        out += [f"gold_supports[{i}].{a.field}: stale: {a.message}" for a in stale]
        if not stale and chunks is not None and not any(match_support(support, c) for c in chunks):
            out.append(f"gold_supports[{i}]: warning: matches none of the run's {len(chunks)} retrieved chunks")
    if case.get("answerable") is not False and not case.get("gold_supports"):
        out.append("gold_supports: answerable, but no support labeled yet")
    return out
