"""The two sides of a comparison: run folders, saved baseline files and bare metrics.json files.

A side is a `RunSource`: its metrics.json body, its config.json (when known) and, when it
has them, its per-case records, streamed. Three kinds:

- `run`: `results/<run_id>/` (RunDir), records streamed from results.jsonl;
- `baseline`: a `baseline.json` written by `save_baseline` (`--save-baseline PATH`): the
  run's metrics.json and config.json plus one slim record per case, so one small committed
  file supports everything a run folder does (paired tests, flips, drift);
- `metrics`: a bare metrics.json (seed 001's baseline.json): aggregate deltas and the gate
  only. A metrics.json inside a run folder that still has its results.jsonl is read as
  that run folder.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

import orjson

from evalkit.errors import InputError, Problem
from evalkit.jsonio import MAX_WRITTEN_DEPTH, loads
from evalkit.metrics.aggregate import GROUPINGS
from evalkit.store.atomic import write_atomic
from evalkit.store.runlog import Cell, Met, Rec
from evalkit.store.runs import (
    CONFIG_FILE,
    METRICS_FILE,
    RESULTS_FILE,
    RunDir,
    run_id_problem,
)

__all__ = ["BASELINE_KIND", "RunSource", "each_run", "open_source", "ranked_chunks", "save_baseline", "slim_record"]

BASELINE_KIND = "evalkit-baseline"
BASELINE_SCHEMA_VERSION = 1
# Chunks kept per case in a baseline file: what a flip shows as "retrieved instead".
_BASELINE_CHUNKS = 3
# metrics.json keys a baseline file leaves out: slices are recomputed from its records.
_BASELINE_METRICS_DROPPED = GROUPINGS
# A run folder whose results.jsonl is smaller is read in this process: a fork costs more than it saves.
_FORK_MIN_BYTES = 16 << 20
_T = TypeVar("_T")


@dataclass
class RunSource:
    """One side of a comparison. `records` holds a baseline file's slim records."""

    run_id: str
    kind: Literal["run", "baseline", "metrics"]
    path: Path
    metrics: dict[str, Any]
    config: dict[str, Any] | None
    run: RunDir | None = None
    records: list[dict[str, Any]] | None = None

    @property
    def has_records(self) -> bool:
        return self.run is not None or self.records is not None

    def iter_records(self, ids: Container[str] | None = None) -> Iterator[dict[str, Any]]:
        """Per-case records in file order (nothing for a bare metrics.json); `ids`: a run
        folder's lines of other cases may be skipped unparsed (`RunDir.iter_results`)."""
        if self.run is not None:
            yield from self.run.iter_results(ids=ids)
        elif self.records is not None:
            yield from self.records

    @property
    def ks(self) -> list[int]:
        """The run's cut-offs, primary K first (metrics.json `ks`, else its `k`)."""
        ks = self.metrics.get("ks")
        if isinstance(ks, list) and ks and all(isinstance(k, int) and not isinstance(k, bool) for k in ks):
            return list(dict.fromkeys(ks))
        k = (self.metrics.get(Met.AGGREGATE) or {}).get("k")
        if isinstance(k, int) and not isinstance(k, bool):
            return [k]
        raise InputError(Problem("metrics.json names no K (neither `ks` nor `aggregate_metrics.k`)", path=str(self.path)))


def each_run(fn: Callable[..., _T], a: RunSource, b: RunSource, *args: Any, **kwargs: Any) -> tuple[_T, _T]:
    """(fn(a, ...), fn(b, ...)), run b's in a forked process while this one does run a's.

    A pass over one run's records is Python-bound and independent of the other run's, so on
    two cores the two take the time of one. This process does both, one after the other, when
    a fork cannot help or is unsafe: one CPU, no fork (not Linux), another thread running
    (forking it can deadlock), run b not a run folder of at least 16 MB; and when the forked
    pass fails, this process redoes it and so raises its error itself.
    """
    size = 0
    if b.run is not None and (os.cpu_count() or 1) > 1 and sys.platform == "linux" and threading.active_count() == 1:
        try:
            size = b.run.results_path.stat().st_size
        except OSError:
            pass
    if size < _FORK_MIN_BYTES:
        return fn(a, *args, **kwargs), fn(b, *args, **kwargs)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        theirs = pool.submit(fn, b, *args, **kwargs)
        ours = fn(a, *args, **kwargs)
        try:
            return ours, theirs.result()
        except Exception:  # noqa: BLE001 - any failure of the fork: redo here, which reports it properly
            return ours, fn(b, *args, **kwargs)


