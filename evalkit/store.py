"""Run folders: `results/<run_id>/` with results.jsonl, metrics.json and config.json.

results.jsonl is appended one flushed line per case, so a killed run loses at most the
line being written; the reader drops such a partial last line and resume redoes that case.
metrics.json and config.json are replaced atomically. Records are read as plain dicts
with orjson, one line at a time, so a 100,000-case run never sits in memory as models.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import BadConfig, InputError, Problem, RunNotFound

RESULTS_FILE = "results.jsonl"
METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.json"

_JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY


def config_hash(obj: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of `obj` (sorted keys, no whitespace)."""
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)).hexdigest()


def new_run_id(config_hash_hex: str, now: datetime | None = None) -> str:
    """Run ids sort by time: `YYYYMMDDTHHMMSSZ-<first 6 hex of config_hash>` (DESIGN.md §6)."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{config_hash_hex[:6]}"


def _umask_mode() -> int:
    # mkstemp creates 0600 files; results are meant to be shared (metrics.json is committed),
    # so give them the mode a plain open() would: 0666 minus the umask.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temp file in the same folder, fsync it, then os.replace over `path`."""
    _write_atomic(Path(path), orjson.dumps(obj, option=_JSON_OPTS))


def _write_atomic(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.write(b"\n")
            f.flush()
            os.fchmod(f.fileno(), _umask_mode())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def _read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise InputError(Problem(f"not valid JSON ({e})", path=str(path))) from None


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
    def create(cls, results_dir: Path, run_id: str) -> RunDir:
        """Make a new, empty run folder. BadConfig if a run with that id exists."""
        _check_run_id(run_id)
        path = Path(results_dir) / run_id
        if path.exists() and any(path.iterdir()):
            raise BadConfig(
                Problem(f"run {run_id!r} already exists at {path}; use --resume {run_id} or another --run-id")
            )
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @classmethod
    def open(cls, results_dir: Path, run_id: str, *, flag: str = "--run-id") -> RunDir:
        """Open an existing run folder. RunNotFound (exit 2) names the flag and the path looked at."""
        _check_run_id(run_id, flag)
        path = Path(results_dir) / run_id
        if not path.is_dir():
            runs = list_runs(results_dir)[:3]
            hint = f" (latest runs: {', '.join(runs)})" if runs else ""
            raise RunNotFound(Problem(f"no run {run_id!r} under {results_dir}{hint}", field=flag))
        return cls(path)

    # ------------------------------------------------------------------ results.jsonl

    def append_result(self, record: Mapping[str, Any]) -> None:
        """Append one record as one line, flushed and fsynced before returning."""
        with self.open_writer(fsync_interval=0) as writer:
            writer.write([record])

    def open_writer(self, fsync_interval: float = 1.0) -> ResultsWriter:
        """results.jsonl held open for appending batches (the runner's hot path)."""
        return ResultsWriter(self.results_path, fsync_interval=fsync_interval)

    def iter_results(self) -> Iterator[dict[str, Any]]:
        """Stream records in file order. A partial last line (killed mid-write) is skipped.

        A malformed line anywhere else is corruption, not a crash artefact: InputError.
        """
        if not self.results_path.exists():
            return
        with open(self.results_path, "rb") as f:
            pending: bytes | None = None
            lineno = 0
            for raw in f:
                if pending is not None:
                    yield self._parse_line(pending, lineno)
                pending = raw
                lineno += 1
            if pending is not None:
                if not pending.endswith(b"\n"):
                    try:
                        yield orjson.loads(pending)
                    except orjson.JSONDecodeError:
                        return  # the line being written when the run died; resume redoes it
                else:
                    yield self._parse_line(pending, lineno)

    def _parse_line(self, raw: bytes, lineno: int) -> dict[str, Any]:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise InputError(Problem(f"corrupt record ({e})", path=str(self.results_path), line=lineno)) from None

    def read_results(self) -> list[dict[str, Any]]:
        """All records, sorted by case_index (eval-set order)."""
        return sorted(self.iter_results(), key=lambda r: r.get("case_index", 0))

    def completed_ids(self) -> set[str]:
        return {r["test_case_id"] for r in self.iter_results()}

    def repair_tail(self) -> bool:
        """Truncate a partial last line left by a killed run. Returns True if it cut anything."""
        if not self.results_path.exists():
            return False
        with open(self.results_path, "rb+") as f:
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
        """Replace results.jsonl atomically with `records` (streamed to a temp file)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{RESULTS_FILE}.", suffix=".tmp", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                for record in records:
                    f.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
                f.flush()
                os.fchmod(f.fileno(), _umask_mode())
                os.fsync(f.fileno())
            os.replace(tmp, self.results_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------ json files

    def read_config(self) -> dict[str, Any]:
        if not self.config_path.exists():
            raise InputError(Problem("config.json is missing", path=str(self.path)))
        return _read_json(self.config_path)

    def write_config(self, cfg: Mapping[str, Any]) -> None:
        write_json_atomic(self.config_path, cfg)

    def read_metrics(self) -> dict[str, Any] | None:
        return _read_json(self.metrics_path) if self.metrics_path.exists() else None

    def write_metrics(self, metrics: Mapping[str, Any]) -> None:
        _write_atomic(self.metrics_path, dumps_metrics(metrics))

    def update_metrics(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge `patch` into metrics.json (see `merge_metrics`), keeping keys other scripts own."""
        merged = merge_metrics(self.read_metrics() or {}, patch)
        self.write_metrics(merged)
        return merged


class ResultsWriter:
    """Appends whole lines to results.jsonl: each write() is one write + flush.

    fsync runs when `sync_due()` says so (at most every `fsync_interval` seconds; 0 = after
    every write when the caller syncs) and at close. An fsync per record capped the runner
    at 0.70 efficiency at concurrency 16; a flushed line survives a killed process anyway,
    and a torn last line is dropped by RunDir.repair_tail on resume.
    """

    def __init__(self, path: Path, fsync_interval: float = 1.0):
        self._f = open(path, "ab")  # noqa: SIM115 - closed by close()
        self._interval = fsync_interval
        self._last_sync = time.monotonic()

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        self._f.write(b"".join(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in records))
        self._f.flush()

    def sync_due(self) -> bool:
        return time.monotonic() - self._last_sync >= self._interval

    def sync(self) -> None:
        os.fsync(self._f.fileno())
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    runs = [(_run_time(p), p.name) for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return [name for _, name in sorted(runs, reverse=True)]


def _check_run_id(run_id: str, flag: str = "--run-id") -> None:
    # A run id names a folder: no separators, no parent references.
    if not run_id or run_id in {".", ".."} or "/" in run_id or "\\" in run_id or "\0" in run_id:
        raise BadConfig(Problem(f"not a valid run id: {run_id!r}", field=flag))
