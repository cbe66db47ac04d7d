"""Run folders: `results/<run_id>/` with results.jsonl, metrics.json and config.json.

results.jsonl is appended one flushed line per case, so a killed run loses at most the
line being written; the reader drops such a partial last line and resume redoes that case.
metrics.json and config.json are replaced atomically. Records are read as plain dicts
with orjson, one line at a time, so a 100,000-case run never sits in memory as models.

Files that must change together (judge_answers rewrites all three) go through
`RunDir.write_together`: each is written to `.<name>.new`, then a `.commit` marker lists
them, then they are renamed in a fixed order and the marker is removed. `RunDir.open`
finishes a committed update (marker present) or rolls back an uncommitted one, and removes
temp files left by a killed write, so a run is never read half-updated. Writers hold an
advisory lock on the folder, so that clean-up never takes a live process's temp files.

Every change of metrics.json first leaves a `.derive-pending` mark, which the derive step
(evalkit.derive.summary.write_derived) removes once summary.md, results.json and report.html
agree with it again: a command killed in between leaves the mark, and the next command that
opens the run through `evalkit.derive.open_run` derives them then. A new run that is built
whole before anyone may see it (`evalkit merge`) is made in a hidden staging folder and
renamed into place (`staged_run`).

One writer per run: every command that changes a run (run_eval and its --resume, the
re-scorings, judge_answers, a merge's shard runs, label grades) holds the run's writer lock
(`RunDir.writer`, a flock on `.writer.lock`, which names the holder) from before its first
read to its last write. A second one is refused at once (`RunBusy`, exit 2, naming the
holder) instead of losing the first one's update or paying for its work again. The folder
lock above is a different, short lock (one update), taken inside it.

Operating-system failures on a run folder (not a directory, no permission, name too
long, disk full) are `RunFolderError`s naming the path: exit 2, one line, no traceback.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from evalkit.errors import BadConfig, InputError, Problem, RunNotFound, redact
from evalkit.jsonio import MAX_WRITTEN_DEPTH, iter_counted_lines, loads, read_json
from evalkit.store.atomic import (
    SYMLINK_REFUSED,
    default_mode,
    folder_lock,
    fsync_dir,
    open_no_follow,
    staged_dir,
    write_atomic,
)
from evalkit.store.runlog import Holder, Rec

try:
    import fcntl
except ImportError:  # Windows: no flock; writers proceed unlocked there (as folder_lock)
    fcntl = None  # type: ignore[assignment]

RESULTS_FILE = "results.jsonl"
METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.json"
# Derived from metrics.json (evalkit.derive.summary.write_summary); never read back by a script.
SUMMARY_FILE = "summary.md"
# The whole report in one file (evalkit.report.results_json), derived like summary.md.
RESULTS_JSON = "results.json"
# `evalkit report --run-id`'s page (evalkit.report.html.run); kept in step like summary.md once made.
REPORT_FILE = "report.html"
# What summary.write_derived renders from metrics.json (report.html only when the run has one).
DERIVED_FILES = (SUMMARY_FILE, RESULTS_JSON, REPORT_FILE)
# judge_answers --batch's record of its batches (evalkit.judges.batch).
JUDGE_BATCH_FILE = "judge_batch.json"
# Verdicts a batch paid for that the judge cache could not store, until a rerun stores them.
JUDGE_BATCH_KEPT = "judge_batch_kept.jsonl"
# `evalkit embed`'s analysis (evalkit.embeddings.analysis), shown by report.html.
EMBEDDINGS_FILE = "embeddings.json"
# metrics.json changed and DERIVED_FILES have not been rendered from it since (module docstring).
DERIVE_PENDING = ".derive-pending"
# write_together renames in this order; the marker says which of them an update holds.
RUN_FILES = (RESULTS_FILE, METRICS_FILE, CONFIG_FILE)
COMMIT_MARKER = ".commit"
_STAGED_SUFFIX = ".new"
# The run's writer lock (RunDir.writer): flock'ed by the command changing the run, and holding
# who that is (runlog.Holder). Created once and never removed (removing a lock file others may
# have open would let two writers lock two different files); a stale entry is harmless.
WRITER_LOCK = ".writer.lock"
# Every file of a run folder written through the atomic writer. `RunDir.write_file` refuses
# any other name, so recovery's clean-up of `.<name>.<random>.tmp` (below) misses none.
ATOMIC_FILES = (*RUN_FILES, *DERIVED_FILES, JUDGE_BATCH_FILE, JUDGE_BATCH_KEPT, EMBEDDINGS_FILE, DERIVE_PENDING)
# Temp files our writes create: write_atomic's `.<file>.<random>.tmp` and the marker's temp.
_STALE_TMP = re.compile(
    "|".join([*(rf"\.{re.escape(name)}\.[^/]+\.tmp" for name in ATOMIC_FILES), rf"{re.escape(COMMIT_MARKER)}\.tmp"])
)
# A record's id where ResultsWriter puts it (first, or after schema_version), unescaped: readable
# without parsing the line.
_LEADING_ID = re.compile(rb'\{(?:"schema_version":\d+,)?"test_case_id":"([^"\\]*)"')

# A run id names a folder and is printed and pasted into shells: letters, digits, '.', '_'
# and '-', starting with a letter or digit, at most 128 characters. Generated ids
# (`20260102T030405Z-1a2b3c`) and names like `baseline` or `my-run.v2` fit.
MAX_RUN_ID_LENGTH = 128
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,%d}" % (MAX_RUN_ID_LENGTH - 1))
RUN_ID_RULE = (
    f"1-{MAX_RUN_ID_LENGTH} characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"
)
# `--run-id latest` names the newest run (results/latest, or results/latest.json where the
# OS makes no symlinks): every script resolves it, and no new run may take the name.
LATEST = "latest"
LATEST_FILE = "latest.json"
# The results database beside the run folders (evalkit.store.resultsdb): an index of them,
# made by `evalkit index-runs` and kept in step by the commands that change a run.
RESULTS_DB = "runs.sqlite"

# What a JSON value that is not an object is called in an error.
_JSON_KIND = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false", type(None): "null"}

_JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY


def config_hash(obj: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of `obj` (sorted keys, no whitespace)."""
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)).hexdigest()