def asked_k(source: RunSource) -> int:
    """How many chunks the run asked its target for: metrics.json's `invariants.asked_k`
    (run_eval records it, and run_eval's gate reads it too), else the largest K of
    config.json's settings (a re-score with score_retrieval may have changed metrics.json's
    `ks` to smaller K, but not what was retrieved), else the largest K metrics.json names."""
    inv = source.metrics.get(Met.INVARIANTS) if isinstance(source.metrics.get(Met.INVARIANTS), dict) else {}
    if isinstance(inv.get("asked_k"), int) and not isinstance(inv.get("asked_k"), bool):
        return int(inv["asked_k"])
    settings = (source.config or {}).get("settings") or {}
    ks = [k for k in settings.get("k") or [] if isinstance(k, int) and not isinstance(k, bool)]
    return max(ks) if ks else max(source.ks)


def _load_json(path: Path, flag: str) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(Problem(f"cannot read: {e.strerror or e}", path=str(path), field=flag)) from None
    return loads(raw, max_depth=MAX_WRITTEN_DEPTH, path=str(path), field=flag)  # issue 29: bounded, said at its line


def _from_run(run: RunDir, flag: str) -> RunSource:
    metrics = run.read_metrics()
    if metrics is None:
        raise InputError(Problem(f"run {run.path.name} has no {METRICS_FILE} (did it finish?)", path=str(run.path), field=flag))
    config = run.read_config() if run.config_path.exists() else None
    return RunSource(run.path.name, "run", run.path, metrics, config, run=run)


def _run_folder(path: Path) -> bool:
    return path.is_dir() and (path / RESULTS_FILE).exists() and run_id_problem(path.name) is None


def open_source(spec: str | Path | RunDir, results_dir: str | Path = "results", *, flag: str = "--run-id") -> RunSource:
    """Open one side: a run id under `results_dir`, a run folder, a baseline.json or a metrics.json.

    A string that names a folder under `results_dir` is a run id; otherwise it is read as
    a path. A metrics.json whose folder still holds results.jsonl is read as that run.

    Raises:
        RunNotFound: neither a run under results_dir nor an existing path.
        InputError: a file that is not JSON, not a metrics.json or a baseline.json, or a
            run without metrics.json.
    """
    if isinstance(spec, RunDir):
        return _from_run(spec, flag)
    text = str(spec)
    if isinstance(spec, str) and run_id_problem(text) is None and (Path(results_dir) / text).is_dir():
        return _from_run(RunDir.open(Path(results_dir), text, flag=flag), flag)
    path = Path(spec)
    if path.is_dir():
        if (path / METRICS_FILE).exists() or (path / RESULTS_FILE).exists():
            return _from_run(RunDir.open(path.parent, path.name, flag=flag), flag)
        raise InputError(Problem(f"{path} is a folder but not a run folder (no {METRICS_FILE})", field=flag))
    if path.is_file():
        if path.name == METRICS_FILE and _run_folder(path.parent):
            return _from_run(RunDir.open(path.parent.parent, path.parent.name, flag=flag), flag)
        return _from_file(path, flag)
    if isinstance(spec, str) and "/" not in text and not text.endswith(".json"):
        # Looks like a run id: RunDir.open says which runs exist.
        return _from_run(RunDir.open(Path(results_dir), text, flag=flag), flag)
    raise InputError(Problem(f"no such file or run: {text}", field=flag))


