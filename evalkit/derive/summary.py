"""Keeping a run's derived files in step with metrics.json: summary.md, results.json and
metrics.json's own `suite` block.

They are derived: every script that rewrites metrics.json (run_eval, score_retrieval,
score_abstention, judge_answers) calls `write_derived` right after its write has been
committed, so they are rendered from the files on disk. It is outside
`RunDir.write_together`: a kill between the two leaves a whole, older summary.md, and
the next script that writes metrics.json renders it again.

A failure here never fails the command or touches the run's other files: it is logged as
a warning on the `evalkit` logger (Python prints it on stderr when nothing else is set up).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.store.runs import RESULTS_JSON, SUMMARY_FILE, RunDir

if TYPE_CHECKING:
    from evalkit.report.summary_md import WorstCases

__all__ = ["render_run_summary", "write_derived", "write_results_json", "write_summary"]

log = logging.getLogger("evalkit")


def render_run_summary(
    run: RunDir,
    metrics: Mapping[str, Any] | None = None,
    worst: WorstCases | None = None,
    config: Mapping[str, Any] | None = None,
) -> str | None:
    """summary.md's text for `run`: its metrics.json (or `metrics`), config.json and the
    worst cases (`worst`, fed by the caller's own pass over the records; else streamed from
    results.jsonl here). None when the run has no metrics yet."""
    from evalkit.report.summary_md import primary_k, render_summary, worst_cases

    metrics = metrics if metrics is not None else run.read_metrics()
    if metrics is None:
        return None
    if config is None:
        config = run.read_config() if run.config_path.exists() else None
    if worst is not None:
        rows = worst.rows()
    else:
        rows = worst_cases(run.iter_results(), primary_k(metrics)) if run.results_path.exists() else None
    return render_summary(metrics, config, rows)


def write_summary(
    run: RunDir,
    metrics: Mapping[str, Any] | None = None,
    worst: WorstCases | None = None,
    config: Mapping[str, Any] | None = None,
) -> Path | None:
    """(Re)write `run`'s summary.md atomically, best effort.

    Args:
        run: the run folder.
        metrics: the metrics.json body just committed (saves a read); default: read it.
        worst: the worst cases, when the caller's pass over the records collected them
            (saves a read of results.jsonl, which is most of the cost on a large run).
        config: config.json as read (saves a read); default: read it.

    Returns:
        The path written, or None when there was nothing to summarize or it failed (warned).
    """
    try:
        text = render_run_summary(run, metrics, worst, config)
        if text is None:
            return None
        run.write_summary(text)
        return run.path / SUMMARY_FILE
    except Exception as e:  # noqa: BLE001 - derived output: never fail the command that wrote metrics.json
        log.warning("evalkit: warning: %s not written: %s", run.path / SUMMARY_FILE, e)
        return None


def _suite(run: RunDir, metrics: Mapping[str, Any], config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """metrics.json with its `suite` block recomputed from config.json's suite (--suite),
    written back when it changed; `metrics` itself when the run has no suite."""
    suite = (config or {}).get("suite")
    if not isinstance(suite, Mapping):
        return metrics
    from evalkit.metrics.suite import Suite, suite_block

    block = suite_block(metrics, Suite.from_json(suite))
    if metrics.get("suite") == block:
        return metrics
    return run.update_metrics({"suite": block})


def write_results_json(run: RunDir, metrics: Mapping[str, Any], config: Mapping[str, Any] | None) -> Path:
    """(Re)write `run`'s results.json (report/results_json.py), streaming results.jsonl."""
    from evalkit.report.results_json import MAX_CASES, render_results_json

    n = int(metrics.get("total_tests") or 0)
    records = run.iter_results() if run.results_path.exists() and n <= MAX_CASES else None
    run.write_derived(RESULTS_JSON, render_results_json(config, metrics, records, n))
    return run.path / RESULTS_JSON


def write_derived(
    run: RunDir, metrics: Mapping[str, Any] | None = None, worst: WorstCases | None = None
) -> Mapping[str, Any] | None:
    """After a script committed metrics.json: its `suite` block, summary.md, results.json.

    Best effort, like `write_summary`: a failure is a warning, never the command's.

    Returns:
        metrics.json as it now is (with the suite block), or None when there is none.
    """
    config = None
    try:
        metrics = metrics if metrics is not None else run.read_metrics()
        if metrics is None:
            return None
        config = run.read_config() if run.config_path.exists() else None
        metrics = _suite(run, metrics, config)
    except Exception as e:  # noqa: BLE001 - derived output: never fail the command that wrote metrics.json
        log.warning("evalkit: warning: the suite score of %s not written: %s", run.path, e)
        if metrics is None:
            return None
    write_summary(run, metrics, worst, config)  # config.json read once for all three
    try:
        write_results_json(run, metrics, config)
    except Exception as e:  # noqa: BLE001 - as above
        log.warning("evalkit: warning: %s not written: %s", run.path / RESULTS_JSON, e)
    return metrics
