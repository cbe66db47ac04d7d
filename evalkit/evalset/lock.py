"""Baselined eval sets are immutable: the `eval_sets.lock` manifest (issue 14 item 6).

Once a baseline run exists for an eval set file, its content is fixed: a changed question
or anchor would make the runs before and after incomparable. To evolve the set, copy it
to the next version (`eval_set.v1.jsonl` -> `eval_set.v2.jsonl`), edit that and baseline
it (seed 004, "Dataset Versioning").

The manifest sits beside the files it locks, is committed with them, and maps a file
*name* to the sha256 of the bytes that were baselined:

    {"eval_sets": {"eval_set.v1.jsonl": {"cases": 120, "locked_at": "2025-01-01T00:00:00Z",
                                         "run_id": "20250101-...", "sha256": "1a2b..."}},
     "schema_version": 1}

(JSON, keys sorted, two-space indent, trailing newline, written atomically, and read, changed
and rewritten under the folder's flock, so parallel writers never lose each other's entries.) The name is
what is locked: a file with that name and other bytes is refused when read
(`eval_set_problem`, which `dataset.read_eval_set` reports with the file's other problems,
so every script that loads an eval set refuses it; `check_eval_set` raises it), and a
writer (the labeler, `evalkit import`) refuses to write a locked name at all
(`check_writable`). No manifest beside a file: nothing is checked.

Locks are added by `evalkit lock PATH...`, and by run_eval: a finished run of a
versioned file (`*.v<N>.jsonl`) locks it with its run id, and a run gated against
`--baseline RUN` locks its files with that run's id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from evalkit.errors import BadConfig, BadEvalSet, InputError, Problem
from evalkit.jsonio import loads, read_bytes
from evalkit.store.atomic import folder_lock, write_atomic


class LoadedFiles(Protocol):
    """What `lock_baselined` reads of a loaded eval set (`dataset.EvalSet` is one): its files
    with their sha256, and each case's (file, line). A protocol, so that this module, which
    the loader imports, does not import the loader back."""

    files: list[dict[str, Any]]
    locations: list[tuple[str, int]]


__all__ = [
    "LOCK_NAME",
    "LoadedFiles",
    "LockEntry",
    "check_eval_set",
    "check_writable",
    "eval_set_problem",
    "is_versioned",
    "lock_baselined",
    "lock_eval_set",
    "locked",
    "manifest_path",
    "manifest_status",
    "next_version_name",
    "read_manifest",
    "unlock_eval_set",
]

LOCK_NAME = "eval_sets.lock"
SCHEMA_VERSION = 1
# Hindsight's convention: `assistant-baseline.v1.jsonl`.
_VERSIONED = re.compile(r"(?P<stem>.+)\.v(?P<n>\d+)\.jsonl")
_SHOWN = 8  # hex digits of a sha256 shown in messages


@dataclass(frozen=True)
class LockEntry:
    """One baselined eval set file, as the manifest records it.

    Attributes:
        name: the file's name (no folder): the key in the manifest.
        sha256: hex sha256 of the file's bytes when it was locked.
        locked_at: when it was locked, UTC ISO 8601 (`2025-01-01T00:00:00Z`).
        run_id: the baseline run, when a run locked it (or `evalkit lock --run-id`).
        cases: non-blank lines (cases) in the file when it was locked.
    """

    name: str
    sha256: str
    locked_at: str
    run_id: str | None = None
    cases: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "name"}


def manifest_path(path: str | Path) -> Path:
    """The manifest that governs eval set file `path`: `eval_sets.lock` in its folder."""
    return Path(path).parent / LOCK_NAME


def is_versioned(path: str | Path) -> bool:
    """True for a file named like `eval_set.v1.jsonl` (what run_eval locks by itself)."""
    return _VERSIONED.fullmatch(Path(path).name) is not None


def read_manifest(folder: str | Path) -> dict[str, LockEntry]:
    """The entries of `folder/eval_sets.lock`, by file name; empty when there is none.

    Raises:
        BadConfig: the manifest is not valid JSON or not of the shape above.
    """
    problem, entries = _read(Path(folder) / LOCK_NAME)
    if problem is not None:
        raise BadConfig(problem)
    return entries


def locked(path: str | Path) -> LockEntry | None:
    """The manifest's entry for file `path` (by its name), or None when it is not locked.

    Raises:
        BadConfig: a broken manifest.
    """
    return read_manifest(Path(path).parent).get(Path(path).name)


def eval_set_problem(path: str | Path, sha256: str | None = None) -> Problem | None:
    """Why file `path` may not be read as an eval set any more, or None when it may.

    It may not when the manifest beside it locks its name with another sha256, or the
    manifest is broken. Costs one `stat` when there is no manifest.

    Args:
        path: the eval set file.
        sha256: the hex sha256 of its bytes, when the caller has it (else the file is read).
    """
    lock = manifest_path(path)
    if not lock.is_file():
        return None
    problem, entries = _read(lock)
    return problem or _changed(path, entries.get(Path(path).name), sha256)


def check_eval_set(path: str | Path, sha256: str | None = None) -> None:
    """Refuse an eval set file whose name is locked with another sha256.

    Args:
        path: the eval set file.
        sha256: the hex sha256 of its bytes, when the caller has it (else the file is read).

    Raises:
        BadEvalSet: it changed since it was baselined (the message names the next version).
        BadConfig: the manifest beside it is broken.
    """
    if not manifest_path(path).is_file():
        return
    problem = _changed(path, locked(path), sha256)
    if problem is not None:
        raise BadEvalSet(problem)


def check_writable(path: str | Path, *, source: str | Path | None = None) -> None:
    """Refuse to write eval set file `path` when its name is locked, whatever the new content.

    Args:
        path: the file about to be written.
        source: the file the new content came from (names the suggested new version).

    Raises:
        BadConfig: `path` is locked (the message names the next version), or the manifest
            beside it is broken.
    """
    entry = locked(path)
    if entry is None:
        return
    by = f" by run {entry.run_id}" if entry.run_id else ""
    suggestion = _next(source if source is not None and Path(source).name != Path(path).name else path)
    raise BadConfig(
        Problem(
            f"baselined{by} ({manifest_path(path)}): a baselined eval set is immutable, nothing written; "
            f"write to a new version instead (--output {suggestion}), or `evalkit lock --remove {path}` to "
            "unlock it, which makes runs before and after incomparable",
            path=str(path),
        )
    )


def lock_eval_set(
    path: str | Path, run_id: str | None = None, *, sha256: str | None = None, cases: int | None = None
) -> LockEntry:
    """Lock eval set file `path`: record its name and sha256 in the manifest beside it.

    A name already locked with the same sha256 is confirmed as it is (its entry, run id
    and time unchanged, nothing written).

    Args:
        path: the eval set file.
        run_id: the baseline run, recorded for people reading the manifest.
        sha256: the bytes' hex sha256 to lock, when the caller read them (a run locks what
            it used); default: the file's as it is now.
        cases: its number of cases; default: its non-blank lines (when `sha256` is not given).

    Returns:
        The entry, as it is now in the manifest.

    Raises:
        BadEvalSet: the name is locked with another sha256 (the message names the next version).
        BadConfig: the manifest is broken.
        OSError: the file cannot be read, or the manifest not written.
    """
    path = Path(path)
    if sha256 is None:
        data = path.read_bytes()
        sha256 = _sha256(data)
        if cases is None:
            cases = sum(1 for line in data.splitlines() if line.strip())
    # Read, change and write the manifest under the folder's lock: two runs finishing at once
    # (or parallel `evalkit lock`s) would each write back what they read, losing the other's entry.
    with folder_lock(path.parent):
        entries = read_manifest(path.parent)
        current = entries.get(path.name)
        if current is not None:
            if current.sha256 == sha256:
                return current
            raise BadEvalSet(_changed(path, current, sha256))  # type: ignore[arg-type]
        entry = LockEntry(path.name, sha256, _now(), run_id, cases)
        entries[path.name] = entry
        _write(path.parent / LOCK_NAME, entries)
    return entry


def unlock_eval_set(path: str | Path) -> LockEntry:
    """Remove file `path`'s name from the manifest beside it (the file need not exist).

    Returns:
        The entry removed.

    Raises:
        BadConfig: the name is not locked, or the manifest is broken.
    """
    path = Path(path)
    with folder_lock(path.parent):  # as lock_eval_set: no other writer's entry is lost
        entries = read_manifest(path.parent)
        entry = entries.pop(path.name, None)
        if entry is None:
            raise BadConfig(Problem(f"not locked (no entry in {manifest_path(path)})", path=str(path)))
        _write(path.parent / LOCK_NAME, entries)
    return entry


def lock_baselined(eval_set: LoadedFiles, run_id: str, *, versioned_only: bool = False) -> list[Path]:
    """Lock the files of `eval_set` that are not locked yet, with the bytes the run read.

    For run_eval at the end of a run. A file already locked is left as it is.

    Args:
        eval_set: the loaded set (its `files` carry each file's path and sha256).
        run_id: the baseline run to record.
        versioned_only: only files named `*.v<N>.jsonl`.

    Returns:
        The files newly locked, in load order.

    Raises:
        BadConfig: a broken manifest. OSError: a manifest that cannot be written.
    """
    counts: dict[str, int] = {}
    for where, _ in eval_set.locations:
        counts[where] = counts.get(where, 0) + 1
    added = []
    for info in eval_set.files:
        path = Path(info["path"])
        if (versioned_only and not is_versioned(path)) or locked(path) is not None:
            continue
        lock_eval_set(path, run_id, sha256=info["sha256"], cases=counts.get(info["path"], 0))
        added.append(path)
    return added


def manifest_status(folder: str | Path) -> list[tuple[LockEntry, str]]:
    """The entries of `folder/eval_sets.lock`, sorted by name, each with the state of its file
    now: "ok" (same sha256), "changed" or "missing". Empty when there is no manifest.

    Raises:
        BadConfig: a broken manifest.
    """
    out = []
    for name, entry in sorted(read_manifest(folder).items()):
        try:
            state = "ok" if _sha256((Path(folder) / name).read_bytes()) == entry.sha256 else "changed"
        except FileNotFoundError:
            state = "missing"
        out.append((entry, state))
    return out


def next_version_name(path: str | Path) -> str:
    """The name of the next version of eval set file `path`.

    `eval_set.v1.jsonl` -> `eval_set.v2.jsonl`; `eval_set.jsonl` -> `eval_set.v2.jsonl`
    (an unversioned file is version 1); `x.v9.jsonl` -> `x.v10.jsonl`. Names that exist
    in the file's folder, or that its manifest locks, are skipped (`.v3` when `.v2` exists).
    """
    path = Path(path)
    m = _VERSIONED.fullmatch(path.name)
    stem, n = (m["stem"], int(m["n"]) + 1) if m else (path.name.removesuffix(".jsonl"), 2)
    try:
        taken = set(read_manifest(path.parent))
    except BadConfig:
        taken = set()
    for version in _count_from(n):
        name = f"{stem}.v{version}.jsonl"
        if name not in taken and not (path.parent / name).exists():
            return name
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- internals


def _next(path: str | Path) -> str:
    """The next version of `path`, in the folder the user spelled (`data/x.v2.jsonl`)."""
    return str(Path(path).with_name(next_version_name(path)))


def _changed(path: str | Path, entry: LockEntry | None, sha256: str | None) -> Problem | None:
    """The refusal of `path` when `entry` locks its name with another sha256, else None."""
    if entry is None:
        return None
    if sha256 is None:
        sha256 = _sha256(Path(path).read_bytes())
    if sha256 == entry.sha256:
        return None
    by = f" by run {entry.run_id}" if entry.run_id else ""
    return Problem(
        f"changed since it was baselined{by} ({manifest_path(path)}: sha256 {entry.sha256[:_SHOWN]}…, "
        f"now {sha256[:_SHOWN]}…); a baselined eval set is immutable: write the changed cases to {_next(path)} "
        f"and run that (or `evalkit lock --remove {path}` to unlock it, which makes runs before and after "
        "incomparable)",
        path=str(path),
    )


def _count_from(n: int) -> Iterator[int]:
    while True:
        yield n
        n += 1


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _read(lock: Path) -> tuple[Problem | None, dict[str, LockEntry]]:
    """(a problem with the manifest or None, its entries); no manifest: (None, {})."""
    if not lock.exists():
        return None, {}
    try:
        raw = read_bytes(lock, what="the manifest")
    except InputError as e:
        return e.problems[0], {}
    try:
        data = loads(raw, path=str(lock))  # bounded: a hostile manifest is bad input, not a crash
    except InputError as e:
        p = e.problems[0]
        return Problem(f"{p.message}; restore it from git", path=p.path, line=p.line), {}
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        version = data.get("schema_version") if isinstance(data, dict) else None
        return Problem(f"expected schema_version {SCHEMA_VERSION}, got {version!r}", path=str(lock), field="schema_version"), {}
    sets = data.get("eval_sets")
    if not isinstance(sets, dict):
        return Problem("expected an object of file name -> entry", path=str(lock), field="eval_sets"), {}
    entries: dict[str, LockEntry] = {}
    for name, item in sets.items():
        sha = item.get("sha256") if isinstance(item, dict) else None
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            return Problem("expected a hex sha256", path=str(lock), field=f"eval_sets.{name}.sha256"), {}
        cases = item.get("cases")
        run_id = item.get("run_id")
        entries[name] = LockEntry(
            name,
            sha,
            str(item.get("locked_at") or ""),
            run_id if isinstance(run_id, str) else None,
            cases if isinstance(cases, int) and not isinstance(cases, bool) else None,
        )
    return None, entries


def _dumps(entries: dict[str, LockEntry]) -> bytes:
    body = {"eval_sets": {name: e.to_json() for name, e in entries.items()}, "schema_version": SCHEMA_VERSION}
    return (json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _write(lock: Path, entries: dict[str, LockEntry]) -> None:
    """Write the manifest atomically: a temp file beside it, fsync, os.replace."""
    write_atomic(lock, _dumps(entries))