def _from_file(path: Path, flag: str) -> RunSource:
    data = _load_json(path, flag)
    if not isinstance(data, dict):
        raise InputError(Problem("expected a JSON object (a metrics.json or a baseline.json)", path=str(path), field=flag))
    if data.get("kind") == BASELINE_KIND:
        version = data.get("schema_version")
        if version != BASELINE_SCHEMA_VERSION:
            raise InputError(Problem(f"baseline schema_version {version!r} is not {BASELINE_SCHEMA_VERSION}", path=str(path), field=flag))
        metrics, records = data.get("metrics"), data.get("records")
        if not isinstance(metrics, dict) or not isinstance(records, list):
            raise InputError(Problem("a baseline file needs `metrics` (object) and `records` (list)", path=str(path), field=flag))
        bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
        if bad is not None:  # like a results.jsonl line that is `42`: said here, not met as an `int` later
            raise InputError(Problem(f"`records` item {bad + 1} is not a JSON object", path=str(path), field=flag))
        config = data.get("config") if isinstance(data.get("config"), dict) else None
        run_id = str(data.get("run_id") or metrics.get("run_id") or path.stem)
        return RunSource(run_id, "baseline", path, metrics, config, records=records)
    if not isinstance(data.get(Met.AGGREGATE), dict):
        raise InputError(
            Problem("not a metrics.json (no `aggregate_metrics`) nor a baseline.json (no `kind`)", path=str(path), field=flag)
        )
    config = None
    sibling = path.parent / CONFIG_FILE
    if path.name == METRICS_FILE and sibling.is_file():
        loaded = _load_json(sibling, flag)
        config = loaded if isinstance(loaded, dict) else None
    run_id = str(data.get("run_id") or path.stem)
    return RunSource(run_id, "metrics", path, data, config)


def _ref(item: Any) -> dict[str, Any]:
    item = item if isinstance(item, Mapping) else {}
    return {"rel_path": item.get("rel_path"), "heading_path": item.get("heading_path")}


