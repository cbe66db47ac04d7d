"""Watch mode (`run_eval --watch`, seed 002's `evalite watch`): run once, then re-run the
cases a change touches whenever the eval set or the notes change.

Affected cases: those whose eval-set line changed (or was added), and those whose gold
supports or last retrieved chunks point into a changed note. When that cannot be told, every
case runs again, and the reason is said: a note added or removed (any case may now
retrieve it, or miss it), a change to an eval-set line whose id names no case (a
conversation's line), or a changed file that is neither.

Files are watched with `watchfiles` (Rust `notify`: inotify / FSEvents / ReadDirectoryChangesW,
batched changes with a debounce), an optional extra: `pip install 'evalkit[watch]'`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import BadConfig, Problem
from evalkit.store.runlog import Rec

__all__ = ["WatchStep", "affected_cases", "eval_set_lines", "note_paths", "watch_runs"]

# A change as watchfiles reports it: (kind, path), kind 1 added, 2 modified, 3 deleted.
ADDED, MODIFIED, DELETED = 1, 2, 3


@dataclass(frozen=True)
class WatchStep:
    """One re-run decided: which case ids (None = all) and why."""

    ids: list[str] | None
    reason: str


def _eval_set_files(paths: Iterable[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    return files


def eval_set_lines(paths: Iterable[str]) -> dict[str, bytes]:
    """Each case line of the eval set, by id, as canonical JSON (a line reformatted but equal
    is unchanged); lines that are not a JSON object with an id are left out."""
    out: dict[str, bytes] = {}
    for path in _eval_set_files(paths):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for line in data.splitlines():
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("id"), str | int):
                out[str(obj["id"])] = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    return out


def note_paths(records: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Case id -> the notes (rel_path) its gold supports and retrieved chunks point into."""
    out: dict[str, set[str]] = {}
    for r in records:
        paths = out.setdefault(str(r.get(Rec.CASE_ID)), set())
        for s in (r.get(Rec.CASE) or {}).get("gold_supports") or []:
            if isinstance(s, dict) and isinstance(s.get("rel_path"), str):
                paths.add(s["rel_path"])
        for c in r.get(Rec.RETRIEVED_CHUNKS) or []:
            if isinstance(c, dict) and isinstance(c.get("rel_path"), str):
                paths.add(c["rel_path"])
    return out


def affected_cases(
    changes: Iterable[tuple[int, str]],
    *,
    eval_set: list[str],
    vault: str | None,
    before: Mapping[str, bytes],
    after: Mapping[str, bytes],
    notes_of: Mapping[str, set[str]],
    case_ids: Iterable[str],
) -> WatchStep | None:
    """What a batch of file changes makes run again; None when nothing (no case touched).

    Args:
        changes: (kind, path) pairs (watchfiles' Change values: 1 added, 2 modified, 3 deleted).
        eval_set: the eval-set files or folders watched.
        vault: the notes folder watched, or None.
        before, after: `eval_set_lines` before and after the change.
        notes_of: case id -> the notes its gold supports and last retrieved chunks point
            into (`note_paths` over the runs so far).
        case_ids: the ids of the eval set's cases now.
    """
    ids = set(case_ids)
    set_files = {p.resolve() for p in _eval_set_files(eval_set)} | {Path(p).resolve() for p in eval_set}
    notes_root = Path(vault).resolve() if vault else None
    wanted: set[str] = set()
    changed_notes: set[str] = set()
    for kind, raw in changes:
        path = Path(raw).resolve()
        if path in set_files or any(path.parent == Path(p).resolve() for p in eval_set if Path(p).is_dir()):
            continue  # compared line by line below
        if notes_root is not None and path.is_relative_to(notes_root):
            rel = path.relative_to(notes_root).as_posix()
            if kind != MODIFIED:
                return WatchStep(None, f"a note was {'added' if kind == ADDED else 'removed'} ({rel}): any case may "
                                 "retrieve it or miss it, so every case runs again")
            changed_notes.add(rel)
            continue
        return WatchStep(None, f"{raw} changed and is neither the eval set nor a note: every case runs again")
    for case_id in after.keys() - before.keys() | {k for k in after.keys() & before.keys() if after[k] != before[k]}:
        if case_id not in ids:
            return WatchStep(None, f"eval-set line {case_id!r} changed and names no single case (a conversation?): "
                             "every case runs again")
        wanted.add(case_id)
    if changed_notes:
        for case_id, paths in notes_of.items():
            if paths & changed_notes and case_id in ids:
                wanted.add(case_id)
    if not wanted:
        return None
    what = []
    if changed_notes:
        what.append(f"note{'s' if len(changed_notes) > 1 else ''} {', '.join(sorted(changed_notes))}")
    return WatchStep(sorted(wanted), f"{len(wanted)} case{'s' if len(wanted) != 1 else ''} affected"
                     + (f" (changed {'; '.join(what)})" if what else " (changed eval-set lines)"))


