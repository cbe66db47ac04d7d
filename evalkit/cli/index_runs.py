"""`evalkit index-runs`: build the results database (`<results-dir>/runs.sqlite`) afresh from
every run folder under --results-dir (evalkit.store.resultsdb). Once it exists, every command
that changes a run keeps that run's rows in step; this command is the way back whenever the
database is missing, damaged, of an older layout, or behind its folders. Exit 0 ok (runs that
cannot be indexed are listed and skipped), 2 bad input (no results folder, the database
cannot be written)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from evalkit.cli.common import (
    RESULTS_DIR,
    exit_on_known_errors,
    json_option,
    plain_metavars,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Index every run under --results-dir into the results database <results-dir>/runs.sqlite (SQLite), "
    "made afresh: one row per run, per case result and per metric, for plain SQL (`evalkit query-runs`, or any "
    "SQLite client) and the trend page. Once it exists, every command that changes a run keeps it in step. "
    "Exit 0 ok, 2 bad input.",
)


@app.command()
def main(
    results_dir: Path = RESULTS_DIR,
    as_json: bool = json_option("database, runs, records, metrics, skipped [{run_id, reason}]"),
) -> None:
    """Index every run folder into the results database, made afresh."""
    import sqlite3

    import orjson

    from evalkit.errors import InputError, Problem
    from evalkit.store.resultsdb import db_path, rebuild

    with exit_on_known_errors():
        try:
            out = rebuild(results_dir)
        except sqlite3.Error as e:
            raise InputError(Problem(f"cannot write the results database: {e}", path=str(db_path(results_dir)))) from None
    if as_json:
        typer.echo(orjson.dumps({
            "database": str(out.path), "runs": out.runs, "records": out.records, "metrics": out.metrics,
            "skipped": [{"run_id": r, "reason": why} for r, why in out.skipped],
        }).decode())
        return
    if out.replaced_damaged:
        print(f"evalkit: note: {out.path} was not a sound SQLite database; made again", file=sys.stderr)
    for run_id, why in out.skipped:
        print(f"evalkit: note: run {run_id} not indexed: {why}", file=sys.stderr)
    typer.echo(f"{out.path}: {out.runs} run(s), {out.records} case result(s), {out.metrics} metric value(s)"
               + (f"; {len(out.skipped)} run(s) skipped" if out.skipped else ""))


plain_metavars(app)
