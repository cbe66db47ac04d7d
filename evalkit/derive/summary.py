"""Keeping a run's derived files in step with metrics.json: summary.md, results.json,
report.html (when the run has one), metrics.json's own `suite` block, and the run's rows in
the results database when the results folder has one (`evalkit.store.resultsdb`).

They are derived: every script that rewrites metrics.json (run_eval, score_retrieval,
score_abstention, judge_answers, evalkit merge) calls `write_derived` right after its write
has been committed, so they are rendered from the files on disk. It is outside
`RunDir.write_together`, so a kill between the two would leave them older than
metrics.json; but every metrics.json write first leaves the run's `.derive-pending` mark,
which `write_derived` removes only once all of them are written, and `open_run` (the next
command that opens the run) derives them again when it finds the mark (issue 29 item 6).

A failure here never fails the command or touches the run's other files: it is logged as
a warning on the `evalkit` logger (Python prints it on stderr when nothing else is set up),
and the mark stays, so the next `open_run` tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.store.runlog import Met
from evalkit.store.runs import (
    REPORT_FILE,
    RESULTS_DB,
    RESULTS_JSON,
    SUMMARY_FILE,
    RunBusy,
    RunDir,
)

if TYPE_CHECKING:
    from evalkit.report.summary_md import WorstCases

__all__ = ["open_run", "rederive_pending", "render_run_summary", "write_derived", "write_results_json", "write_summary"]

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


def write_results_json(
    run: RunDir, metrics: Mapping[str, Any], config: Mapping[str, Any] | None, rows: Iterable[bytes] | None = None
) -> Path:
    """(Re)write `run`'s results.json (report/results_json.py): its case rows are `rows`
    when the caller made them from every record in file order (`RecordPass`), else
    streamed from results.jsonl."""
    from evalkit.report.results_json import MAX_CASES, encode_row, render_results_json

    n = int(metrics.get(Met.TOTAL_TESTS) or 0)
    if n > MAX_CASES:
        rows = None
    elif rows is None and run.results_path.exists():
        rows = map(encode_row, run.iter_results())
    run.write_derived(RESULTS_JSON, render_results_json(config, metrics, rows, n))
    return run.path / RESULTS_JSON


def write_report(run: RunDir) -> Path | None:
    """Re-render `run`'s report.html when it has one (`evalkit report` made it): a page
    left from before a re-scoring would contradict metrics.json. None when there is none."""
    if not (run.path / REPORT_FILE).is_file():
        return None
    from evalkit.report.html.run import write_run_report

    return write_run_report(run)


def write_derived(
    run: RunDir,
    metrics: Mapping[str, Any] | None = None,
    worst: WorstCases | None = None,
    rows: Iterable[bytes] | None = None,
) -> Mapping[str, Any] | None:
    """After a script committed metrics.json: its `suite` block, summary.md, results.json
    and report.html (when the run has one); then the run's `.derive-pending` mark goes.
    `worst` and `rows` (results.json's case rows), when given, were taken from the records
    in file order, which are then not read again.

    Best effort, like `write_summary`: a failure is a warning, never the command's, and
    it leaves the mark for the next `open_run`.

    Returns:
        metrics.json as it now is (with the suite block), or None when there is none.
    """
    config = None
    ok = True
    try:
        metrics = metrics if metrics is not None else run.read_metrics()
        if metrics is not None:
            config = run.read_config() if run.config_path.exists() else None
            metrics = _suite(run, metrics, config)
    except Exception as e:  # noqa: BLE001 - derived output: never fail the command that wrote metrics.json
        log.warning("evalkit: warning: the suite score of %s not written: %s", run.path, e)
        ok = False
    try:
        # Read after the suite block's own write; a metrics.json written later keeps its mark.
        mark = run.derive_pending()
    except Exception as e:  # noqa: BLE001 - as above
        log.warning("evalkit: warning: %s: %s", run.path, e)
        mark = None
    if metrics is None:
        if ok and mark is not None:  # no metrics.json: nothing derived from it can be stale
            _clear_mark(run, mark)
        return None
    ok = write_summary(run, metrics, worst, config) is not None and ok  # config.json read once for all
    try:
        write_results_json(run, metrics, config, rows)
    except Exception as e:  # noqa: BLE001 - as above
        log.warning("evalkit: warning: %s not written: %s", run.path / RESULTS_JSON, e)
        ok = False
    try:
        write_report(run)
    except Exception as e:  # noqa: BLE001 - as above
        log.warning("evalkit: warning: %s not written: %s", run.path / REPORT_FILE, e)
        ok = False
    if ok and mark is not None:
        _clear_mark(run, mark)
    _index(run)
    return metrics


def _index(run: RunDir) -> None:
    """The run's rows in the results database, when the results folder has one (best
    effort, warned: `evalkit.store.resultsdb.keep_in_step`). Last, so the stamps it records
    are of metrics.json as this command leaves it."""
    if (run.path.parent / RESULTS_DB).is_file():  # one stat: nothing is imported or opened without one
        from evalkit.store.resultsdb import keep_in_step

        keep_in_step(run)


def _clear_mark(run: RunDir, mark: str) -> None:
    try:
        run.clear_derive_pending(mark)
    except Exception as e:  # noqa: BLE001 - derived output; the next open_run derives again
        log.warning("evalkit: warning: %s: %s", run.path, e)


def rederive_pending(run: RunDir) -> bool:
    """Recovery's last step: when a command died after changing metrics.json and before
    rendering the files derived from it (the `.derive-pending` mark), render them now,
    from metrics.json as it is, through `write_derived`. Returns whether it did.

    Under the run's writer lock: while another command changes the run the mark is its own
    (it renders them when it is done), and a reader rendering them from the metrics.json it
    read could write over newer ones. Best effort, like `write_derived`: an unreadable mark
    or a lock that cannot be taken is a warning."""
    try:
        if run.derive_pending() is None:
            return False
        with run.writer("derive"):
            write_derived(run)
        return True
    except RunBusy:
        return False
    except Exception as e:  # noqa: BLE001 - derived output: never fail the command that opened the run
        log.warning("evalkit: warning: %s: %s", run.path, e)
        return False


def open_run(results_dir: str | Path, run_id: str, *, flag: str = "--run-id") -> RunDir:
    """`RunDir.open` (which settles an interrupted update and removes temp files), then
    `rederive_pending`: a run opened here has summary.md, results.json and report.html in
    step with its metrics.json, whatever command was killed before.

    Raises:
        As `RunDir.open`.
    """
    run = RunDir.open(Path(results_dir), run_id, flag=flag)
    rederive_pending(run)
    return run
