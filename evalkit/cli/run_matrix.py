"""`run_eval.py --matrix / --matrix-file / --expect-order`: the CLI side of evalkit.run.matrix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from evalkit.cli.common import EXIT_GATE, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK
from evalkit.errors import BadConfig, Problem


def run_matrix_cli(values: dict[str, Any], matrix: list[str] | None, matrix_file: Path | None, expect_order: str | None) -> int:
    """Parse the matrix flags, run it, print the table; return the exit code (0, 1 or 3).

    Raises:
        BadConfig: bad flags (exit 2 through exit_on_known_errors), before anything runs.
    """
    from rich.console import Console

    from evalkit.report.matrix import print_matrix
    from evalkit.report.run import RunProgress
    from evalkit.run.matrix import (
        MatrixInterrupted,
        load_matrix_file,
        parse_matrix_axes,
        parse_order_spec,
        run_matrix,
    )

    if matrix and matrix_file is not None:
        raise BadConfig(Problem("give --matrix or --matrix-file, not both", field="--matrix-file"))
    if not matrix and matrix_file is None:
        raise BadConfig(Problem("--expect-order needs --matrix or --matrix-file", field="--expect-order"))
    order = parse_order_spec(expect_order) if expect_order is not None else None
    presets = load_matrix_file(matrix_file) if matrix_file is not None else parse_matrix_axes(matrix or [])

    quiet, json_output = bool(values.pop("quiet", False)), bool(values.pop("json_output", False))
    console = Console(stderr=json_output)
    err = Console(stderr=True)

    def progress(preset: Any) -> Any:
        if not quiet:
            err.print(f"preset {preset.name}")
        return RunProgress(err, disable=quiet)

    try:
        result = run_matrix(values, presets, expect_order=order, progress=progress)
    except MatrixInterrupted as e:
        print(f"evalkit: interrupted; finish the matrix with {e.resume_hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if json_output:
        import orjson

        sys.stdout.write(orjson.dumps(result.to_json()).decode() + "\n")
    if not quiet:
        print_matrix(result, console=console)
    elif not json_output:
        print(result.path)
    if result.order_violated:
        print(f"evalkit: expect-order {result.order['spec']} violated", file=sys.stderr)
    if result.incomplete:
        print("evalkit: incomplete matrix: the target failed on too many cases in "
              + ", ".join(r.run_id for r in result.rows if r.incomplete), file=sys.stderr)
        return EXIT_INCOMPLETE
    if result.order_violated or result.gate_failed:
        if result.gate_failed:
            print("evalkit: gate or threshold failed in " + ", ".join(r.run_id for r in result.rows if r.gate_failed or r.thresholds_failed),
                  file=sys.stderr)
        return EXIT_GATE
    return EXIT_OK
