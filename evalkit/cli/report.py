"""report.py: the HTML report of a run (`--run-id`), of two runs side by side
(`--compare A B`) or of every run over time (`--trend`).

One self-contained .html file: inline CSS, JS, SVG and data, no network; a run's page holds
every case, however many (evalkit/report/html/cases.py). Exit 0 ok, 2 bad input (unknown
run, no mode or two modes given).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import RESULTS_DIR, exit_on_known_errors, plain_metavars

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Write an HTML report: one run (--run-id), two runs compared (--compare A B) or the trend of all runs "
    "(--trend). One self-contained file, no network. Exit 0 ok, 2 bad input.",
)


@app.command()
def main(
    run_id: Optional[str] = typer.Option(
        None, "--run-id", help="Report on this run: writes <results-dir>/RUN_ID/report.html (or --output)."
    ),
    compare: Optional[tuple[str, str]] = typer.Option(
        None, "--compare", metavar="RUN_A RUN_B", help="Compare two runs (A is the baseline)."
    ),
    trend: bool = typer.Option(False, "--trend", help="The metrics of every run under --results-dir over time."),
    results_dir: Path = RESULTS_DIR,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report here instead."),
) -> None:
    """Write an HTML report and print its path."""
    with exit_on_known_errors():
        path = _write(run_id, compare, trend, results_dir, output)
    typer.echo(str(path))


def _write(run_id: str | None, compare: tuple[str, str] | None, trend: bool, results_dir: Path, output: Path | None) -> Path:
    from evalkit.errors import InputError, Problem

    modes = [flag for flag, given in (("--run-id", run_id is not None), ("--compare", compare is not None), ("--trend", trend)) if given]
    if len(modes) != 1:
        what = "none" if not modes else " and ".join(modes)
        raise InputError(Problem(f"give exactly one of --run-id RUN_ID, --compare RUN_A RUN_B, --trend (got {what})", field="report"))
    if run_id is not None:
        from evalkit.derive import open_run
        from evalkit.report.html.run import write_run_report

        return write_run_report(open_run(results_dir, run_id), output=output)
    if compare is not None:
        # Built on the run report's pieces (evalkit.report.html) by its own module.
        from evalkit.report.html.compare import write_compare_report

        return write_compare_report(compare[0], compare[1], results_dir=results_dir, output=output)
    from evalkit.report.html.trend import write_trend_report

    return write_trend_report(results_dir=results_dir, output=output)


plain_metavars(app)
