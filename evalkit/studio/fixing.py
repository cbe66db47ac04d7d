"""Batch work on an eval set: anchorcheck's suggested anchors written into a new version, the
way `evalkit validate --labels --fix` writes them (labeling.plan_fixes, labeling.apply_fixes);
and the unlabeled cases labeled with the chatbot's top chunks, as `evalkit label --accept-top`
labels them (labeling.accept_top: in place, marked `label_source: auto`, for review).

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

__all__ = ["Busy", "PlanChanged", "accept_top_now", "fix_view", "plan_digest", "write_fixes"]

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


async def accept_top_now(path: Path, live: Any, n: int, *, results_dir: Path) -> dict[str, Any]:
    """Label every answerable case of `path` without gold supports with the chatbot's top `n`
    chunks, in place (labeling.accept_top, the terminal's `--accept-top N`).

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
        result = await labeling.accept_top(path, await live.target(), n, results_dir=results_dir)
    finally:
        lock.release()
    return {"labeled": result.labeled, "skipped": [list(x) for x in result.skipped], "failed": [list(x) for x in result.failed]}
