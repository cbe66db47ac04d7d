"""Batch work on an eval set: anchorcheck's suggested anchors written into a new version, the
way `evalkit validate --labels --fix` writes them (labeling.plan_fixes, labeling.apply_fixes);
a note's anchors moved after it was renamed (every support whose rel_path is X gets Y: the
same `Fix` list and `apply_fixes`, into the same new version); a category or a tag dropped
from the cases selected in the queue (in place, under the studio's file lock, each case at
the version the page showed); and the unlabeled (or the selected) cases labeled with the
chatbot's top chunks, as `evalkit label --accept-top [--ids]` labels them (labeling.accept_top:
in place, marked `label_source: auto`, for review).

The page lists the fixes planned now; the write names a hash of that list, and the fixes are
planned again before writing: when they differ (the file or the notes changed since the page
loaded), nothing is written (`PlanChanged`). The new version is `labeling.next_version_path`
of the file (eval_set.v2.jsonl), after the freeze rule; one that exists is refused, as
`validate --fix` refuses it without `--force`. The file itself is never written.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from evalkit.errors import InputError

__all__ = ["Busy", "PlanChanged", "accept_top_now", "drop_from_cases", "fix_view", "plan_digest", "rename_plan",
           "rename_view", "write_fixes", "write_rename"]

_lock = threading.Lock()


class PlanChanged(InputError):
    """The fixes planned now are not the ones the page showed."""


def plan_digest(fixes: list[Any]) -> str:
    """A hash of the planned fixes as `validate --fix` prints them (one `str(Fix)` a line)."""
    return hashlib.sha256("\n".join(map(str, fixes)).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _plan(path: Path, vault: Path | None) -> tuple[list[Any], list[Any]]:
    from evalkit.authoring import labeling

    return labeling.plan_fixes(labeling.validate_labels([path], vault=vault))


def fix_view(path: Path, vault: Path | None) -> dict[str, Any]:
    """The fixes `validate --labels --fix --no-retrieval` would write, those it cannot make, and where they go."""
    from evalkit.authoring import labeling

    fixes, left = _plan(path, vault)
    return {"fixes": [str(f) for f in fixes], "left": [str(i.problem()) for i in left], "digest": plan_digest(fixes),
            "dest": labeling.next_version_path(path).name}


def write_fixes(path: Path, vault: Path | None, digest: str, *, results_dir: Path) -> Path:
    """Write the planned fixes into the next version of `path`, if they are still the ones shown.

    Returns:
        The new version written.

    Raises:
        PlanChanged: the plan differs from `digest` (or is empty).
        BadConfig: the new version exists or is frozen.
    """
    from evalkit.authoring import labeling
    from evalkit.errors import Problem

    with _lock:
        fixes, _ = _plan(path, vault)
        if not fixes or plan_digest(fixes) != digest:
            raise PlanChanged(Problem("the fixes planned now are not the ones the page showed (the eval set or the notes "
                                      "changed); nothing written: look at them again", path=str(path)))
        dest = labeling.next_version_path(path)
        labeling.check_writable(dest, results_dir, source=path)
        written = labeling.apply_fixes(fixes, {f.path: dest for f in fixes})
    return written[0]


class Busy(InputError):
    """Another write to the file is under way in the studio."""


async def accept_top_now(path: Path, live: Any, n: int, *, results_dir: Path, ids: list[str] | None = None) -> dict[str, Any]:
    """Label every answerable case of `path` without gold supports (or exactly the cases `ids`,
    their supports replaced) with the chatbot's top `n` chunks, in place (labeling.accept_top,
    the terminal's `--accept-top N [--ids ...]`).

    The studio's lock of the file is taken without waiting (an edit meanwhile would make
    accept_top's next write refuse, since the file changed on disk: nothing is lost either way).

    Returns:
        {"labeled": [ids], "skipped": [[id, why]], "failed": [[id, why]]}.

    Raises:
        Busy: another studio write to the file is under way.
        BadConfig / BadEvalSet: as accept_top (a frozen file, an invalid eval set).
    """
    from evalkit.authoring import labeling
    from evalkit.errors import Problem
    from evalkit.studio.editing import file_lock

    lock = file_lock(path)
    if not lock.acquire(blocking=False):  # never wait in the event loop for a thread's lock
        raise Busy(Problem("another write to this eval set is under way; try again", path=str(path)))
    try:
        result = await labeling.accept_top(path, await live.target(), n, results_dir=results_dir, ids=ids or None)
    finally:
        lock.release()
    return {"labeled": result.labeled, "skipped": [list(x) for x in result.skipped], "failed": [list(x) for x in result.failed]}


# ---------------------------------------------------------------- a note renamed


def rename_plan(path: Path, old: str, new: str) -> list[Any]:
    """The `Fix`es (labeling.Fix, field rel_path) moving every gold support of `path` whose
    rel_path is `old` (compared as anchors compare paths: normalize_rel_path) to `new`, in file order."""
    from evalkit.authoring.labeling import EvalSetFile, Fix
    from evalkit.evalset.anchors import normalize_rel_path

    doc = EvalSetFile(path)
    want = normalize_rel_path(old)
    fixes = []
    for case_id in doc.ids:
        for i, support in enumerate(doc.case(case_id).get("gold_supports") or []):
            rel = support.get("rel_path") if isinstance(support, dict) else None
            if isinstance(rel, str) and normalize_rel_path(rel) == want and rel != new:
                fixes.append(Fix(path=str(path), line=doc.line_of(case_id), case_id=case_id, support=i, field="rel_path",
                                 old=rel, new=new))
    return fixes


def rename_view(path: Path, notes: list[str], old: str, new: str) -> dict[str, Any]:
    """The rename page: the rel_paths the gold supports name (those not among the notes
    first: a renamed note's old name is one of them), the notes to move them to, and the plan."""
    from evalkit.authoring import labeling
    from evalkit.authoring.labeling import EvalSetFile

    doc = EvalSetFile(path)
    used: dict[str, int] = {}
    for case_id in doc.ids:
        for support in doc.case(case_id).get("gold_supports") or []:
            rel = support.get("rel_path") if isinstance(support, dict) else None
            if isinstance(rel, str):
                used[rel] = used.get(rel, 0) + 1
    known = set(notes)
    sources = sorted(used, key=lambda r: (r in known, r))
    fixes = rename_plan(path, old, new) if old and new in known else []
    return {"sources": [{"rel_path": r, "n": used[r], "missing": r not in known} for r in sources], "notes": notes,
            "old": old, "new": new, "fixes": [str(f) for f in fixes], "digest": plan_digest(fixes),
            "dest": labeling.next_version_path(path).name}


def write_rename(path: Path, notes: list[str], old: str, new: str, digest: str, *, results_dir: Path) -> Path:
    """Write the rename's fixes into the next version of `path` (as write_fixes), if they are
    still the ones shown and `new` is a note of the vault.

    Raises:
        PlanChanged: the plan differs from `digest` (or is empty).
        InputError: `new` is not a note.
        BadConfig: the new version exists or is frozen.
    """
    from evalkit.authoring import labeling
    from evalkit.errors import Problem

    if new not in notes:
        raise InputError(Problem(f"{new!r} is not a note of the vault: anchors are moved to a note that exists", field="new"))
    with _lock:
        fixes = rename_plan(path, old, new)
        if not fixes or plan_digest(fixes) != digest:
            raise PlanChanged(Problem("the supports to move now are not the ones the page showed (the eval set changed); "
                                      "nothing written: look at them again", path=str(path)))
        dest = labeling.next_version_path(path)
        labeling.check_writable(dest, results_dir, source=path)
        written = labeling.apply_fixes(fixes, {str(path): dest})
    return written[0]


# ---------------------------------------------------------------- a category or a tag dropped


def drop_from_cases(path: Path, versions: dict[str, str], *, category: str | None = None, tag: str | None = None,
                    results_dir: Path) -> dict[str, Any]:
    """Drop the category `category` (the field, when it is that one) or the tag `tag` from the
    cases `versions` names, in place, if every one is still at the version the page showed.

    A conversation's turn keeps what it shares with its conversation's line (a category or
    tag set on the line, not on the turn): those are reported as kept.

    Returns:
        {"changed": [ids], "kept": [ids that still have it], "written": bool}

    Raises:
        Conflict: a case changed since the page showed it (nothing written).
        InputError / BadConfig: no such case, neither or both of category and tag, a frozen
            file, the file changed on disk meanwhile, the OS refused the write.
    """
    from evalkit.authoring.labeling import EvalSetFile, check_writable
    from evalkit.errors import Problem
    from evalkit.studio.editing import Conflict, case_version, file_lock

    if (category is None) == (tag is None) or not versions:
        raise InputError(Problem("drop one category or one tag from at least one case", field="drop"))

    def has(case: dict[str, Any]) -> bool:
        if category is not None:
            return case.get("category") == category
        return isinstance(case.get("tags"), list) and tag in case["tags"]

    with file_lock(path):
        check_writable(path, results_dir)
        doc = EvalSetFile(path)
        for case_id, version in versions.items():
            current = doc.case(case_id)
            if case_version(current) != version:
                raise Conflict(path, case_id, current)
        touched = []
        for case_id in versions:
            obj = doc.case(case_id)
            if not has(obj):
                continue
            if category is not None:
                obj.pop("category")
            else:
                obj["tags"] = [t for t in obj["tags"] if t != tag]
            doc.replace(case_id, obj)
            touched.append(case_id)
        written = doc.dirty
        if written:
            try:
                doc.write()
            except OSError as e:
                raise InputError(Problem(f"cannot write: {e.strerror or e}", path=str(path))) from None
        kept = [i for i in touched if has(doc.case(i))]
    return {"changed": [i for i in touched if i not in kept], "kept": kept, "written": written}
