"""`evalkit query-runs "SQL"`: one SQL statement against the results database
(`<results-dir>/runs.sqlite`, made by `evalkit index-runs`; tables in docs/sharing.md), over
a read-only connection, its rows printed as a table or, with --json, as one JSON object.
Rows behind their run folders are said on stderr. Exit 0 ok, 2 bad input (no database, an
SQL error, a statement that would write)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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
    help="Run one SQL statement against the results database <results-dir>/runs.sqlite (made by `evalkit "
    "index-runs`; tables evaluation_runs, test_results, metrics) over a read-only connection, and print its rows "
    "as a table. Exit 0 ok, 2 bad input (no database, an SQL error, a statement that writes).",
)

# A table cell longer than this is cut (with "…"); --json gives every value whole.
MAX_CELL = 80


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return value.hex()
    text = str(value).replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def format_table(columns: list[str], rows: list[tuple]) -> str:
    """Rows as plain aligned text: a header, a rule, one line per row; numbers to the right."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows) for i in range(len(columns))]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


@app.command()
def main(
    sql: str = typer.Argument(..., metavar="SQL", help="One SQL statement, e.g. \"SELECT id, timestamp FROM "
                              "evaluation_runs ORDER BY timestamp\"."),
    results_dir: Path = RESULTS_DIR,
    as_json: bool = json_option("columns, rows (each a list of values, in column order)"),
) -> None:
    """Run one SQL statement against the results database and print its rows."""
    import sqlite3
    from contextlib import closing

    import orjson

    from evalkit.errors import InputError, Problem
    from evalkit.store.resultsdb import connect_read_only, db_path, out_of_step

    path = db_path(results_dir)
    with exit_on_known_errors():
        with closing(connect_read_only(path)) as conn:
            try:
                cursor = conn.execute(sql)
                rows = cursor.fetchall()
                columns = [d[0] for d in cursor.description or []]
            except (sqlite3.Error, sqlite3.Warning) as e:
                raise InputError(Problem(f"SQL: {e}", path=str(path))) from None
            try:
                behind, gone = out_of_step(results_dir, conn)
            except sqlite3.Error:
                behind, gone = [], []  # another layout: the query said what it could
    if behind or gone:
        said = [f"{len(behind)} run(s) changed or not indexed since the database was made ({', '.join(behind[:3])}"
                f"{', …' if len(behind) > 3 else ''})" if behind else "",
                f"{len(gone)} indexed run(s) gone from the folder" if gone else ""]
        print(f"evalkit: warning: {path}: {'; '.join(s for s in said if s)}; `evalkit index-runs --results-dir "
              f"{results_dir}` brings it in step", file=sys.stderr)
    if as_json:
        values = [[v.hex() if isinstance(v, bytes) else v for v in row] for row in rows]  # a BLOB as hex, as the table shows it
        typer.echo(orjson.dumps({"columns": columns, "rows": values}).decode())
        return
    if columns:
        typer.echo(format_table(columns, rows))


plain_metavars(app)
