"""redact.py: a shareable copy of a run folder, with note text replaced by salted hashes.

Writes results/<run_id>-redacted/ (or --output): questions, answers, chunk text, judge
reasons, snippets and expected answers become `redacted:<hmac>`; ids, anchors, scores and
metrics stay. Exit 0 ok; 2 bad input (unknown run, the output folder exists).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import RESULTS_DIR, RUN_ID, exit_on_known_errors, plain_metavars

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Write a shareable copy of a run: question, answer, chunk, judge and snippet text replaced by salted "
    "hashes (HMAC-SHA256); ids, anchors, scores and metrics kept. Exit 0 ok, 2 bad input.",
)


@app.command()
def main(
    run_id: str = RUN_ID,
    results_dir: Path = RESULTS_DIR,
    output: Optional[Path] = typer.Option(
        None, "--output", help="Folder to write (must not exist). (default: <results-dir>/<run_id>-redacted)"
    ),
    salt: Optional[str] = typer.Option(
        None, "--salt", envvar="EVALKIT_REDACT_SALT", metavar="TEXT",
        help="Secret HMAC key. Give the same one to two redactions to compare them (equal texts, equal hashes). "
        "(default: random, used once and not stored; also read from EVALKIT_REDACT_SALT)",
    ),
) -> None:
    """Write a redacted copy of RUN_ID."""
    with exit_on_known_errors():
        from evalkit.interop.redact import redact_run

        out = redact_run(run_id, results_dir=results_dir, output=output, salt=salt)
    print(out)


plain_metavars(app)