def ranked_chunks(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A record's retrieved chunks in rank order (by `rank` when present, stably; EVAL.md)."""
    with_rank: list[Mapping[str, Any]] = []
    without: list[Mapping[str, Any]] = []
    for c in record.get("retrieved_chunks") or []:
        if isinstance(c, Mapping):
            rank = c.get("rank")
            (with_rank if isinstance(rank, int | float) and not isinstance(rank, bool) else without).append(c)
    return sorted(with_rank, key=lambda c: c["rank"]) + without


def slim_record(record: Mapping[str, Any], *, first: bool = False) -> dict[str, Any]:
    """The fields of a results.jsonl record that aggregation and comparison read, and no more.

    Kept: the case's id, question, slicing fields (a conversation turn's place among them)
    and gold anchors, a turn's history; the answer and its
    references (anchors only); the top chunks (anchors and rank, no text); the retrieval
    metrics; judge scores and judge errors; abstention; the error kind; latency and cost.
    `indexing_coverage` is kept on the first record only (aggregation reads the first one).
    """
    case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
    rm = record.get(Rec.RETRIEVAL_METRICS) if isinstance(record.get(Rec.RETRIEVAL_METRICS), Mapping) else {}
    out: dict[str, Any] = {
        Rec.CASE_ID: record.get(Rec.CASE_ID, case.get("id")),
        Rec.CASE_INDEX: record.get(Rec.CASE_INDEX),
        "case": {
            **{key: case.get(key) for key in ("id", "answerable", "tags", "category", "difficulty", "domain")},
            **{key: case[key] for key in ("language", "doc_language", "conversation") if case.get(key) is not None},
            "gold_supports": [_ref(s) for s in (case.get("gold_supports") or [])],
        },
        "question": record.get("question") or case.get("question"),
        "answer": record.get("answer"),
        "references": [_ref(r) for r in (record.get("references") or [])],
        "retrieved_chunks": [{**_ref(c), "rank": c.get("rank")} for c in ranked_chunks(record)[:_BASELINE_CHUNKS]],
        Rec.RETRIEVAL_METRICS: {
            key: rm.get(key)
            for key in ("k", Cell.AT_K, "scope_miss", "attribution_hit", "first_match_rank", "status")
            if key in rm
        },
    }
    if record.get("history") is not None:  # a conversation turn: what it was sent, as flips show it
        out["history"] = record["history"]
    recency = rm.get("recency")
    if isinstance(recency, Mapping):
        out[Rec.RETRIEVAL_METRICS]["recency"] = {"pass": recency.get("pass")}
    for judge in (Rec.GROUNDEDNESS, Rec.CORRECTNESS):
        verdict = record.get(judge)
        if isinstance(verdict, Mapping):
            out[judge] = {"score": verdict.get("score")}
    errors = [e for e in (record.get(Rec.JUDGE_ERRORS) or []) if isinstance(e, Mapping)]
    if errors:
        out[Rec.JUDGE_ERRORS] = [{"judge": e.get("judge")} for e in errors]
    abstention = record.get("abstention")
    if isinstance(abstention, Mapping):
        out["abstention"] = {"abstained": abstention.get("abstained")}
    error = record.get("error")
    if error:
        out["error"] = {"kind": error.get("kind") if isinstance(error, Mapping) else "unknown"}
    if isinstance(record.get("latency"), Mapping):
        out["latency"] = {key: v for key, v in record["latency"].items() if key.endswith("_ms")}
    cost = record.get("cost")
    if isinstance(cost, Mapping):
        out["cost"] = {"judge_cost_usd": cost.get("judge_cost_usd"), "judge_tokens": cost.get("judge_tokens")}
    validity = record.get("response_validity")
    if isinstance(validity, Mapping):
        out["response_validity"] = {"valid": validity.get("valid")}
    if record.get(Rec.REFERENCES_DROPPED):
        out[Rec.REFERENCES_DROPPED] = record[Rec.REFERENCES_DROPPED]
    if first and record.get(Rec.INDEXING_COVERAGE) is not None:
        out[Rec.INDEXING_COVERAGE] = record[Rec.INDEXING_COVERAGE]
    return out


def save_baseline(source: RunSource, path: str | Path) -> Path:
    """Write `source` as a baseline file: its metrics.json (without the slices, which are
    recomputed from the records), config.json and one slim record per case.

    The file is meant to be committed: one record per line, so a diff shows the cases that
    changed. Written atomically (temp file, fsync, rename); parent folders are created.

    Args:
        source: a run folder or another baseline file (a bare metrics.json has no records).
        path: the file to write.

    Returns:
        The path written.

    Raises:
        InputError: the source has no per-case records, or the file cannot be written.
    """
    if not source.has_records:
        raise InputError(
            Problem(f"{source.path} is a bare metrics.json: a baseline needs the run's results.jsonl", field="--save-baseline")
        )
    from evalkit import __version__

    records, seen_coverage = [], False
    for record in source.iter_records():
        slim = slim_record(record, first=not seen_coverage)
        seen_coverage = seen_coverage or Rec.INDEXING_COVERAGE in slim
        records.append(slim)
    records.sort(key=lambda r: (r.get(Rec.CASE_INDEX) is None, r.get(Rec.CASE_INDEX) or 0, str(r.get(Rec.CASE_ID))))
    head = {
        "kind": BASELINE_KIND,
        "schema_version": BASELINE_SCHEMA_VERSION,
        "run_id": source.run_id,
        "saved_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "evalkit_version": __version__,
        "config": source.config,
        "metrics": {k: v for k, v in source.metrics.items() if k not in _BASELINE_METRICS_DROPPED},
    }
    opts = orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
    lines = [b"{"] + [b"  " + orjson.dumps(k) + b": " + orjson.dumps(v, option=opts) + b"," for k, v in head.items()]
    lines.append(b'  "records": [')
    lines += [b"    " + orjson.dumps(r, option=opts) + (b"," if i < len(records) - 1 else b"") for i, r in enumerate(records)]
    lines += [b"  ]", b"}", b""]
    out = Path(path)
    try:
        write_atomic(out, b"\n".join(lines))
    except OSError as e:
        raise InputError(Problem(f"cannot write the baseline: {e.strerror or e}", path=str(out), field="--save-baseline")) from None
    return out
