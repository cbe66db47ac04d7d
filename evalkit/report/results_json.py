"""results.json: a run's whole report in one machine-readable file (seed 004's artifact).

    {"schema_version": 1, "kind": "evalkit-results", "run_id", "generated_at", "n_records",
     "cases_omitted", "dataset_version" (metrics.json's), "config": config.json,
     "metrics": metrics.json, "cases": [one row per record, in run order] | null}

A case row holds what a reader of the report needs and nothing that is note text: the
case's id, trial, scenario, category, tags and answerable flag; the target error kind;
the ranked retrieved chunks as ids (`chunk_id`, else `rel_path#heading_path`) with their
final scores; `retrieval_metrics`, `expectations`, the judges' scores, the abstention
outcome and the latency. Questions and answers stay in results.jsonl (they may be private
and are large), so results.json can be committed as a baseline artifact the way seed 004
commits its own.

It is derived, like summary.md: rewritten whenever metrics.json is (summary.write_derived),
from the files on disk. Rows are streamed to the file, never held in memory; above
MAX_CASES records the rows are left out (`cases: null`, `cases_omitted: true`), since a
second pass over a 100,000-case results.jsonl would double a re-scoring's time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import orjson

from evalkit.schema import SCHEMA_VERSION
from evalkit.store.runlog import Rec
from evalkit.store.runs import RESULTS_JSON

__all__ = ["MAX_CASES", "RESULTS_JSON", "case_row", "encode_row", "render_results_json"]

MAX_CASES = 20_000
_JUDGES = (Rec.GROUNDEDNESS, Rec.CORRECTNESS)
_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _chunk_ref(chunk: Any) -> dict[str, Any] | None:
    if not isinstance(chunk, Mapping):
        return None
    cid = chunk.get("chunk_id")
    if cid is None:
        path, heading = chunk.get("rel_path"), chunk.get("heading_path")
        cid = f"{path}#{heading}" if heading else path
    return {"id": cid, "rank": chunk.get("rank"), "score": chunk.get("score_final")}


def case_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """One record's row in results.json (no question, answer or chunk text)."""
    case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
    error = record.get("error")
    kind = (error.get("kind") or "unknown") if isinstance(error, Mapping) else ("unknown" if error else None)
    judges = {}
    for name in _JUDGES:
        verdict = record.get(name)
        judges[name] = verdict.get("score") if isinstance(verdict, Mapping) else None
    quality = record.get("answer_quality")
    if isinstance(quality, Mapping):
        judges["answer_quality"] = {d: quality.get(d) for d in ("relevance", Rec.GROUNDEDNESS, "completeness")}
    abstention = record.get("abstention") if isinstance(record.get("abstention"), Mapping) else {}
    latency = record.get("latency") if isinstance(record.get("latency"), Mapping) else {}
    chunks = record.get("retrieved_chunks") if isinstance(record.get("retrieved_chunks"), list) else []
    row: dict[str, Any] = {
        Rec.CASE_ID: record.get(Rec.CASE_ID),
        Rec.CASE_INDEX: record.get(Rec.CASE_INDEX),
        "scenario": case.get("scenario"),
        "category": case.get("category"),
        "tags": case.get("tags") or [],
        "answerable": case.get("answerable"),
        "error": kind,
        "retrieved": [r for r in map(_chunk_ref, chunks) if r is not None],
        Rec.RETRIEVAL_METRICS: record.get(Rec.RETRIEVAL_METRICS),
        "expectations": record.get("expectations"),
        "judges": judges,
        "abstention": {"abstained": abstention.get("abstained"), "hallucinated": abstention.get("hallucinated")},
        "latency_ms": latency.get("total_ms"),
    }
    if "trial" in record:
        row["trial"] = record["trial"]
    return row


def encode_row(record: Mapping[str, Any]) -> bytes:
    """One record's row, as results.json holds it (JSON, no trailing newline)."""
    return orjson.dumps(case_row(record), option=_OPTS)


def render_results_json(
    config: Mapping[str, Any] | None,
    metrics: Mapping[str, Any],
    rows: Iterable[bytes] | None,
    n_records: int,
) -> Iterable[bytes]:
    """results.json's bytes, in pieces (the case rows streamed from `rows`).

    Args:
        config: config.json (None when missing).
        metrics: metrics.json as committed.
        rows: results.jsonl's records in run order, each `encode_row`d; None leaves the
            rows out.
        n_records: how many records the run has (written as `n_records`).
    """
    head = {
        "schema_version": SCHEMA_VERSION,
        "kind": "evalkit-results",
        "run_id": metrics.get("run_id"),
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "n_records": n_records,
        "cases_omitted": rows is None,
        # The labels the numbers are scored with (metrics.json's): config.json's is the eval
        # set the run asked its questions from, older than a re-scoring with other labels.
        "dataset_version": metrics.get("dataset_version"),
        "config": config,
        "metrics": metrics,
    }
    # The head, its closing brace swapped for the `cases` member that follows.
    yield orjson.dumps(head, option=_OPTS)[:-1] + b',"cases":'
    if rows is None:
        yield b"null}\n"
        return
    yield b"["
    first = True
    for row in rows:
        yield (b"\n" if first else b",\n") + row
        first = False
    yield b"\n]}\n"