def _file_changes(paths: list[str]) -> Iterator[set[tuple[int, str]]]:
    try:
        import watchfiles
    except ImportError:
        raise BadConfig(Problem("--watch needs the watchfiles package: pip install 'evalkit[watch]'",
                                field="--watch")) from None
    for batch in watchfiles.watch(*paths, raise_interrupt=False):
        yield {(int(kind), path) for kind, path in batch}


def watch_runs(
    values: dict[str, Any],
    run: Callable[[dict[str, Any]], Any],
    *,
    say: Callable[[str], None],
    max_runs: int | None = None,
    changes: Iterable[set[tuple[int, str]]] | None = None,
) -> list[Any]:
    """Run, then re-run the affected cases on every change, until interrupted (or `max_runs`
    runs in all: a test hook). Each re-run is a run of its own (its own folder and id).

    Args:
        values: the run's settings, as `run_eval` takes them.
        run: runs one set of values and returns its RunResult.
        say: prints one line for people.
        max_runs: stop after this many runs (`--watch-max-runs`; None = until Ctrl-C).
        changes: batches of (kind, path) changes; default watchfiles over the eval set and notes.

    Returns:
        The runs' results, in order.
    """
    from evalkit.evalset.load import load_eval_set
    from evalkit.store.runs import RunDir

    results = [run(values)]
    if max_runs is not None and len(results) >= max_runs:
        return results
    notes_of = note_paths(RunDir(results[0].run_dir).iter_results())
    config = orjson.loads((results[0].run_dir / "config.json").read_bytes())
    eval_set = list(config["settings"]["eval_set"])
    # The notes are watched only when evalkit reads them (the in-process reference chatbot);
    # another target's notes are its own.
    vault = config["settings"].get("vault") if config.get("target", {}).get("kind") == "reference" else None
    watched = [*eval_set, *([vault] if vault else [])]
    say(f"watching {', '.join(watched)} (Ctrl-C stops)")
    before = eval_set_lines(eval_set)
    base_id = values.get("run_id")
    for batch in changes if changes is not None else _file_changes(watched):
        if max_runs is not None and len(results) >= max_runs:
            break
        after = eval_set_lines(eval_set)
        try:
            case_ids = [c.id for c in load_eval_set([Path(p) for p in eval_set]).cases]
        except Exception as e:  # an eval set being edited may not load: say so, wait for the next change
            say(f"the eval set does not load ({e}); waiting for the next change")
            continue
        step = affected_cases(batch, eval_set=eval_set, vault=vault, before=before, after=after,
                              notes_of=notes_of, case_ids=case_ids)
        before = after
        if step is None:
            continue
        say(step.reason)
        again = {**values, "ids": step.ids}
        if base_id:
            again["run_id"] = f"{base_id}-watch-{len(results)}"
        try:
            results.append(run(again))
        except BadConfig as e:
            say(f"the run could not start: {e}")
        else:
            notes_of.update(note_paths(RunDir(results[-1].run_dir).iter_results()))
        if max_runs is not None and len(results) >= max_runs:
            break
    return results


def max_runs_from_env() -> int | None:
    """EVALKIT_WATCH_MAX_RUNS: the test hook's bound, when the flag is not given."""
    value = os.environ.get("EVALKIT_WATCH_MAX_RUNS", "").strip()
    return int(value) if value.isdigit() else None
