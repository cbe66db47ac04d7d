"""`evalkit show-cache` counts what a judge cache holds. The `evalkit cache` group is the old
door, kept as a hidden alias: `cache stats` is `show-cache` (the same `stats` below) and
`cache merge` is `evalkit merge --cache` (the same merge.merge_shards). Exit 0 ok, 2 bad input."""

from __future__ import annotations

from pathlib import Path

import typer

from evalkit.cli.common import exit_on_known_errors, json_option, plain_metavars
from evalkit.cli.merge import CACHE_PATH, into_option

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    no_args_is_help=True,
    help="The judge cache (SQLite), old door: `cache merge` is `evalkit merge --cache`, `cache stats` is "
    "`evalkit show-cache`.",
)


@app.callback()
def _cache() -> None:
    """The judge cache."""


@app.command()
def merge(
    sources: list[Path] = typer.Argument(..., metavar="CACHE...", help="Judge cache files to copy from."),
    into: Path = into_option(),
    as_json: bool = json_option("target, added, same, conflicts, sources; instead of the summary"),
) -> None:
    """Copy every judgment of CACHE... into --into; a key both hold keeps --into's judgment (evalkit merge --cache)."""
    from evalkit.cli.merge import merge_shards

    merge_shards([], run_id=None, caches=sources, into=into, json_output=as_json)


@app.command(help="The old name of `evalkit show-cache`: count a cache's judgments by judge kind and model.")
def stats(
    path: Path = typer.Argument(CACHE_PATH, metavar="CACHE", help="The judge cache file."),
) -> None:
    """Count a cache's judgments by judge kind and model."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.judges.cache import source_problem

        problem = source_problem(path)
        if problem is not None:
            raise BadConfig(Problem(problem, path=str(path)))
    import sqlite3

    with sqlite3.connect(str(path)) as conn:
        rows = conn.execute(
            "SELECT kind, model, prompt_version, COUNT(*) FROM judgments GROUP BY kind, model, prompt_version ORDER BY 1, 2, 3"
        ).fetchall()
    total = sum(r[3] for r in rows)
    typer.echo(f"{path}: {total} judgments")
    for kind, model, prompt, n in rows:
        typer.echo(f"  {kind:<16} {model:<32} {prompt:<24} {n}")


plain_metavars(app)
