"""The results database: every run of a results folder indexed into one SQLite file,
`<results-dir>/runs.sqlite`, for plain SQL over the runs' history (docs/sharing.md).

The run folders stay the truth; the database is an index of them, never the only copy:
`evalkit index-runs` builds it from every run folder (`rebuild`), and once it exists every
command that changes a run keeps that run's rows in step (`keep_in_step`, called where the
run's derived files are written: `evalkit.derive.summary.write_derived`, under the run's
writer lock, and by merge and redact for the run they put in place). Without the file
nothing is indexed: the index is opt-in, made when a results folder's files become unwieldy
(seed 000, "Future: Database Schema").

Tables (the seed's three, each with more columns):
`evaluation_runs` (one row per run, with its config.json and metrics.json whole),
`test_results` (one row per results.jsonl record) and `metrics` (one row per number of
metrics.json's overall cell and slices), plus `schema_version`; docs/sharing.md
says what each column holds.

Writes: WAL mode (readers never wait for the writer), `busy_timeout` (a second writer waits),
one transaction per run that deletes the run's rows and inserts them again, the run's files
read inside that transaction (so two commands indexing one run leave the later files' rows).
A failure to index (a damaged or locked file, a full disk) never fails the command or
touches the run: it is a warning, and the run's rows are left as they were. Each run row
records the stamp (inode, size, mtime) of the files it was read from, so a row that is
behind its folder is seen (`fresh_runs`, `out_of_step`), and `evalkit index-runs` brings
the whole file back in step.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import InputError, Problem
from evalkit.store.runlog import Cell, Cfg, Met, Rec, Rm, Verdict
from evalkit.store.runs import (
    CONFIG_FILE,
    METRICS_FILE,
    RESULTS_DB,
    RESULTS_FILE,
    RunDir,
    list_runs,
)

__all__ = [
    "DB_FILE", "DB_SCHEMA_VERSION", "Rebuilt", "connect_read_only", "db_path", "fresh_runs", "index_run",
    "keep_in_step", "out_of_step", "rebuild",
]

DB_FILE = RESULTS_DB
# The tables' layout; a database of another version is rebuilt by `evalkit index-runs`, and
# left alone (a warning) by the commands that keep it in step.
DB_SCHEMA_VERSION = 1
_BUSY_TIMEOUT_S = 30.0

log = logging.getLogger("evalkit")

# The seed's tables (000, "Future: Database Schema") with their columns first, as the seed
# names them, then evalkit's. `references` is an SQL keyword: quote it ("references").
_TABLES = (
    """CREATE TABLE schema_version (version INTEGER NOT NULL)""",
    """CREATE TABLE evaluation_runs (
    id TEXT PRIMARY KEY,
    timestamp TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    llm_model TEXT,
    embedding_model TEXT,
    hardware_info TEXT,
    rag_params TEXT,
    total_tests INTEGER,
    llm_judge_cost REAL,
    scored_at TEXT,
    dataset_version TEXT,
    cases_version TEXT,
    eval_set_commit_hash TEXT,
    k INTEGER,
    target TEXT,
    judge_model TEXT,
    git_commit TEXT,
    evalkit_version TEXT,
    n_records INTEGER NOT NULL,
    config_json TEXT NOT NULL,
    metrics_json TEXT NOT NULL,
    config_stamp TEXT,
    metrics_stamp TEXT,
    results_stamp TEXT,
    indexed_at TEXT NOT NULL
)""",
    """CREATE TABLE test_results (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    test_case_id TEXT NOT NULL,
    question TEXT NOT NULL,
    answer TEXT NOT NULL,
    "references" TEXT,
    faithfulness_score REAL,
    faithfulness_reasoning TEXT,
    retrieval_metrics TEXT,
    execution_time_ms REAL,
    error TEXT,
    record_index INTEGER NOT NULL,
    case_index INTEGER,
    trial INTEGER,
    category TEXT,
    difficulty TEXT,
    domain TEXT,
    answerable INTEGER,
    tags TEXT,
    k INTEGER,
    recall_at_k REAL,
    mrr REAL,
    precision_at_k REAL,
    ndcg_at_k REAL,
    correctness_score REAL,
    abstained INTEGER,
    hallucinated INTEGER,
    error_kind TEXT,
    judge_cost_usd REAL,
    FOREIGN KEY (run_id) REFERENCES evaluation_runs(id)
)""",
    """CREATE TABLE metrics (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    metric_name TEXT NOT NULL,
    metric_value REAL NOT NULL,
    category TEXT,
    n INTEGER,
    FOREIGN KEY (run_id) REFERENCES evaluation_runs(id)
)""",
    "CREATE INDEX test_results_run ON test_results (run_id)",
    "CREATE INDEX test_results_case ON test_results (test_case_id)",
    "CREATE INDEX metrics_run ON metrics (run_id)",
    "CREATE INDEX metrics_name ON metrics (metric_name, category)",
)
_RUN_COLUMNS = 25
_TEST_COLUMNS = 29
_METRIC_COLUMNS = 6


def db_path(results_dir: str | Path) -> Path:
    """The results database of a results folder."""
    return Path(results_dir) / DB_FILE


# ---------------------------------------------------------------------------- reading a run


class NotIndexable(InputError):
    """A run folder the index leaves out (no metrics.json yet, unreadable files); says why."""


def _stamp(path: Path) -> str | None:
    """What tells a file's version apart cheaply: inode (an atomic write is a new file),
    size and mtime in ns; None when there is no file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def _num(value: Any) -> float | None:
    """A finite number as a float; None for anything else (bools, text, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _flag(value: Any) -> int | None:
    return int(value) if isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _get(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


@dataclass
class _RunRows:
    run: tuple
    tests: list[tuple] = field(default_factory=list)
    metrics: list[tuple] = field(default_factory=list)


def _test_row(run_id: str, i: int, rec: Mapping[str, Any]) -> tuple:
    case = rec.get(Rec.CASE) if isinstance(rec.get(Rec.CASE), Mapping) else {}
    rm = rec.get(Rec.RETRIEVAL_METRICS) if isinstance(rec.get(Rec.RETRIEVAL_METRICS), Mapping) else {}
    grounded = rec.get(Rec.GROUNDEDNESS) if isinstance(rec.get(Rec.GROUNDEDNESS), Mapping) else {}
    error = rec.get(Rec.ERROR)
    abstention = rec.get(Rec.ABSTENTION)
    answerable = case.get("answerable")
    tags = case.get("tags")
    return (
        f"{run_id}/{i}", run_id, str(rec.get(Rec.CASE_ID, "")), _text(rec.get(Rec.QUESTION)) or "",
        _text(rec.get(Rec.ANSWER)) or "", _json(rec.get(Rec.REFERENCES)),
        _num(grounded.get(Verdict.SCORE)), _text(grounded.get(Verdict.REASONING)), _json(rm or None),
        _num(_get(rec, Rec.LATENCY, Rec.TOTAL_MS)),
        error if isinstance(error, str) else _json(error),
        i, _int(rec.get(Rec.CASE_INDEX)), _int(rec.get(Rec.TRIAL)),
        _text(case.get("category")), _text(case.get("difficulty")), _text(case.get("domain")),
        _flag(answerable), _json(tags) if isinstance(tags, list) else None,
        _int(rm.get(Rm.K)), _num(rm.get("recall_at_k")), _num(rm.get("mrr")), _num(rm.get("precision_at_k")),
        _num(rm.get("ndcg_at_k")), _num(_get(rec, Rec.CORRECTNESS, Verdict.SCORE)),
        _flag(_get(abstention, Rec.ABSTAINED)), _flag(_get(abstention, Rec.HALLUCINATED)),
        _text(_get(error, Rec.KIND)), _num(_get(rec, Rec.COST, Rec.JUDGE_COST_USD)),
    )


def _cell_rows(run_id: str, scope: str, cell: Mapping[str, Any]) -> Iterator[tuple]:
    """(id, run_id, metric_name, metric_value, category, n) of every number in a metrics.json
    cell: its keys by name (`mrr_avg`), nested ones dotted (`latency.p95_ms`), every K's as
    `<metric>@<K>` (`recall_any@10`); n is how many cases the number is over, where the cell
    says (its `n`, or the K's `n_by_metric`)."""
    ns = cell.get(Cell.N) if isinstance(cell.get(Cell.N), Mapping) else {}

    def walk(prefix: str, obj: Mapping[str, Any], n_of: Callable[[str], Any]) -> Iterator[tuple]:
        for key, value in obj.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping):
                yield from walk(f"{name}.", value, lambda _k: None)
            elif (v := _num(value)) is not None:
                yield (f"{run_id}|{scope}|{name}", run_id, name, v, scope, _int(n_of(str(key))))

    for key, value in cell.items():
        if key == Cell.N:
            continue
        if key == Cell.AT_K and isinstance(value, Mapping):
            for k, at in value.items():
                if not isinstance(at, Mapping):
                    continue
                by = at.get("n_by_metric") if isinstance(at.get("n_by_metric"), Mapping) else {}
                for m, v in at.items():
                    if m in ("n", "n_by_metric") or (x := _num(v)) is None:
                        continue
                    name = f"{m}@{k}"
                    yield (f"{run_id}|{scope}|{name}", run_id, name, x, scope, _int(by.get(m, at.get("n"))))
        elif isinstance(value, Mapping):
            yield from walk(f"{key}.", value, lambda _k: None)
        elif (v := _num(value)) is not None:
            yield (f"{run_id}|{scope}|{key}", run_id, key, v, scope, _int(ns.get(key)))


