"""`evalkit cache`: the judge cache. `merge` brings the caches of shards judged on other hosts
into one; `stats` counts what a cache holds. Exit 0 ok, 2 bad input."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from evalkit.cli.common import exit_on_known_errors, json_option, plain_metavars

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    no_args_is_help=True,
    help="The judge cache (SQLite): merge the caches of shards judged on several hosts, or count a cache's entries.",
)


@app.callback()
def _cache() -> None:
    """The judge cache."""


@app.command()
def merge(
    sources: list[Path] = typer.Argument(..., metavar="CACHE...", help="Judge cache files to copy from."),
    into: Path = typer.Option(
        Path("cache/judge_cache.sqlite"), "--into", metavar="PATH", help="The cache to merge into (created if missing)."
    ),
    as_json: bool = json_option("target, added, same, conflicts, sources; instead of the summary"),
) -> None:
    """Copy every judgment of CACHE... into --into; a key both hold keeps --into's judgment."""
    with exit_on_known_errors():
        from evalkit.judges.cache import merge_caches

        result = merge_caches(into, sources)
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        return
    for s in result.sources:
        typer.echo(f"evalkit: {s['path']}: {s['added']} added, {s['same']} already there")
    typer.echo(f"evalkit: merged {len(result.sources)} cache(s) into {into}: {result.added} judgments added")
    if result.conflicts:
        typer.echo(
            f"evalkit: warning: {result.conflicts} key(s) held different judgments; {into}'s were kept "
            "(a judge sampled above temperature 0, or a model that changed under a pinned name)",
            err=True,
        )


@app.command()
def stats(
    path: Path = typer.Argument(Path("cache/judge_cache.sqlite"), metavar="CACHE", help="The judge cache file."),
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
