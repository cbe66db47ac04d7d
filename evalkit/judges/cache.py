"""The judge cache: SQLite in WAL mode, one row per (judge kind, inputs, model, prompt, temperature).

Two processes may judge into the same file at once: WAL lets readers and one writer work
together, `busy_timeout` makes a second writer wait instead of failing, and every write
is one short `INSERT OR REPLACE` transaction, so no write can be lost or half-done.

A cache is only a saving, so a damaged one never stops a run (issue 29): it is checked on
open, and a damaged file, found then or mid-run, is moved aside to
`<name>.corrupt-<UTC time>` and a new cache started in its place, with one warning.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import BadConfig, Problem, redact_data
from evalkit.store.atomic import SYMLINK_REFUSED

DEFAULT_CACHE_PATH = Path("cache/judge_cache.sqlite")
_BUSY_TIMEOUT_MS = 30_000
# The key of `JudgeCache.writable`'s probe row (never a sha256, so never a judgment's key).
_PROBE_KEY = "evalkit-write-probe"
# Below this many free bytes, an I/O error of SQLite's is taken for a full disk: a write
# of its (a page, the WAL index's 32 KiB) no longer fits.
_NEARLY_FULL = 1 << 20
# Rows read from a merge source at a time (well under SQLite's 32,766 bound parameters).
_MERGE_BATCH = 500

_COLUMNS = ("key", "kind", "model", "prompt_version", "created_at", "value")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS judgments (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    created_at REAL NOT NULL,
    value BLOB NOT NULL
)
"""
# SQLite's codes for a file that is not a sound database. Any other failure (cannot open,
# read-only, I/O error, disk full, locked) is the disk's or the permissions' doing, and
# moving the file aside would not cure it.
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
# Every command that judges has --no-cache; not all of them have --cache-path (run_eval).
_FIX = "or use --no-cache"

# The channel the CLI prints warnings through ("evalkit: warning: ..." on stderr).
log = logging.getLogger("evalkit")


# A header whose schema format or file version bytes were changed is a plain SQLITE_ERROR
# with this message; it is damage all the same (tests/integration/test_reliability_loop.py).
_DAMAGE_MESSAGES = frozenset({"unsupported file format"})
# What reading a file can raise. SQLite's message about a damaged schema quotes the file's
# bytes, and Python raises a UnicodeDecodeError instead when those are not UTF-8.
_READ_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)


def _is_damage(error: BaseException) -> bool:
    if isinstance(error, UnicodeDecodeError):
        return True
    code = getattr(error, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF in _DAMAGE_CODES) or str(error) in _DAMAGE_MESSAGES


def _reason(error: BaseException) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "SQLite reports damage in bytes that are not text"
    return str(error)


def _text(raw: bytes) -> str:
    # Damage can reach text SQLite returns (a column name, quick_check's report of a bad
    # row): undecodable bytes are shown, not raised as a UnicodeDecodeError.
    return raw.decode("utf-8", "replace")


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None if there is none: tells whether the file
    found damaged is still the one at `path`, or another process has already replaced it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _check_read_only(path: Path, *, table_required: bool = False) -> str | None:
    """`_damage` of the file at `path`, opened read-only (`_read_only`).

    Raises:
        sqlite3.DatabaseError, UnicodeDecodeError (`_READ_ERRORS`): the file could not be
            opened or read (damage or not).
    """
    conn = _read_only(path)
    try:
        return _damage(conn, table_required=table_required)
    finally:
        conn.close()


