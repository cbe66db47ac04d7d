"""The scripts' door (`scripts/*.py`): run one command's typer app, or say what is missing.

Standard library only, so that it can speak when evalkit's dependencies are not installed in
the Python that runs the script (a bare `python3 scripts/run_eval.py --help` once ended in a
traceback about `typer`): it names the missing package and the README's setup commands, and
exits 2, the exit of bad input. `--help` still prints the script's help (exit 0), from
script_help.json beside this file, which docs/tools/cli_reference.py writes from the apps.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

SETUP = "python -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]'"


def main(command: str) -> None:
    """Run `evalkit.cli.<command>`'s app, or exit 2 naming the package this Python lacks."""
    try:
        app = importlib.import_module(f"evalkit.cli.{command}").app
    except ModuleNotFoundError as e:
        if not e.name or e.name.split(".")[0] == "evalkit":
            raise
        missing = (f"evalkit: {e.name} is not installed in this Python ({sys.executable}); "
                   f"install evalkit with its dependencies first (README): {SETUP}")
        text = _stored_help() if "--help" in sys.argv[1:] else None
        if text is not None:
            print(text, end="")
            print(f"{missing} (to run it; this help was stored)", file=sys.stderr)
            raise SystemExit(0) from None
        print(missing, file=sys.stderr)
        raise SystemExit(2) from None
    app()


def _stored_help() -> str | None:
    """This script's --help as its app prints it (script_help.json), or None when not stored."""
    try:
        helps = json.loads(Path(__file__).with_name("script_help.json").read_text(encoding="utf-8"))["help"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    text = helps.get(Path(sys.argv[0]).name)
    return text if isinstance(text, str) else None
