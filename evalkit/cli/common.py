"""Shared CLI options and the mapping from known errors to exit codes (DESIGN.md §4, §9)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from evalkit.errors import GateFailed, InputError

RESULTS_DIR = typer.Option(Path("results"), "--results-dir", help="Folder holding run folders.")
RUN_ID = typer.Option(..., "--run-id", help="Run id (a folder name under --results-dir).")
CONCURRENCY = typer.Option(4, "--concurrency", min=1, help="Requests in flight at once (1 = sequential).")
RPS = typer.Option(None, "--rps", min=0.0, help="At most this many requests per second (default: no limit).")

EXIT_OK, EXIT_GATE, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def load_dotenv_once() -> None:
    """Read `.env` from the working directory into the environment (never overrides)."""
    try:
        from dotenv import load_dotenv
    except ImportError:  # pragma: no cover - dependency of the package
        return
    load_dotenv(Path.cwd() / ".env", override=False)


@contextmanager
def exit_on_known_errors(resume_hint: str | None = None) -> Iterator[None]:
    """Turn expected failures into exit codes; let everything else crash loudly.

    InputError -> one line per problem on stderr, exit 2.
    GateFailed -> the regressions, exit 1.
    KeyboardInterrupt -> a resume hint, exit 130.
    """
    try:
        yield
    except InputError as e:
        for line in e.render().splitlines():
            print(f"evalkit: {line}", file=sys.stderr)
        raise typer.Exit(EXIT_INPUT) from None
    except GateFailed as e:
        print("evalkit: regression gate failed:", file=sys.stderr)
        for r in e.regressions:
            print(f"  - {r}", file=sys.stderr)
        raise typer.Exit(EXIT_GATE) from None
    except KeyboardInterrupt:
        msg = "interrupted"
        if resume_hint:
            msg += f"; resume with: {resume_hint}"
        print(f"evalkit: {msg}", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None
