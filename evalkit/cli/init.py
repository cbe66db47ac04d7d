"""evalkit init: a starter project in the current (or given) folder, so `evalkit run` runs.

Writes evalkit.toml (every run setting, commented out at its default), eval_set.jsonl (a
few example cases), sample_vault/ (the notes they are about) and .gitignore lines. Refuses,
writing nothing, when evalkit.toml, eval_set.jsonl or sample_vault/ exists. Exit 0 ok, 2 when
something is in the way.
"""

from __future__ import annotations

from pathlib import Path

import typer

from evalkit.cli.common import exit_on_known_errors

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="Write a starter project (evalkit.toml, eval_set.jsonl, sample_vault/, .gitignore lines) so that "
    "`evalkit run` runs. Never overwrites: exit 2 when one of them exists.",
)


@app.command()
def main(
    folder: Path = typer.Argument(Path("."), metavar="FOLDER", help="Where to write the project (created if missing)."),
) -> None:
    """Write a starter project into FOLDER (default: here)."""
    with exit_on_known_errors():
        from evalkit.starter import init_project

        result = init_project(folder)
        for name in result.written:
            typer.echo(f"evalkit: wrote {folder / name}" + ("/" if name.endswith("/") else ""))
        if result.gitignore_added:
            typer.echo(f"evalkit: added {len([x for x in result.gitignore_added if not x.startswith('#')])} lines "
                       f"to {folder / '.gitignore'}")
        cd = "" if folder.resolve() == Path.cwd().resolve() else f"cd {folder} && "
        typer.echo(
            "\nNext:\n"
            f"  {cd}evalkit run            the example cases against the reference chatbot over sample_vault/\n"
            "  evalkit report --run-id latest   the run as an HTML page\n"
            "Your own notes: set vault (or api_url for your chatbot) in evalkit.toml, or pass --vault / --api-url."
        )
