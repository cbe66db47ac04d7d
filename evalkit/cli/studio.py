"""studio.py: `evalkit serve-studio`, the browser workbench over an eval set, its notes and runs.

Parse the flags, check the files, then `evalkit.studio.server.serve` (Starlette and uvicorn,
the `studio` extra, are imported only here, when the command runs). Exit 0 after Ctrl-C, 2
bad input (a missing eval set or notes folder, a taken port, the extra not installed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    RESULTS_DIR,
    PanelledCommand,
    eval_set_option,
    exit_on_known_errors,
    plain_metavars,
    printable,
    settings_default,
    target_options,
)

_ASK = "Asking the chatbot now"
_TARGET = target_options(_ASK)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Serve the studio, a workbench in the browser: label gold supports case by case next to the notes and a "
    "run's retrieved chunks, over a queue of unlabeled or failed cases, with the labeler's files, checks and rules; and grade a run's answers as --grade-answers does. "
    "Listens on 127.0.0.1 only; open the printed URL (it carries this start's token). Exit 0 after Ctrl-C, 2 bad input.",
)


@app.command(cls=PanelledCommand)
def main(
    eval_set: Optional[list[Path]] = eval_set_option("An eval set file to label; repeatable."),
    vault: Path = typer.Option(Path(settings_default("vault")), "--vault", metavar="PATH",
                               show_default=False, help=f"The notes folder: browsed, searched and checked against; the in-process reference chatbot's too, without --api-url and --target. (default: {settings_default('vault')})"),
    results_dir: Path = RESULTS_DIR,
    candidates: Optional[Path] = typer.Option(
        None, "--candidates", metavar="PATH", help="Generated candidates to review (`evalkit generate --output`); with --into."),
    into: Optional[Path] = typer.Option(
        None, "--into", metavar="EVAL_SET", help="The eval set accepted candidates are added to, in its next version "
        "(eval_set.v2.jsonl; EVAL_SET is never written), as `label --review-auto --into` does."),
    api_url: Optional[str] = _TARGET["api_url"],
    target: Optional[str] = _TARGET["target"],
    param: Optional[list[str]] = _TARGET["param"],
    timeout: Optional[float] = _TARGET["timeout"],
    retries: Optional[int] = _TARGET["retries"],
    k: int = typer.Option(20, "--k", min=1, metavar="K", rich_help_panel=_ASK,
                          help="Chunks to ask for when a case page asks the chatbot now (as `evalkit label`)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, metavar="PORT", show_default=False, help="Port on 127.0.0.1. (default: any free port)"),
) -> None:
    """Serve the studio on 127.0.0.1 until Ctrl-C."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem

        default = settings_default("eval_set")  # RunSettings' default: a list of paths
        files = list(eval_set) if eval_set else [Path(p) for p in (default if isinstance(default, list) else [default])]
        missing = [p for p in files if not p.is_file()]
        if missing:
            raise BadConfig([Problem("no such eval set file", path=str(p), field="--eval-set") for p in missing])
        if not files:
            raise BadConfig(Problem("no eval set: give --eval-set FILE", field="--eval-set"))
        if not vault.is_dir():
            raise BadConfig(Problem("notes folder not found (pass --vault PATH)", path=str(vault), field="--vault"))
        try:
            from evalkit.studio.server import serve
        except ImportError as e:
            raise BadConfig(Problem(f"the studio needs starlette and uvicorn ({e.name} is missing): pip install 'evalkit[studio]'")) from None
        from evalkit.studio.project import StudioProject
        from evalkit.studio.reviewing import Review

        if (candidates is None) != (into is None):
            raise BadConfig(Problem("--candidates and --into go together: review the candidates into that eval set's next version",
                                    field="--candidates" if into is not None else "--into"))
        review = None
        if candidates is not None and into is not None:
            review = Review(candidates, into, results_dir)
            review.open()  # both files load, the new version may be written: said now, not in the browser
        project = StudioProject(files, vault, results_dir, review=review)
        from evalkit.cli.validate import build_target_from, request_settings
        from evalkit.studio.asking import LiveTarget

        timeout_s, retries_n = request_settings(timeout, retries)
        live = LiveTarget(lambda: build_target_from(target, api_url, vault, timeout_s, retries_n, param), k,
                          api_url or target or f"the reference chatbot over {vault}")

        def ready(url: str) -> None:
            typer.echo(printable(f"evalkit: studio at {url}"))
            typer.echo("evalkit: open that URL in a browser on this machine (it carries this start's token); Ctrl-C stops")

        try:
            serve(project, port=port, on_ready=ready, live=live)
        except KeyboardInterrupt:
            pass


plain_metavars(app)
