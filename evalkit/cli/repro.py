"""`evalkit reproduce --run-id ID` and `run_eval.py --repro`: the CLI side of evalkit.run.repro.

Both doors end in `reproduce` below: `reproduce --run-id ID` re-runs a stored run's config
and compares; `run --repro` (an alias, documented as such) runs its config first, then
re-runs it and compares. `evalkit repro` is the old name of `reproduce`, kept hidden.

Exit 0 reproducible, 1 a difference beyond --tolerance (the report names the cases), 2 bad
input (unknown run, changed eval set, --repro with --resume/--baseline/--threshold/--matrix),
3 the first run was incomplete (no second run), 130 interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from evalkit.cli.common import (
    EXIT_GATE,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    RESULTS_DIR,
    RUN_ID,
    TOLERANCE,
    api_url_option,
    exit_on_known_errors,
    json_option,
    load_dotenv_once,
    plain_metavars,
    quiet_option,
    tolerance_option,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Re-run a stored run's config into <run id>-repro-<n> and compare the two runs record by record: "
    "retrieved chunks (ids and scores) and every per-case metric; latency and cost are not compared "
    "(`evalkit run --repro` runs a new config, then does the same). "
    "Exit 0 reproducible, 1 a difference beyond --tolerance, 2 bad input (unknown run, changed eval set), "
    "130 interrupted.",
)


def _progress_factory(quiet: bool) -> Any:
    from rich.console import Console

    from evalkit.report.run import RunProgress

    err = Console(stderr=True)

    def progress(label: str) -> Any:
        if not quiet:
            err.print(label)
        return RunProgress(err, disable=quiet)

    return progress


def _print_report(report: Any, *, quiet: bool, json_output: bool, payload: dict[str, Any]) -> int:
    """The report (or only its verdict when quiet; on stderr with --json), then the JSON
    payload; returns 0 or 1."""
    text = report.verdict() if quiet else report.render_text()
    print(text, file=sys.stderr if json_output else sys.stdout)
    if json_output:
        import orjson

        sys.stdout.write(orjson.dumps(payload).decode() + "\n")
    return EXIT_OK if report.reproducible else EXIT_GATE


def run_repro_cli(values: dict[str, Any], tolerance: float | None, *, repro: bool, refused: list[str]) -> int:
    """`run_eval.py --repro`: check the flags, then `reproduce` the run they describe; returns
    the exit code (0, 1, 3 or 130).

    Args:
        values: run_eval's settings, as given.
        tolerance: --tolerance, None when not given.
        repro: whether --repro was given (--tolerance alone is refused).
        refused: CLI-only mode flags given alongside (--matrix...), refused.

    Raises:
        BadConfig: flags that cannot go with --repro (exit 2), before anything runs.
    """
    from evalkit.errors import BadConfig, Problem

    if not repro:
        raise BadConfig(Problem("goes with --repro", field="--tolerance"))
    if refused:
        raise BadConfig([Problem("cannot be combined with --repro (it checks two fresh runs)", field=f) for f in refused])
    quiet, json_output = bool(values.pop("quiet", False)), bool(values.pop("json_output", False))
    return reproduce(
        values=values, tolerance=TOLERANCE if tolerance is None else tolerance, quiet=quiet, json_output=json_output,
    )


def reproduce(
    *,
    run_id: str | None = None,
    values: dict[str, Any] | None = None,
    results_dir: Path = Path("results"),
    tolerance: float = TOLERANCE,
    api_url: str | None = None,
    quiet: bool = False,
    json_output: bool = False,
) -> int:
    """The reproducibility check, the one implementation of `evalkit reproduce` and `run --repro`:
    re-run the stored run `run_id` (repro_stored), or run `values` twice (repro_run); compare,
    print the report; returns the exit code (0 reproducible, 1 a difference, 3 the first run was
    incomplete, 130 interrupted). Known errors raise, for exit_on_known_errors."""
    from evalkit.run.repro import repro_run, repro_stored
    from evalkit.run.result import RunInterrupted

    progress = _progress_factory(quiet)
    if values is None:
        try:
            outcome = repro_stored(run_id or "", results_dir=results_dir, tolerance=tolerance, api_url=api_url, progress=progress)
        except RunInterrupted as e:
            print(f"evalkit: interrupted; the re-run {e.run_id} is incomplete: run evalkit reproduce again", file=sys.stderr)
            return EXIT_INTERRUPTED
        report = outcome.report
        if report is None:  # repro_stored always compares; kept for the type checker
            return EXIT_INCOMPLETE
        return _print_report(report, quiet=quiet, json_output=json_output, payload=report.to_json())
    try:
        outcome = repro_run(values, tolerance=tolerance, progress=progress)
    except RunInterrupted as e:
        # --repro cannot resume: the check needs two whole runs made one after the other.
        print(f"evalkit: interrupted; {e.run_id} is incomplete: run --repro again", file=sys.stderr)
        return EXIT_INTERRUPTED
    first, report = outcome.first, outcome.report
    if first is None or report is None:
        print(
            f"evalkit: incomplete run: the target failed {first.n_errors} of {first.n_cases} cases "
            f"({first.error_rate:.1%}; --max-error-rate {first.max_error_rate:g}) in {first.run_id}; "
            "no second run: fix the target first",
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    if not quiet:
        from rich.console import Console

        from evalkit.report.run import print_run_summary

        print_run_summary(first.metrics, first.run_dir, judge=first.judge, gate=None, console=Console(stderr=json_output))
    return _print_report(report, quiet=quiet, json_output=json_output, payload={**first.to_json(), "repro": report.to_json()})


@app.command()
def main(
    run_id: str = RUN_ID,
    results_dir: Path = RESULTS_DIR,
    tolerance: float = tolerance_option(),
    api_url: Optional[str] = api_url_option(
        ": where the run's HTTP target is now (stored URLs hold no credentials, and servers move ports). "
        "Ignored for other targets.", envvar="EVAL_API_URL",
    ),
    quiet: bool = quiet_option("the verdict line"),
    json_output: bool = json_option("the report; printed last, the table goes to stderr"),
) -> None:
    """Re-run RUN_ID's config and compare the two runs."""
    load_dotenv_once()
    with exit_on_known_errors():
        code = reproduce(run_id=run_id, results_dir=results_dir, tolerance=tolerance, api_url=api_url, quiet=quiet,
                         json_output=json_output)
    raise typer.Exit(code)


plain_metavars(app)
