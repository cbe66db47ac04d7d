"""The scripts' door (`scripts/*.py`): run one command's typer app, or say what is missing.

Standard library only, so that it can speak when evalkit's dependencies are not installed in
the Python that runs the script (a bare `python3 scripts/run_eval.py --help` once ended in a
traceback about `typer`): it names the missing package and the README's setup commands, and
exits 2, the exit of bad input.
"""

from __future__ import annotations

import importlib
import sys

SETUP = "python -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]'"


def main(command: str) -> None:
    """Run `evalkit.cli.<command>`'s app, or exit 2 naming the package this Python lacks."""
    try:
        app = importlib.import_module(f"evalkit.cli.{command}").app
    except ModuleNotFoundError as e:
        if not e.name or e.name.split(".")[0] == "evalkit":
            raise
        print(f"evalkit: {e.name} is not installed in this Python ({sys.executable}); "
              f"install evalkit with its dependencies first (README): {SETUP}", file=sys.stderr)
        raise SystemExit(2) from None
    app()