def new_run_id(config_hash_hex: str, now: datetime | None = None) -> str:
    """Run ids sort by time: `YYYYMMDDTHHMMSSZ-<first 6 hex of config_hash>` (DESIGN.md §6)."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{config_hash_hex[:6]}"


class RunFolderError(InputError):
    """The operating system refused to create, read or write a run folder or one of its files."""


class RunBusy(InputError):
    """Another command holds the run's writer lock (`RunDir.writer`): exit 2, naming it."""


@contextmanager
def _os_errors(action: str, path: Path) -> Iterator[None]:
    """Turn an OSError into a RunFolderError: "<path>: <action>: <OS reason>"."""
    try:
        yield
    except OSError as e:
        where = os.fsdecode(e.filename) if isinstance(e.filename, str | bytes | os.PathLike) else str(path)
        reason = e.strerror or str(e)
        if e.errno in (errno.ENOTDIR, errno.EEXIST):
            blocker = _file_in_the_way(Path(where))
            if blocker is not None:
                reason += f" ({blocker} is a file, not a folder)"
        raise RunFolderError(Problem(f"{action}: {reason}", path=where)) from None


def _file_in_the_way(path: Path) -> Path | None:
    """The first existing non-folder on the way to `path`, if any."""
    for p in [*reversed(path.parents), path]:
        try:
            if p.exists() and not p.is_dir():
                return p
        except OSError:
            return None
    return None


def run_id_problem(run_id: str, *, new: bool = False) -> str | None:
    """Why `run_id` cannot name a run folder (see RUN_ID_RULE), or None if it can.

    With `new` (naming a run about to be made), `latest` is refused: it is the pointer
    to the newest run, not a name a run can take.
    """
    if _RUN_ID.fullmatch(run_id):
        if new and run_id == LATEST:
            return f"{LATEST!r} is reserved: it names the newest run (results/{LATEST}); choose another run id"
        return None
    # repr() shows control characters as escapes: nothing raw reaches the terminal.
    shown = repr(run_id) if len(run_id) <= 40 else f"{run_id[:40]!r}… ({len(run_id)} characters)"
    return f"not a valid run id: {shown}; use {RUN_ID_RULE}"


def run_folder_taken(path: Path) -> bool:
    """Whether `path` is a non-empty folder (a run lives there).

    Raises:
        RunFolderError: the OS cannot say (e.g. a name too long, a file on the way).
    """
    with _os_errors("cannot create the run folder", path):
        # The writer lock alone is no run: run_eval takes it as soon as it made the folder.
        return path.is_dir() and any(p.name != WRITER_LOCK for p in path.iterdir())


def check_run_id(run_id: str, flag: str = "--run-id") -> None:
    """BadConfig (exit 2) naming `flag` unless `run_id` follows RUN_ID_RULE and is not the
    reserved `latest` (RunDir.open resolves `latest` to a real id before checking it)."""
    problem = run_id_problem(run_id, new=True)
    if problem is not None:
        raise BadConfig(Problem(problem, field=flag))


def _refuse_taken(path: Path, run_id: str) -> None:
    """BadConfig when a run lives at `path` already."""
    if run_folder_taken(path):
        raise BadConfig(
            Problem(f"run {run_id!r} already exists at {path}; use --resume {run_id} or another --run-id")
        )