def _read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the cache at `path`: nothing written beside it.

    A read-only reader of a WAL database makes its -wal and -shm files, and cannot remove
    them when it closes (that takes a writer's checkpoint): reading a cache would leave
    two files beside it, and on a full disk fail with "disk I/O error" about a sound file.
    A database with no -wal file has no open connection and all of it is in the main file,
    so it is read as immutable (no lock, no -shm). One with a -wal is read the usual way;
    should that fail for want of space while the -wal holds nothing, it too is read as
    immutable and the files this open made are removed.

    Raises:
        sqlite3.DatabaseError, UnicodeDecodeError (`_READ_ERRORS`): it could not be opened.
    """
    uri = path.absolute().as_uri()
    wal = Path(f"{path}-wal")
    if os.path.lexists(wal):
        made_by_others = {s for s in ("-wal", "-shm") if os.path.lexists(f"{path}{s}")}  # never removed here
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=_BUSY_TIMEOUT_MS / 1000)
        conn.text_factory = _text
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL index
            return conn
        except _READ_ERRORS as e:
            conn.close()
            if _is_damage(e) or (wal.is_file() and wal.stat().st_size > 0):
                raise
            for suffix in {"-wal", "-shm"} - made_by_others:
                Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=_BUSY_TIMEOUT_MS / 1000)
    conn.text_factory = _text
    return conn


def io_reason(error: BaseException, path: Path) -> str:
    """SQLite's words for a failed read or write, with the OS's when the disk is full:
    "disk I/O error" or "database or disk is full" alone send the user to the wrong file."""
    reason = _reason(error)
    code = getattr(error, "sqlite_errorcode", None)
    if code is None or code & 0xFF not in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
        return reason
    folder = path.absolute().parent
    try:
        full = code & 0xFF == sqlite3.SQLITE_FULL or shutil.disk_usage(folder).free < _NEARLY_FULL
    except OSError:
        full = False
    return f"{reason}: {os.strerror(errno.ENOSPC)} on the disk holding {folder}" if full else reason


def _damage(conn: sqlite3.Connection, *, table_required: bool) -> str | None:
    """What is wrong with the open cache, or None: SQLite's own quick check, then the
    judgments table's columns (absent is fine in a new file, not in one in use).

    Raises:
        sqlite3.DatabaseError, UnicodeDecodeError (`_READ_ERRORS`): the file could not be read.
    """
    found = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)")]
    if found != ["ok"]:
        return f"SQLite's quick check failed: {'; '.join(found)[:300]}"
    columns = {r[1] for r in conn.execute("PRAGMA table_info(judgments)")}
    if not columns:
        return "it has no judgments table" if table_required else None
    missing = [c for c in _COLUMNS if c not in columns]
    if missing:
        return f"its judgments table lacks the column(s) {', '.join(missing)}"
    return None


def context_hash(context: Sequence[Mapping[str, Any]]) -> str:
    """sha256 over the context the judge saw: each chunk's id and text, in rank order."""
    h = hashlib.sha256()
    for chunk in context:
        h.update(orjson.dumps([chunk.get("chunk_id"), chunk.get("text") or ""]))
        h.update(b"\n")
    return h.hexdigest()


def cache_key(
    *,
    kind: str,
    question: str,
    answer: str,
    context_sha256: str,
    provider: str,
    model: str,
    prompt_version: str,
    temperature: float,
    trial: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """sha256 of the canonical JSON of everything that can change a judgment.

    `extra` carries inputs some prompts add (the correctness judge's expected key facts).
    Trial 0 has no trial field, so a single-trial run and trial 0 of `--judge-trials N`
    share entries.
    """
    parts: dict[str, Any] = {
        "kind": kind,
        "question": question,
        "answer": answer,
        "context": context_sha256,
        "provider": provider,
        "model": model,
        "prompt_version": prompt_version,
        "temperature": float(temperature),
    }
    if trial:
        parts["trial"] = int(trial)
    if extra:
        parts["extra"] = dict(extra)
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


class JudgeCache:
    """Get/put judgments by key. Safe across processes; one connection per instance.

    Never stops a run over the file's state: a damaged file is moved aside and replaced
    (repair), and a read or write that fails for another reason (the disk full, the file
    locked past the busy timeout) is a miss or a judgment left uncached, warned once.

    Args:
        path: the SQLite file (its folder is created).
        repair: what to do with a damaged file (not a database, malformed, a judgments
            table with other columns), on open or mid-run: True moves it (and its -wal and
            -shm) aside to `<name>.corrupt-<UTC time>`, starts a new cache and warns on the
            `evalkit` logger; False raises BadConfig (a cache the caller only merges into).
        label: what the cache is called in warnings and errors.
        redact: store and return values with secrets redacted (judgments); False keeps
            them exactly (the task cache's answers, which the run stores as they are).
        fix: the way round a cache that cannot be used, said in its errors (every command
            that judges has --no-cache; merge has another target).

    Attributes:
        recovered_from: where this instance last moved a damaged file, or None.
        damage: what was wrong with that file.
        last_error: why the last failed read or write failed (SQLite's message), or None.

    Raises:
        BadConfig: `path` cannot be opened (a folder, no permission, a read-only disk), or
            it is damaged and repair is False or it cannot be moved aside.
    """

    def __init__(self, path: Path = DEFAULT_CACHE_PATH, *, repair: bool = True, fix: str = _FIX,
                 label: str = "judge cache", redact: bool = True):
        self.label = label  # "task cache": the same store holds a target's answers (targets/cache.py)
        self.redact = redact  # an answer is kept exactly as given: a replayed record must not change
        self.path = Path(path)
        self.repair = repair
        self.fix = fix
        self.recovered_from: Path | None = None
        self.damage: str | None = None
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None  # None: given up mid-run, every get misses
        self._ident: tuple[int, int] | None = None
        self._warned = False
        self.last_error: str | None = None  # why the last read or write the cache failed did fail
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            why = f"cannot be made: its folder cannot be created ({e.strerror or e}); fix the path, {self.fix}"
            raise BadConfig(self._problem(why)) from None
        self._open()

    def _problem(self, message: str) -> Problem:
        return Problem(f"the {self.label} {message}", path=str(self.path))

    def _open(self) -> None:
        """Connect to a sound cache at `path`, putting a damaged file aside first."""
        problem = self._connect()
        if problem is not None:
            self._put_aside(problem)
            problem = self._connect()
            if problem is not None:  # the new file at once damaged: nothing more to try
                why = f"was moved aside, but a new one could not be started there ({problem}); check the disk, {self.fix}"
                raise BadConfig(self._problem(why))

    def _connect(self) -> str | None:
        """Open and check the file: None and `_conn` set, or what is wrong with it.

        Raises:
            BadConfig: the path cannot be opened at all (a folder, permissions, the disk).
        """
        # SQLite follows a link (and keeps its -wal beside the target): a file outside the folder.
        links = [p for p in (Path(f"{self.path}{s}") for s in ("", "-wal", "-shm", "-journal")) if p.is_symlink()]
        if links:
            raise BadConfig(Problem(f"{SYMLINK_REFUSED}, {self.fix}", path=str(links[0])))
        if self.path.exists() and not self.path.is_file():
            what = "a folder, not a file" if self.path.is_dir() else "not a regular file"
            raise BadConfig(self._problem(f"is {what}; move it away, {self.fix}"))
        self._ident = _identity(self.path)
        if self._ident is not None:
            # Read-only, so that the check writes nothing: closing a read-write connection
            # would fold or delete a damaged file's WAL, which goes aside as it was found.
            try:
                problem = _check_read_only(self.path)
            except _READ_ERRORS as e:
                # Anything but damage (a journal only a writer may roll back): the writer decides.
                problem = _reason(e) if _is_damage(e) else None
            if problem is not None:
                return problem
        conn: sqlite3.Connection | None = None
        try:
            # Autocommit (isolation_level=None): each INSERT OR REPLACE is its own transaction.
            conn = sqlite3.connect(
                str(self.path), timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            conn.text_factory = _text
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute("PRAGMA synchronous=NORMAL")
            self._retry_locked(lambda: conn.execute(_SCHEMA))
        except _READ_ERRORS as e:
            if conn is not None:
                conn.close()
            if not _is_damage(e):
                raise BadConfig(self._problem(
                    f"cannot be opened ({io_reason(e, self.path)}); check its permissions and the disk, {self.fix}")) from None
            return _reason(e)
        self._ident = self._ident or _identity(self.path)
        self._conn = conn
        return None

    def _put_aside(self, problem: str) -> None:
        """Move the damaged file and its -wal/-shm to `<name>.corrupt-<UTC time>` (a name
        not taken) and warn; nothing when another process has already replaced the file.

        Raises:
            BadConfig: repair is off, or the file cannot be moved.
        """
        if self._ident is None or _identity(self.path) != self._ident:
            return
        if not self.repair:
            raise BadConfig(self._problem(f"is damaged ({problem}); move it away or use another file"))
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest, n = self.path.with_name(f"{self.path.name}.corrupt-{stamp}"), 0
        while any(os.path.lexists(f"{dest}{s}") for s in ("", "-wal", "-shm")):
            n += 1
            dest = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        try:
            # The WAL goes first: SQLite would replay a stale WAL into the new file.
            for suffix in ("-wal", "-shm", ""):
                if os.path.lexists(f"{self.path}{suffix}"):
                    os.rename(f"{self.path}{suffix}", f"{dest}{suffix}")
        except OSError as e:
            raise BadConfig(
                self._problem(f"is damaged ({problem}) and cannot be moved aside ({e.strerror or e}); remove it, {self.fix}")
            ) from None
        self.recovered_from, self.damage = dest, problem
        log.warning(
            "evalkit: warning: the judge cache %s was damaged (%s); it was moved to %s and a new cache started: "
            "its judgments will be made again (and paid for) as they are needed",
            self.path, problem, dest,
        )

    @staticmethod
    def _retry_locked(fn: Any, attempts: int = 50) -> Any:
        # Switching to WAL needs a moment of exclusive access; busy_timeout does not cover it.
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or i == attempts - 1:
                    raise
                time.sleep(0.05)
        return None  # pragma: no cover

    def _run(self, op: Callable[[sqlite3.Connection], Any], doing: str) -> Any:
        """op(connection), under the caller's lock; None when the cache failed it.

        A failure mid-run (another process or the disk damaged the file) is checked: a
        damaged file is put aside and op tried once on the new cache; anything else is
        warned once and the op skipped.
        """
        for attempt in (0, 1):
            if self._conn is None:
                return None
            conn = self._conn
            try:
                return op(conn)
            except sqlite3.ProgrammingError:
                raise  # our bug (a closed cache, bad SQL), not the file's
            except _READ_ERRORS as e:
                self.last_error = _reason(e)
                if attempt or not self._recover(conn, e, doing):
                    return None
        return None  # pragma: no cover

    def _recover(self, conn: sqlite3.Connection, error: BaseException, doing: str) -> bool:
        """After `error` on `conn`: True when the file was damaged and a sound cache is open again."""
        if _is_damage(error):
            problem: str | None = _reason(error)
        else:
            try:
                problem = _damage(conn, table_required=True)
            except _READ_ERRORS as e:
                problem = _reason(e) if _is_damage(e) else None
        if problem is None:
            self._warn_once(f"the {self.label} {self.path} could not {doing} ({error}); the run goes on, and a "
                            "judgment not cached will be made again next time")
            return False
        self._conn = None
        conn.close()
        try:
            self._put_aside(problem)
            self._open()
        except BadConfig as e:
            self._warn_once(f"{e}; the run goes on without the {self.label}")
            return False
        return True

    def _warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("evalkit: warning: %s", message)

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored judgment for `key` (secrets redacted, also in entries older than that rule), or None."""
        with self._lock:
            row = self._run(lambda c: c.execute("SELECT value FROM judgments WHERE key = ?", (key,)).fetchone(), "read a judgment")
        if row is None:
            return None
        try:
            value = orjson.loads(row[0])
        except orjson.JSONDecodeError:
            return None  # a damaged entry is a miss: judged again and overwritten
        if not isinstance(value, dict):
            return None
        return redact_data(value) if self.redact else value

    def put(self, key: str, value: Mapping[str, Any], *, kind: str, model: str, prompt_version: str) -> bool:
        """Store (or replace) one judgment, every string in it redacted (errors.redact).

        Returns:
            Whether it was stored: False when the cache could not write it (the disk full,
            the file locked past the busy timeout, the cache given up), warned once and
            said in `last_error`. A judgment is only a saving, so most callers go on; batch
            judging, whose verdicts were paid for and exist nowhere else, keeps them.
        """
        blob = orjson.dumps(redact_data(dict(value)) if self.redact else dict(value))
        with self._lock:
            done = self._run(
                lambda c: self._retry_locked(
                    lambda: c.execute(
                        "INSERT OR REPLACE INTO judgments (key, kind, model, prompt_version, created_at, value)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (key, kind, model, prompt_version, time.time(), blob),
                    )
                ),
                "store a judgment",
            )
        if done is None and self.last_error is None:
            self.last_error = "the cache was given up earlier in this run"
        return done is not None

    def writable(self) -> str | None:
        """None when a judgment can be stored now, else why not: a probe row is written and
        removed (batch judging asks before it pays for verdicts it must store)."""
        key = f"{_PROBE_KEY}-{os.getpid()}-{time.monotonic_ns()}"
        if not self.put(key, {"probe": True}, kind="probe", model="", prompt_version=""):
            return self.last_error or "it could not store a judgment"
        with self._lock:
            self._run(lambda c: c.execute("DELETE FROM judgments WHERE key = ?", (key,)), "remove its write probe")
        return None

    def count(self) -> int:
        with self._lock:
            return int(self._run(lambda c: c.execute("SELECT COUNT(*) FROM judgments").fetchone()[0], "count its judgments") or 0)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()


@dataclass
class CacheMerge:
    """What `merge_caches` did: entries added to the target, entries it already had
    (identical), and keys both held with different judgments (the target's kept)."""

    target: Path
    added: int = 0
    same: int = 0
    conflicts: int = 0
    sources: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "added": self.added, "same": self.same, "conflicts": self.conflicts,
                "sources": self.sources}


def source_problem(path: Path, *, empty_ok: bool = False) -> str | None:
    """What keeps `path` from being read as a judge cache, or None. Opened read-only: a
    cache the user only reads from (merge's sources, stats) is never moved or changed.
    `empty_ok`: a database with no table at all is fine (a merge's target that a full disk
    stopped before it held anything)."""
    if path.is_dir():
        return "is a folder, not a judge cache file"
    if not path.is_file():
        return "no such file"
    try:
        problem = _check_read_only(path, table_required=not (empty_ok and _is_empty(path)))
    except _READ_ERRORS as e:
        return f"not a judge cache ({_reason(e)})" if _is_damage(e) else f"could not be read ({io_reason(e, path)})"
    return None if problem is None else f"not a judge cache ({problem})"


def _is_empty(path: Path) -> bool:
    """Whether the SQLite file at `path` holds no table (nothing, or only a header)."""
    conn = _read_only(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0
    finally:
        conn.close()


def merge_caches(target: str | Path, sources: Sequence[str | Path]) -> CacheMerge:
    """Copy every judgment of the `sources` caches into `target` (created if missing).

    For shards judged on different hosts, each with its own cache: merged, the next run or
    re-judge finds every verdict any shard paid for. A key names everything that can change
    a judgment (kind, inputs, model, prompt, temperature, trial), so the same key in two
    caches is the same question asked twice; the target's judgment is kept (first wins,
    like a cache hit), and a key whose stored judgments differ (a judge sampled above
    temperature 0, or a provider that changed under a pinned name) is counted as a conflict.

    Raises:
        BadConfig: a source that is missing or not a judge cache (every one named, before
            anything is written), a target that is not one (named, never moved aside), or
            the target among the sources.
    """
    target = Path(target)
    paths = [Path(s) for s in sources]
    problems = [Problem(msg, path=str(p)) for p in paths if (msg := source_problem(p)) is not None]
    if any(p.resolve() == target.resolve() for p in paths):
        problems.append(Problem("is the target itself", path=str(target), field="--into"))
    if not paths:
        problems.append(Problem("no cache to merge", field="CACHE"))
    if target.exists() and (msg := source_problem(target, empty_ok=True)) is not None:
        problems.append(Problem(f"{msg}; move it away or merge into another file", path=str(target), field="--into"))
    if problems:
        raise BadConfig(problems)
    # repair=False: the user's --into is reported, never moved aside.
    cache = JudgeCache(target, repair=False, fix="or merge into another file")
    result = CacheMerge(target=target)
    try:
        conn = cache._conn
        with cache._lock:
            for path in paths:
                try:
                    added, same, conflicts = _merge_one(conn, path)
                except _READ_ERRORS as e:
                    # Damage the quick check missed (it compares no index with its table), or the disk.
                    why = (f"not a judge cache ({_reason(e)})" if _is_damage(e)
                           else f"could not be merged into {target} ({io_reason(e, target)})")
                    raise BadConfig(Problem(f"{why}; nothing of it was merged", path=str(path))) from None
                result.added += added
                result.same += same
                result.conflicts += conflicts
                result.sources.append({"path": str(path), "added": added, "same": same, "conflicts": conflicts})
    finally:
        cache.close()
    return result


def _merge_one(conn: sqlite3.Connection, path: Path) -> tuple[int, int, int]:
    """Copy `path`'s judgments into `conn`'s cache in one transaction: (added, same, conflicts).

    The source is read through its own read-only connection (`_read_only`), not ATTACHed:
    an attached file is opened read-write, and would get a -wal and -shm of its own.
    """
    src = _read_only(path)
    try:
        rows = src.execute(f"SELECT {', '.join(_COLUMNS)} FROM judgments")
        conn.execute("BEGIN IMMEDIATE")
        try:
            added = same = conflicts = 0
            while batch := rows.fetchmany(_MERGE_BATCH):
                keys = [row[0] for row in batch]
                held = dict(conn.execute(
                    f"SELECT key, value FROM judgments WHERE key IN ({', '.join('?' * len(keys))})", keys).fetchall())
                same += sum(1 for row in batch if row[0] in held and held[row[0]] == row[-1])
                conflicts += sum(1 for row in batch if row[0] in held and held[row[0]] != row[-1])
                new = [row for row in batch if row[0] not in held]
                conn.executemany(f"INSERT OR IGNORE INTO judgments ({', '.join(_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)", new)
                added += len(new)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite has rolled back itself after some errors (a full disk)
                conn.execute("ROLLBACK")
            raise
    finally:
        src.close()
    return added, same, conflicts