def _metric_rows(run_id: str, metrics: Mapping[str, Any]) -> Iterator[tuple]:
    """The rows of metrics.json's overall cell (category "overall") and of each slice, its
    category named as compare_runs names a scope (`compare.cases.scope_name`, a layer above
    this one): `by_category` + `multi_hop` -> `category:multi_hop`."""
    if isinstance(metrics.get(Met.AGGREGATE), Mapping):
        yield from _cell_rows(run_id, "overall", metrics[Met.AGGREGATE])
    for grouping in Met.GROUPINGS:
        slices = metrics.get(grouping)
        if isinstance(slices, Mapping):
            for name, cell in slices.items():
                if isinstance(cell, Mapping):
                    yield from _cell_rows(run_id, f"{grouping.removeprefix('by_')}:{name}", cell)


def _read_run(run: RunDir) -> _RunRows:
    """A run's rows from its folder: config.json, metrics.json and every record.

    Raises:
        NotIndexable: no metrics.json (an unfinished run), or a file that cannot be read.
    """
    stamps = {name: _stamp(run.path / name) for name in (CONFIG_FILE, METRICS_FILE, RESULTS_FILE)}  # before reading
    if stamps[METRICS_FILE] is None:
        raise NotIndexable(Problem(f"no {METRICS_FILE} yet (unfinished or interrupted run)", path=str(run.path)))
    try:
        config = run.read_config() if stamps[CONFIG_FILE] is not None else {}
        metrics = run.read_metrics() or {}
        tests = [_test_row(run.run_id, i, rec) for i, rec in enumerate(run.iter_results())]
    except InputError as e:
        raise NotIndexable(e.problems) from None
    agg = metrics.get(Met.AGGREGATE) if isinstance(metrics.get(Met.AGGREGATE), Mapping) else {}
    versions = config.get("versions") if isinstance(config.get("versions"), Mapping) else {}
    created = config.get(Cfg.CREATED_AT) or metrics.get(Met.TIMESTAMP)
    if not isinstance(created, str) or not created:
        created = datetime.fromtimestamp(run.path.stat().st_mtime, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    row = (
        run.run_id, created, str(config.get(Cfg.CONFIG_HASH) or metrics.get(Met.CONFIG_HASH) or ""),
        _text(versions.get("llm_model")), _text(versions.get("embedding_model")), _json(config.get("hardware")),
        _json(_get(config, Cfg.TARGET, "params")), _int(metrics.get(Met.TOTAL_TESTS)),
        _num(_get(agg, Cell.COST, "judge_total_usd")),
        _text(metrics.get(Met.TIMESTAMP)), _text(metrics.get(Met.DATASET_VERSION) or config.get(Cfg.DATASET_VERSION)),
        _text(metrics.get(Met.CASES_VERSION)), _text(metrics.get(Met.EVAL_SET_COMMIT_HASH)),
        _int(agg.get(Cell.K)), _text(_get(config, Cfg.TARGET, "kind")), _text(_get(config, Cfg.JUDGE, "model")),
        _text(_get(config, "git", "commit")), _text(config.get("evalkit_version")), len(tests),
        _json(config), _json(metrics), stamps[CONFIG_FILE], stamps[METRICS_FILE], stamps[RESULTS_FILE],
        datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    return _RunRows(row, tests, list(_metric_rows(run.run_id, metrics)))


# ---------------------------------------------------------------------------- the database


class StaleSchema(InputError):
    """The file holds another layout of the tables (an older or newer evalkit made it)."""


def _connect(path: Path) -> sqlite3.Connection:
    """A writing connection: autocommit (transactions are begun by hand), WAL, a busy wait."""
    conn = sqlite3.connect(str(path), timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection (SQLite's `mode=ro`: no statement can change the file).

    Raises:
        InputError: there is no database at `path`.
    """
    if not path.is_file():
        raise InputError(Problem(f"no results database here; `evalkit index-runs --results-dir {path.parent}` builds it",
                                 path=str(path)))
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=_BUSY_TIMEOUT_S)


def _version(conn: sqlite3.Connection) -> int | None:
    """The schema version the file holds; None for a file with no tables yet."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone() is None:
        return None
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row is not None else None


def _create(conn: sqlite3.Connection) -> None:
    """Drop every table and index and create this version's (inside the caller's transaction)."""
    for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'").fetchall():
        if kind == "table":
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    for statement in _TABLES:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (DB_SCHEMA_VERSION,))


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")  # the write lock now: the files are read under it
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _write(conn: sqlite3.Connection, rows: _RunRows) -> None:
    run_id = rows.run[0]
    conn.execute("DELETE FROM test_results WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
    conn.execute(f"INSERT OR REPLACE INTO evaluation_runs VALUES ({', '.join('?' * _RUN_COLUMNS)})", rows.run)
    conn.executemany(f"INSERT INTO test_results VALUES ({', '.join('?' * _TEST_COLUMNS)})", rows.tests)
    conn.executemany(f"INSERT OR REPLACE INTO metrics VALUES ({', '.join('?' * _METRIC_COLUMNS)})", rows.metrics)


def _forget(conn: sqlite3.Connection, run_id: str) -> None:
    conn.execute("DELETE FROM test_results WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM evaluation_runs WHERE id = ?", (run_id,))


def index_run(run: RunDir, path: Path | None = None) -> int:
    """(Re)index one run into the database at `path` (default: the one beside the run): one
    transaction that replaces the run's rows with what its files hold now. A run without
    metrics.json has its rows removed. Returns how many records were indexed.

    Raises:
        StaleSchema: the file holds another schema version (`evalkit index-runs` rebuilds it).
        NotIndexable: a file of the run cannot be read (its old rows are kept).
        sqlite3.Error, OSError: the database could not be written (nothing of it changed).
    """
    path = path if path is not None else db_path(run.path.parent)
    with closing(_connect(path)) as conn:
        with _transaction(conn):
            version = _version(conn)
            if version is None:
                _create(conn)
            elif version != DB_SCHEMA_VERSION:
                raise StaleSchema(Problem(f"holds schema version {version}, this evalkit writes {DB_SCHEMA_VERSION}; "
                                          "`evalkit index-runs` rebuilds it", path=str(path)))
            try:
                rows = _read_run(run)
            except NotIndexable:
                if _stamp(run.metrics_path) is not None:
                    raise
                _forget(conn, run.run_id)
                return 0
            _write(conn, rows)
    return len(rows.tests)


def keep_in_step(run: RunDir) -> bool:
    """After a command changed `run`: its rows in the results database beside it, when that
    database exists (`evalkit index-runs` made it). Best effort: a failure is a warning naming
    the way back (`evalkit index-runs`), never the command's, and the run is not touched.
    Returns whether the run was indexed."""
    root = run.path.parent
    if root.name.startswith("."):
        return False  # a run built in a hidden stage (store.runs.staged_run): indexed once in place
    path = db_path(root)
    try:
        if not path.is_file():
            return False
        index_run(run, path)
        return True
    except Exception as e:  # noqa: BLE001 - an index: never fail the command that changed the run
        reason = "; ".join(p.message for p in e.problems) if isinstance(e, InputError) else str(e) or type(e).__name__
        log.warning("evalkit: warning: %s: run %s not indexed: %s; `evalkit index-runs --results-dir %s` rebuilds it",
                    path, run.run_id, reason, root)
        return False


@dataclass
class Rebuilt:
    """What `rebuild` did."""

    path: Path
    runs: int = 0
    records: int = 0
    metrics: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (run id, why)
    replaced_damaged: bool = False


def rebuild(results_dir: str | Path, *, on_run: Callable[[str], None] | None = None) -> Rebuilt:
    """Build `<results_dir>/runs.sqlite` afresh from every run folder under `results_dir`:
    the tables dropped and made again (one transaction), then each run, oldest first, in its
    own transaction. A file that is not an SQLite database (damaged) is replaced. Runs that
    cannot be indexed (no metrics.json yet, unreadable files) are skipped and listed.
    `on_run(run_id)` is called as each run's rows are written, before its commit.

    Raises:
        InputError: `results_dir` is not a folder.
        sqlite3.Error, OSError: the database could not be written.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError(Problem(f"{root}: results folder not found", field="--results-dir"))
    out = Rebuilt(db_path(root))
    if not out.path.exists():
        for suffix in ("-wal", "-shm"):  # left by a database removed by hand: SQLite would replay that WAL into the new file
            Path(f"{out.path}{suffix}").unlink(missing_ok=True)
    try:
        conn = _open_checked(out.path)
    except sqlite3.DatabaseError as e:
        if getattr(e, "sqlite_errorcode", None) not in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            raise
        for suffix in ("", "-wal", "-shm"):  # an index, never the only copy: made again
            Path(f"{out.path}{suffix}").unlink(missing_ok=True)
        out.replaced_damaged = True
        conn = _connect(out.path)
    with closing(conn):
        with _transaction(conn):
            _create(conn)
        for run_id in reversed(list_runs(root)):
            run = RunDir(root / run_id)
            with _transaction(conn):
                try:
                    run.recover()  # an update a killed command left half-done, as RunDir.open does
                    rows = _read_run(run)
                except InputError as e:
                    out.skipped.append((run_id, "; ".join(p.message for p in e.problems)))
                    continue
                _write(conn, rows)
                if on_run is not None:
                    on_run(run_id)
            out.runs += 1
            out.records += len(rows.tests)
            out.metrics += len(rows.metrics)
    return out


def _open_checked(path: Path) -> sqlite3.Connection:
    """`_connect`, then a read of its tables: a damaged file raises here, not mid-rebuild."""
    conn = _connect(path)
    try:
        _version(conn)
    except BaseException:
        conn.close()
        raise
    return conn


# ---------------------------------------------------------------------------- reading it back


def fresh_runs(results_dir: str | Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """{run id: (config.json, metrics.json)} of the indexed runs whose folder's config.json
    and metrics.json are the very files the index read (same stamp): what the trend page takes
    from the database instead of the folder. Empty without a database, or with one that
    cannot be read (warned): the folders are read then."""
    path = db_path(results_dir)
    if not path.is_file():
        return {}
    root = Path(results_dir)
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    try:
        with closing(connect_read_only(path)) as conn:
            if _version(conn) != DB_SCHEMA_VERSION:
                return {}
            rows = conn.execute(
                "SELECT id, config_stamp, metrics_stamp, config_json, metrics_json FROM evaluation_runs").fetchall()
        for run_id, config_stamp, metrics_stamp, config, metrics in rows:
            folder = root / run_id
            if (config_stamp is not None and config_stamp == _stamp(folder / CONFIG_FILE)
                    and metrics_stamp == _stamp(folder / METRICS_FILE)):
                out[run_id] = (orjson.loads(config), orjson.loads(metrics))
    except (sqlite3.Error, OSError, orjson.JSONDecodeError, InputError) as e:
        log.warning("evalkit: warning: %s not read (%s); the run folders are read instead", path, e)
        return {}
    return out


def out_of_step(results_dir: str | Path, conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """(runs whose folder changed since they were indexed or that are not indexed, indexed
    runs whose folder is gone). Runs without metrics.json (unfinished) are not counted."""
    root = Path(results_dir)
    indexed = {
        run_id: (c, m, r) for run_id, c, m, r in
        conn.execute("SELECT id, config_stamp, metrics_stamp, results_stamp FROM evaluation_runs").fetchall()
    }
    behind = []
    for run_id in reversed(list_runs(root)):
        folder = root / run_id
        now = tuple(_stamp(folder / name) for name in (CONFIG_FILE, METRICS_FILE, RESULTS_FILE))
        if (now[1] is not None or run_id in indexed) and indexed.get(run_id) != now:
            behind.append(run_id)
    gone = sorted(r for r in indexed if not (root / r).is_dir())
    return behind, gone