_fsync_dir = fsync_dir


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temp file in the same folder, fsync it, then os.replace over `path`.

    Raises:
        RunFolderError: the OS refused (the path names the file).
    """
    path = Path(path)
    payload = orjson.dumps(obj, option=_JSON_OPTS)
    with _os_errors(f"cannot write {path.name}", path):
        _write_atomic(path, payload)


def _write_atomic(path: Path, payload: bytes | Iterable[bytes]) -> None:
    """`payload` (bytes, then a newline; or pieces written as given) through `write_atomic`,
    with the mode a plain open() gives (run files are shared: metrics.json is committed)."""
    write_atomic(path, payload + b"\n" if isinstance(payload, bytes) else payload, mode=default_mode())


def dumps_metrics(metrics: Mapping[str, Any]) -> bytes:
    """metrics.json's text: indented and key-sorted, except that each slice cell (each value
    of a top-level `by_*` object, e.g. `by_tag.work`) is one compact line.

    metrics.json is meant to be committed: one line per slice keeps a diff readable (a
    changed slice is one changed line) without the indentation that was half its size.
    """
    items = sorted(metrics.items())
    lines = [b"{"]
    for i, (key, value) in enumerate(items):
        if key.startswith("by_") and isinstance(value, Mapping) and value:
            rows = [
                # A cell keeps the order aggregate_records gives it (n_cases, metrics, n).
                b"    " + orjson.dumps(name) + b": " + orjson.dumps(cell, option=orjson.OPT_SERIALIZE_NUMPY)
                for name, cell in sorted(value.items())
            ]
            text = b"{\n" + b",\n".join(rows) + b"\n  }"
        else:
            # JSON strings hold no raw newline, so re-indenting by line is safe.
            text = orjson.dumps(value, option=_JSON_OPTS).replace(b"\n", b"\n  ")
        lines.append(b"  " + orjson.dumps(key) + b": " + text + (b"," if i < len(items) - 1 else b""))
    lines.append(b"}")
    return b"\n".join(lines)


def merge_metrics(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """metrics.json updated by a script that recomputed `patch`: each key of the patch, and
    each key of a section both hold (`aggregate_metrics`), is replaced whole.

    So a script keeps what other scripts own (judge_answers' `judge_reliability` inside
    `aggregate_metrics`) while nothing it recomputed can survive stale: a deeper merge
    would keep an error kind or a tag that no longer occurs.
    """
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _create_fresh(path: Path) -> BinaryIO:
    """`path` (a temp name only evalkit writes) opened as a new file: whatever is there is
    removed first, a symbolic link included, so nothing is written through one."""
    path.unlink(missing_ok=True)
    return os.fdopen(open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb")


def _read_json(path: Path) -> dict[str, Any]:
    """config.json or metrics.json through the bounded reader (size and depth): not JSON,
    not UTF-8, too deep or too large is said at its line; a top level that is not an object
    (`42`, `[]`) is said too, so no reader meets an `int` where it wants a dict."""
    value = read_json(path, max_depth=MAX_WRITTEN_DEPTH)
    if not isinstance(value, dict):
        got = _JSON_KIND.get(type(value), type(value).__name__)
        raise InputError(Problem(f"not a JSON object ({got}): evalkit writes an object here", path=str(path)))
    return value


# Writer locks this process holds: run folder (real path) -> [descriptor or None, depth].
# Re-entrant within a process (`evalkit score` holds a run across its parts, and each part's
# function takes it again), so two threads of one process are not told apart.
_HELD: dict[str, list[Any]] = {}
_HELD_GUARD = threading.Lock()
_ARGV_CHARS = 300


def _forget_held_in_child() -> None:
    """A forked child (a re-scoring's worker) closes its copies of the writer locks: the
    parent still holds them, and a child outliving a killed parent must not keep the run."""
    global _HELD_GUARD
    for fd, _depth in _HELD.values():
        if fd is not None:
            with suppress(OSError):
                os.close(fd)
    _HELD.clear()
    _HELD_GUARD = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held_in_child)


def _shown(text: Any) -> str:
    """A value read from a lock file another process wrote, safe to print on one line."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def _holder_entry(command: str) -> bytes:
    """What `.writer.lock` says while this process holds it (runlog.Holder)."""
    argv = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
    line = redact(shlex.join(argv))  # a key given as a flag must not land in the run folder
    if len(line) > _ARGV_CHARS:
        line = line[: _ARGV_CHARS - 1] + "…"
    return orjson.dumps({
        Holder.COMMAND: command, Holder.ARGV: line, Holder.PID: os.getpid(), Holder.HOST: socket.gethostname(),
        Holder.STARTED_AT: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }) + b"\n"


# A holder writes its entry right after it takes the lock: a refused command that finds the
# file empty looks again for this long before it says "another command".
_HOLDER_WAIT_S = 0.5


def _holder_bytes(fd: int) -> bytes:
    """The lock file's entry; re-read for up to _HOLDER_WAIT_S while it is still empty."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        raw = os.pread(fd, 4096, 0)
        if raw.strip() or time.monotonic() >= deadline:
            return raw
        time.sleep(0.01)


def _holder_said(raw: bytes) -> str:
    """Who holds a run, from its `.writer.lock`: "judge_answers (pid 4242, since ...: argv)"."""
    try:
        holder = orjson.loads(raw)
    except orjson.JSONDecodeError:
        holder = None
    if not isinstance(holder, dict) or not holder.get(Holder.COMMAND):
        # Between its lock and its entry, or a full disk kept the entry out.
        return "another command (its entry in the lock file is not written)"
    where = f"pid {_shown(holder.get(Holder.PID))}"
    host = holder.get(Holder.HOST)
    if host and host != socket.gethostname():
        where += f" on {_shown(host)}"
    if holder.get(Holder.STARTED_AT):
        where += f", since {_shown(holder[Holder.STARTED_AT])}"
    if holder.get(Holder.ARGV):
        where += f": {_shown(holder[Holder.ARGV])}"
    return f"{_shown(holder[Holder.COMMAND])} ({where})"


class RunDir:
    """One run folder. Cheap to construct; every read streams from disk."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.run_id = self.path.name

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @classmethod
    def create(cls, results_dir: Path, run_id: str, *, hold: ExitStack | None = None,
               command: str = "run_eval") -> RunDir:
        """Make a new, empty run folder.

        Args:
            hold: the new run's writer lock (`writer(command)`) is taken into it, and the
                folder checked again under it: a run another command made there meanwhile
                is refused, never written over.

        Raises:
            BadConfig: a run with that id exists, or the id breaks RUN_ID_RULE.
            RunBusy: with `hold`, another command holds the new folder (it is making that run).
            RunFolderError: the OS refused to make the folder, or a symbolic link is in its place.
        """
        check_run_id(run_id)
        path = Path(results_dir) / run_id
        with _os_errors("cannot create the run folder", path):
            if path.is_symlink():  # a new run is never written through a link left in its place
                raise OSError(errno.ELOOP, SYMLINK_REFUSED, str(path))
            leftover = path.is_dir()
        if leftover:
            # A run_eval killed while writing its first file left only that temp file: no run.
            cls(path).recover()
        _refuse_taken(path, run_id)
        with _os_errors("cannot create the run folder", path):
            path.mkdir(parents=True, exist_ok=True)
        run = cls(path)
        if hold is not None:
            with ExitStack() as mine:
                mine.enter_context(run.writer(command))
                _refuse_taken(path, run_id)  # finished by another command since the check above
                hold.enter_context(mine.pop_all())
        return run

    @classmethod
    def open(cls, results_dir: Path, run_id: str, *, flag: str = "--run-id") -> RunDir:
        """Open an existing run folder, first finishing or rolling back an update a killed
        process left half-done and removing its temp files (`recover`). `latest` opens the
        newest run (`resolve_run_id`); the RunDir then carries the real id.

        Raises:
            RunNotFound: no such folder (names the flag and the path looked at).
            BadConfig: the id breaks RUN_ID_RULE.
            RunFolderError: the OS refused to finish an interrupted update.
        """
        run_id = resolve_run_id(results_dir, run_id, flag=flag)
        check_run_id(run_id, flag)
        path = Path(results_dir) / run_id
        with _os_errors("cannot open the run folder", path):
            found = path.is_dir()
        if not found:
            runs = list_runs(results_dir)[:3]
            hint = f" (latest runs: {', '.join(runs)})" if runs else ""
            raise RunNotFound(Problem(f"no run {run_id!r} under {results_dir}{hint}", field=flag))
        run = cls(path)
        run.recover()
        return run

    # ------------------------------------------------------------------ one writer at a time

    @contextmanager
    def writer(self, command: str) -> Iterator[None]:
        """Hold the run's writer lock while the block runs: the one command changing the run.

        A flock on `.writer.lock` in the run folder (not the folder lock, which each update
        takes inside it for a moment), taken without waiting, and the holder's entry written
        into the file (`runlog.Holder`: command, command line, pid, host, start time); the
        entry is emptied when the block ends. The kernel drops the lock when the process dies,
        so a killed holder never blocks the next command: its entry is left, and overwritten
        by the next holder. Re-entrant within a process. Where flock is unsupported (Windows,
        some network filesystems) everything proceeds unlocked, as with the folder lock.

        Args:
            command: the job, for the entry (run_eval, judge_answers, score_retrieval ...).

        Raises:
            RunBusy: another process holds it; the message names the holder.
            RunFolderError: the OS refused the lock file (a symbolic link there is refused).
        """
        key = os.path.realpath(self.path)
        with _HELD_GUARD:
            held = _HELD.get(key)
            if held is None:
                held = _HELD[key] = [self._take_writer(command), 0]
            held[1] += 1
        try:
            yield
        finally:
            with _HELD_GUARD:
                held[1] -= 1
                if held[1] == 0 and _HELD.get(key) is held:
                    del _HELD[key]
                    if held[0] is not None:
                        with suppress(OSError):
                            os.ftruncate(held[0], 0)  # released: no holder to name
                        os.close(held[0])  # releases the lock

    def _take_writer(self, command: str) -> int | None:
        """The locked descriptor of `.writer.lock` with this process's entry in it, or None
        where flock is unsupported."""
        if fcntl is None:
            return None
        path = self.path / WRITER_LOCK
        with _os_errors("cannot take the run's writer lock", path):
            # Changed in place, so never through a symbolic link (a file outside the run).
            fd = open_no_follow(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            busy = e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
            try:
                who = _holder_said(_holder_bytes(fd)) if busy else ""
            except OSError:
                who = _holder_said(b"")
            os.close(fd)
            if not busy:
                return None  # no flock on this filesystem: unlocked, as folder_lock
            raise RunBusy(Problem(f"run {self.run_id!r} is being changed by {who}; wait for it to finish or stop it, "
                                  "then rerun", path=str(path))) from None
        # Who holds the run is a courtesy: a full disk must not stop the command for it. Written
        # before the old bytes are cut, so the file is never empty while the lock is held.
        with suppress(OSError):
            entry = _holder_entry(command)
            os.pwrite(fd, entry, 0)
            os.ftruncate(fd, len(entry))
        return fd

    # ------------------------------------------------------------------ interrupted updates

    def recover(self) -> str | None:
        """Finish or undo an update a killed process left, and delete its temp files.

        With a `.commit` marker the staged files are renamed into place (the update had
        been fully written); without one they are deleted (the old files are whole). Skipped
        while another process holds the folder's lock: its files are not stale.

        Returns:
            "completed", "rolled back", or None when there was no update to settle.
        """
        with _os_errors("cannot settle an interrupted update", self.path):
            with folder_lock(self.path, wait=False) as locked:
                return self._recover_locked() if locked else None

    def _recover_locked(self) -> str | None:
        outcome = None
        marker = self.path / COMMIT_MARKER
        if marker.exists():
            try:
                names = [n for n in orjson.loads(marker.read_bytes())["files"] if n in RUN_FILES]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise RunFolderError(
                    Problem(f"unreadable update marker {COMMIT_MARKER}; results.jsonl, metrics.json and config.json "
                            "may be from different updates: re-run the last command", path=str(marker))
                ) from None
            self._move_staged(names)
            outcome = "completed"
        for name in RUN_FILES:
            staged = self._staged(name)
            if staged.exists():
                # Best effort: the files in place are whole, a leftover is only debris.
                with suppress(OSError):
                    staged.unlink()
                outcome = outcome or "rolled back"
        for p in self.path.iterdir():
            if _STALE_TMP.fullmatch(p.name):
                with suppress(OSError):
                    p.unlink()
        return outcome

    def _staged(self, name: str) -> Path:
        return self.path / f".{name}{_STAGED_SUFFIX}"

    def _move_staged(self, names: Iterable[str]) -> None:
        """The commit: rename staged files over the live ones in RUN_FILES order, then drop the marker."""
        if METRICS_FILE in names:
            self._mark_derive_pending()
        for name in RUN_FILES:
            if name in names and self._staged(name).exists():
                os.replace(self._staged(name), self.path / name)
        _fsync_dir(self.path)
        (self.path / COMMIT_MARKER).unlink(missing_ok=True)
        _fsync_dir(self.path)

    def write_together(
        self,
        *,
        results: Iterable[Mapping[str, Any]] | None = None,
        metrics: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """Replace results.jsonl, metrics.json and config.json (those given) as one update.

        `metrics` may be a function, called once results.jsonl is staged: a re-scoring that
        aggregates the records as they stream into the new file computes metrics.json from
        the same pass. Whatever it raises stops the update with nothing committed.

        Each is written to `.<name>.new` and fsynced; then the `.commit` marker naming them
        is written; then they are renamed in RUN_FILES order and the marker removed. Killed
        before the marker, the next `open` deletes the staged files (old run intact); killed
        after it, the next `open` finishes the renames (new run intact).

        Raises:
            RunFolderError: the OS refused; staged files are removed when nothing was committed.
        """
        payloads: dict[str, Any] = {RESULTS_FILE: results, METRICS_FILE: metrics, CONFIG_FILE: config}
        names = [n for n in RUN_FILES if payloads[n] is not None]
        with _os_errors("cannot update the run folder", self.path), folder_lock(self.path):
            self._recover_locked()
            try:
                for name in names:
                    staged = self._staged(name)
                    with _create_fresh(staged) as f:  # the umask's mode, like the file it replaces
                        if name == RESULTS_FILE:
                            for record in payloads[name]:
                                f.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
                        elif name == METRICS_FILE:
                            value = payloads[name]
                            f.write(dumps_metrics(value() if callable(value) else value) + b"\n")
                        else:
                            f.write(orjson.dumps(payloads[name], option=_JSON_OPTS) + b"\n")
                        f.flush()
                        os.fsync(f.fileno())
                tmp = self.path / f"{COMMIT_MARKER}.tmp"
                with _create_fresh(tmp) as f:
                    f.write(orjson.dumps({"files": names}))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path / COMMIT_MARKER)
            except BaseException:
                for name in names:
                    with suppress(OSError):
                        self._staged(name).unlink()
                with suppress(OSError):
                    (self.path / f"{COMMIT_MARKER}.tmp").unlink()
                raise
            _fsync_dir(self.path)
            self._move_staged(names)

    # ------------------------------------------------------------------ derived files

    def _mark_derive_pending(self) -> None:
        """Say (under the folder lock, before metrics.json changes) that the derived files
        are behind it; each mark is new, so `clear_derive_pending` cannot take a later one."""
        _write_atomic(self.path / DERIVE_PENDING, secrets.token_hex(8).encode())

    def derive_pending(self) -> str | None:
        """The mark of a metrics.json change whose derived files were not rendered yet, or None.

        Raises:
            RunFolderError: the OS refused to read it.
        """
        path = self.path / DERIVE_PENDING
        with _os_errors(f"cannot read {DERIVE_PENDING}", path):
            try:
                return path.read_text(encoding="utf-8", errors="replace").strip() or "?"
            except FileNotFoundError:
                return None

    def clear_derive_pending(self, mark: str) -> bool:
        """Remove the pending mark if it is still `mark` (read before the derived files were
        rendered): a metrics.json written since keeps its own. Returns whether it was removed."""
        path = self.path / DERIVE_PENDING
        with _os_errors(f"cannot remove {DERIVE_PENDING}", path), folder_lock(self.path):
            if self.derive_pending() != mark:
                return False
            path.unlink(missing_ok=True)
            return True

    # ------------------------------------------------------------------ results.jsonl

    def append_result(self, record: Mapping[str, Any]) -> None:
        """Append one record as one line, flushed and fsynced before returning."""
        with self.open_writer(fsync_interval=0) as writer:
            writer.write([record])

    def open_writer(self, fsync_interval: float = 1.0) -> ResultsWriter:
        """results.jsonl held open for appending batches (the runner's hot path)."""
        return ResultsWriter(self.results_path, fsync_interval=fsync_interval)

    def iter_results(
        self, start: int = 0, end: int | None = None, *, ids: Container[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Stream records in file order. A partial last line (killed mid-write) is skipped.

        A malformed line anywhere else is corruption, not a crash artefact: InputError.
        `start`/`end` read only the lines in that byte range (offsets from `split_results`,
        which fall on line starts); line numbers in errors then count from the range's start.
        `ids`: skip, unparsed and so unchecked, each line whose test_case_id can be read
        where the writer puts it and is not in `ids`; every other record is yielded.
        """
        if not self.results_path.exists():
            return
        with _os_errors(f"cannot read {RESULTS_FILE}", self.results_path):
            # Read in blocks, each line handed over with its bracket count (the depth guard's
            # upper bound, counted for the whole block at once: `iter_counted_lines`).
            f = open(self.results_path, "rb", buffering=0)  # noqa: SIM115 - closed by the with below
        with f:
            if start:
                f.seek(start)
            end = None if end is None else end - start
            pending: tuple[bytes, int] | None = None
            lineno = 0
            for raw, openers in iter_counted_lines(f, end):
                if ids is not None and (m := _LEADING_ID.match(raw)) is not None and m[1].decode(errors="replace") not in ids:
                    if pending is not None:  # before the line count moves on: errors name their own line
                        yield self._parse_line(*pending, lineno)
                        pending = None
                    lineno += 1
                    continue
                if pending is not None:
                    yield self._parse_line(*pending, lineno)
                pending = raw, openers
                lineno += 1
            if pending is not None:
                if not pending[0].endswith(b"\n"):
                    try:
                        orjson.loads(pending[0])
                    except orjson.JSONDecodeError:
                        return  # the line being written when the run died; resume redoes it
                yield self._parse_line(*pending, lineno)

    def split_results(self, parts: int) -> list[tuple[int, int | None]]:
        """results.jsonl cut into at most `parts` byte ranges of about equal size, each
        starting at a line start, for `iter_results(start, end)` (the last one's end is None)."""
        if parts <= 1 or not self.results_path.exists():
            return [(0, None)]
        size = self.results_path.stat().st_size
        cuts = [0]
        with open(self.results_path, "rb") as f:
            for i in range(1, parts):
                f.seek(max(size * i // parts - 1, cuts[-1]))
                f.readline()  # to the start of the next line
                at = f.tell()
                if cuts[-1] < at < size:
                    cuts.append(at)
        return [(a, b) for a, b in zip(cuts, [*cuts[1:], None])]

    def _parse_line(self, raw: bytes, openers: int, lineno: int) -> dict[str, Any]:
        try:
            record = loads(raw, max_depth=MAX_WRITTEN_DEPTH, line=lineno, openers=openers)  # the path only when needed
        except InputError as e:  # not UTF-8 or not JSON (said where), or nested deeper than evalkit writes
            where = str(self.results_path)
            raise InputError([Problem(f"corrupt record: {p.message}", path=where, line=p.line) for p in e.problems]) from None
        if not isinstance(record, dict):  # valid JSON, but `42`, `[]`, `"x"` or `null`: every reader wants an object
            got = _JSON_KIND.get(type(record), type(record).__name__)
            raise InputError(Problem(f"corrupt record: not a JSON object ({got})", path=str(self.results_path), line=lineno))
        return record

    def read_results(self) -> list[dict[str, Any]]:
        """All records, sorted by case_index (eval-set order)."""
        return sorted(self.iter_results(), key=lambda r: r.get(Rec.CASE_INDEX, 0))

    def completed_ids(self) -> set[str]:
        return {r[Rec.CASE_ID] for r in self.iter_results()}

    def repair_tail(self) -> bool:
        """Truncate a partial last line left by a killed run. Returns True if it cut anything."""
        if not self.results_path.exists():
            return False
        with (
            _os_errors(f"cannot repair {RESULTS_FILE}", self.results_path),
            os.fdopen(open_no_follow(self.results_path, os.O_RDWR), "rb+") as f,  # in place: never through a link
        ):
            data = f.read()
            if not data or data.endswith(b"\n"):
                return False
            last_nl = data.rfind(b"\n")
            tail = data[last_nl + 1 :]
            try:
                orjson.loads(tail)
                # A complete record that only lacks its newline: keep it, add the newline.
                f.write(b"\n")
                return False
            except orjson.JSONDecodeError:
                f.truncate(last_nl + 1)
                return True

    def rewrite_results(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Replace results.jsonl atomically with `records` (streamed to a temp file).

        Alone, for a rewrite that leaves metrics.json and config.json true (reordering);
        when they change too, use `write_together`.
        """
        with _os_errors(f"cannot rewrite {RESULTS_FILE}", self.results_path), folder_lock(self.path):
            lines = (orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for record in records)
            write_atomic(self.results_path, lines, mode=default_mode())

    # ------------------------------------------------------------------ json files

    def read_config(self) -> dict[str, Any]:
        if not self.config_path.exists():
            raise InputError(Problem("config.json is missing", path=str(self.path)))
        return _read_json(self.config_path)

    def write_config(self, cfg: Mapping[str, Any]) -> None:
        payload = orjson.dumps(cfg, option=_JSON_OPTS)
        with _os_errors(f"cannot write {CONFIG_FILE}", self.config_path), folder_lock(self.path):
            _write_atomic(self.config_path, payload)

    def read_metrics(self) -> dict[str, Any] | None:
        return _read_json(self.metrics_path) if self.metrics_path.exists() else None

    def write_metrics(self, metrics: Mapping[str, Any]) -> None:
        payload = dumps_metrics(metrics)
        with _os_errors(f"cannot write {METRICS_FILE}", self.metrics_path), folder_lock(self.path):
            self._mark_derive_pending()
            _write_atomic(self.metrics_path, payload)

    def write_summary(self, text: str) -> None:
        """Replace summary.md atomically (under the folder lock, like metrics.json)."""
        path = self.path / SUMMARY_FILE
        with _os_errors(f"cannot write {SUMMARY_FILE}", path), folder_lock(self.path):
            _write_atomic(path, text.encode("utf-8"))

    def write_derived(self, name: str, pieces: Iterable[bytes]) -> None:
        """Replace a derived file (results.json) atomically, streamed from `pieces`."""
        self.write_file(name, pieces)

    def write_file(self, name: str, payload: bytes | Iterable[bytes]) -> Path:
        """Replace the run's file `name` (one of ATOMIC_FILES) with `payload`, as given,
        atomically and under the folder lock. Returns its path.

        Raises:
            ValueError: `name` is not in ATOMIC_FILES (a killed write's temp file would be
                left for good: add it there).
            RunFolderError: the OS refused.
        """
        if name not in ATOMIC_FILES:
            raise ValueError(f"{name!r} is not one of a run folder's files (store.runs.ATOMIC_FILES)")
        path = self.path / name
        with _os_errors(f"cannot write {name}", path), folder_lock(self.path):
            write_atomic(path, payload, mode=default_mode())
        return path

    def update_metrics(
        self, patch: Mapping[str, Any], then: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Merge `patch` into metrics.json (see `merge_metrics`), keeping keys other scripts own;
        `then` (the re-scorers' verdict re-check) sees the merged file before it is written."""
        with _os_errors(f"cannot write {METRICS_FILE}", self.metrics_path), folder_lock(self.path):
            merged = merge_metrics(self.read_metrics() or {}, patch)
            if then is not None:
                merged = then(merged)
            payload = dumps_metrics(merged)
            self._mark_derive_pending()
            _write_atomic(self.metrics_path, payload)
        return merged


class ResultsWriter:
    """Appends whole lines to results.jsonl: each write() is one write + flush.

    fsync runs when `sync_due()` says so (at most every `fsync_interval` seconds; 0 = after
    every write when the caller syncs) and at close. An fsync per record capped the runner
    at 0.70 efficiency at concurrency 16; a flushed line survives a killed process anyway,
    and a torn last line is dropped by RunDir.repair_tail on resume.
    """

    def __init__(self, path: Path, fsync_interval: float = 1.0):
        self._path = Path(path)
        with _os_errors(f"cannot open {self._path.name}", self._path):
            # Never through a symbolic link: it would append to a file outside the run folder.
            self._f = os.fdopen(open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
        self._interval = fsync_interval
        self._last_sync = time.monotonic()

    def write(self, records: Iterable[Mapping[str, Any]]) -> list[bytes]:
        """Append `records`, one JSON line each; returns the lines as written (without their
        newline), so a caller that reads them back as the file holds them need not encode twice."""
        lines = [orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) for r in records]
        payload = b"\n".join(lines) + b"\n" if lines else b""
        with _os_errors(f"cannot write {self._path.name}", self._path):
            self._f.write(payload)
            self._f.flush()
        return lines

    def sync_due(self) -> bool:
        return time.monotonic() - self._last_sync >= self._interval

    def sync(self) -> None:
        with _os_errors(f"cannot write {self._path.name}", self._path):
            os.fsync(self._f.fileno())
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if not self._f.closed:
            try:
                with _os_errors(f"cannot write {self._path.name}", self._path):
                    self._f.flush()
                    os.fsync(self._f.fileno())
            finally:
                with suppress(OSError):  # a failed flush above is the error to report
                    self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def staged_run(results_dir: Path, run_id: str) -> Iterator[RunDir]:
    """A new run folder built out of sight and put in place whole (`evalkit merge`).

    The RunDir yielded lives in a `store.atomic.staged_dir` stage under `results_dir`
    (`.<run_id>.<random>.stage.tmp/<run_id>/`): a hidden folder is no run (`list_runs`,
    `RunDir.open` and `latest` never see it), and the run in it carries its real id. When
    the block ends the run is renamed to `results_dir/<run_id>` and the RunDir points there;
    when it raises, the stage is removed. A stage a killed process left is removed by the
    next `staged_run` (or any `staged_dir`) under `results_dir`.

    Raises:
        BadConfig: the id breaks RUN_ID_RULE, or a run with that id exists (checked before
            and again at the rename: a run made meanwhile is never replaced).
        RunFolderError: the OS refused.
    """
    check_run_id(run_id)
    root = Path(results_dir)
    dest = root / run_id
    _refuse_taken(dest, run_id)
    stage = ExitStack()
    with _os_errors("cannot create the run folder", dest):
        work = stage.enter_context(staged_dir(dest))
    with stage:
        run = RunDir(work)
        yield run
        _refuse_taken(dest, run_id)
        with _os_errors("cannot move the new run into place", dest):
            try:
                stage.close()  # the rename, onto nothing or an empty folder only
            except FileExistsError:
                _refuse_taken(dest, run_id)
                raise
        run.path = dest


def _run_time(path: Path) -> float:
    """When a run was made: config.json's `created_at`, else the folder's mtime (epoch s)."""
    try:
        created = orjson.loads((path / CONFIG_FILE).read_bytes()).get("created_at")
        when = datetime.fromisoformat(str(created))
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return when.timestamp()
    except (OSError, ValueError, TypeError, AttributeError):
        # No or unreadable config.json, or no usable created_at (orjson's error is a ValueError).
        return path.stat().st_mtime


def list_runs(results_dir: Path) -> list[str]:
    """Run ids under `results_dir`, newest first.

    Ordered by config.json's `created_at`, else by the folder's mtime, not by name: ids
    given with --run-id ("baseline") do not sort by time. Ties: the larger name first.
    """
    root = Path(results_dir)
    if not root.is_dir():
        return []
    runs = [
        (_run_time(p), p.name)
        for p in root.iterdir()
        # results/latest is a symlink to a run that is listed under its own name; a folder whose
        # name breaks the run-id rule (a newline, a slash...) is not a run, and is never printed.
        if p.is_dir() and not p.name.startswith(".") and not (p.name == LATEST and p.is_symlink())
        and run_id_problem(p.name) is None
    ]
    return [name for _, name in sorted(runs, reverse=True)]


def resolve_run_id(results_dir: Path, run_id: str, *, flag: str = "--run-id") -> str:
    """The run id `run_id` stands for: itself, or for `latest` the newest run's id.

    `latest` is read from the symlink `results/latest` (its target's name), else from
    `results/latest.json` (`{"run_id": ...}`, where the OS makes no symlinks). A real folder
    named `latest` (a run made before the name was reserved) is that run.

    Raises:
        RunNotFound: `latest` was asked for and no run_eval has pointed it anywhere, or
            it points at a run that is gone.
    """
    if run_id != LATEST:
        return run_id
    root = Path(results_dir)
    link, pointer = root / LATEST, root / LATEST_FILE
    target: str | None = None
    where = link
    if link.is_symlink():
        with suppress(OSError):
            target = Path(os.readlink(link)).name
    elif pointer.is_file():
        where = pointer
        with suppress(OSError, orjson.JSONDecodeError, AttributeError):
            target = orjson.loads(pointer.read_bytes()).get("run_id")
    elif link.is_dir():
        return LATEST
    else:
        raise RunNotFound(
            Problem(f"no latest run under {results_dir}: run_eval points {LATEST} at each run it finishes, "
                    "and none has finished here yet", field=flag)
        )
    if not isinstance(target, str) or run_id_problem(target) is not None or target == LATEST:
        raise RunNotFound(Problem(f"{where} does not name a run; rerun run_eval or pass a run id", field=flag))
    if not (root / target).is_dir():
        raise RunNotFound(Problem(f"{where} points at run {target!r}, which is gone from {results_dir}", field=flag))
    return target


def latest_run_id(results_dir: Path) -> str | None:
    """The run `latest` names now, or None when it names none (never pointed, or gone)."""
    try:
        target = resolve_run_id(results_dir, LATEST)
    except RunNotFound:
        return None
    return None if target == LATEST else target


def clear_latest(results_dir: Path) -> None:
    """Make `latest` name no run (best effort, as point_latest; under the same lock)."""
    root = Path(results_dir)
    with suppress(OSError), folder_lock(root):
        if (root / LATEST).is_symlink():
            (root / LATEST).unlink()
        (root / LATEST_FILE).unlink(missing_ok=True)


def point_latest(results_dir: Path, run_id: str) -> Path | None:
    """Point `results/latest` at `run_id`, best effort: a relative symlink `latest -> <run_id>`,
    made under a temp name and renamed over `latest`; where the OS makes no symlinks,
    `results/latest.json` holding `{"run_id": ...}` (and a stale symlink is removed, so the
    two never disagree).

    Runs finishing at once each point it under the results folder's lock (`folder_lock`),
    so `latest` always names a whole run and a reader never finds it missing or dangling;
    the temp link of a process killed mid-way is removed by the next pointer.

    run_eval calls it at the end of every run, a resumed one included: "latest" is the run
    a run_eval finished last, not the newest `created_at`. The pointer is a convenience, so
    an OS failure is logged as a warning (logger `evalkit`), never raised.

    Returns:
        The symlink or file written, or None when neither could be (or a real run folder
        named `latest` is in the way).
    """
    import logging

    root = Path(results_dir)
    link = root / LATEST
    log = logging.getLogger("evalkit")
    try:
        with folder_lock(root):
            if link.is_dir() and not link.is_symlink():
                log.warning("evalkit: warning: %s is a run folder, so it cannot point at the newest run", link)
                return None
            return _point_latest_locked(root, run_id)
    except (OSError, RunFolderError) as e:
        log.warning("evalkit: warning: cannot point %s at run %s: %s", link, run_id, e)
        return None


def _point_latest_locked(root: Path, run_id: str) -> Path:
    """point_latest's work, under the results folder's lock: no other pointer's temp file
    is live, so every `.latest.*.tmp` found is a killed one's."""
    link, pointer = root / LATEST, root / LATEST_FILE
    for stale in root.glob(f".{LATEST}.*.tmp"):
        with suppress(OSError):
            stale.unlink()
    tmp = root / f".{LATEST}.{os.getpid()}.tmp"
    try:
        os.symlink(run_id, tmp, target_is_directory=True)
        os.replace(tmp, link)
        pointer.unlink(missing_ok=True)
        return link
    except OSError:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
    if link.is_symlink():
        link.unlink()
    write_json_atomic(pointer, {"run_id": run_id})
    return pointer
