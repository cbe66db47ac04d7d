"""validate.py: check an eval set before running it.

Runs the eval set's own validation (JSON, types, a required boolean `answerable`,
misspelled field names) and, given the corpus (`--vault`, or `--api-url` of a target whose
/api/v1/index/stats lists its files), checks every gold anchor against it. Nothing is
run and nothing is written. Exit 0 clean, 1 an anchor does not match the corpus,
2 the eval set itself is invalid (or cannot be read, or bad flags).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    EXIT_INPUT,
    api_url_option,
    categories_option,
    eval_set_option,
    exit_on_known_errors,
    load_dotenv_once,
    plain_metavars,
    settings_default,
)

EXIT_ANCHOR_PROBLEMS = 1

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Validate an eval set, and check its gold anchors (files, heading paths, snippets) against "
    "the corpus when one is given. Runs nothing. Exit 0 ok, 1 anchor problems, 2 invalid eval set.",
)


@app.command()
def main(
    eval_set: Optional[list[Path]] = eval_set_option(),
    vault: Optional[Path] = typer.Option(
        None, "--vault", help="Notes folder to check anchors against: files, heading chains, snippets, line spans."
    ),
    api_url: Optional[str] = api_url_option(": check anchors' files against the `files` list of GET /api/v1/index/stats."),
    timeout: float = typer.Option(30.0, "--timeout", min=1.0, help="Seconds for the --api-url stats request."),
    categories: Optional[list[str]] = categories_option(),
) -> None:
    """Validate EVAL_SET and, with --vault or --api-url, check its gold anchors against the corpus."""
    load_dotenv_once()
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.evalset.anchorcheck import (
            corpus_from_index_stats,
            corpus_from_vault,
            validate_eval_set,
        )

        if vault is not None and api_url is not None:
            raise BadConfig(Problem("give --vault or --api-url, not both", field="--vault"))
        corpus, note = None, "anchors not checked: pass --vault PATH or --api-url URL to check them against the corpus"
        if vault is not None:
            corpus = corpus_from_vault(vault)
        elif api_url is not None:
            stats, source = _fetch_stats(api_url, timeout)
            corpus = corpus_from_index_stats(stats, source=source)
            if corpus is None:
                note = (
                    f"anchors not checked: {source} serves no /api/v1/index/stats"
                    if stats is None
                    else f"anchors not checked: {source} does not list its files (no `files` in /api/v1/index/stats)"
                )
        from evalkit.evalset.load import configured_categories

        extra = [p.strip() for c in categories or [] for p in c.split(",") if p.strip()]
        result = validate_eval_set(
            eval_set or [Path(p) for p in settings_default("eval_set")], corpus,
            extra_categories=[*configured_categories(), *extra] if extra else None,
        )

    order = {f["path"]: i for i, f in enumerate(result.eval_set.files)}
    listed = result.problems + result.anchor_problems + result.warnings
    for problem in sorted(listed, key=lambda p: (order.get(p.path, -1), p.line or 0)):
        print(problem)
    n_cases = len(result.eval_set.cases)
    if result.problems:
        print(f"evalkit: {_n(len(result.problems), 'problem')} in the eval set; fix them before running it")
    if corpus is not None:
        found = len(result.anchor_problems)
        checked = f"{_n(result.n_anchors, 'gold anchor')} of {_n(n_cases, 'case')} checked against {corpus.source}"
        scope = "" if corpus.has_outlines else " (file existence only)"
        print(f"evalkit: {checked}{scope}: " + (_n(found, "problem") if found else "all found"))
    else:
        print(f"evalkit: {note}")
    if result.warnings:
        print(f"evalkit: {_n(len(result.warnings), 'warning')}: rules that scoring cannot check as written")
    if not result.problems and not result.anchor_problems:
        print(f"evalkit: {_n(n_cases, 'case')} OK")
    if result.problems:
        raise typer.Exit(EXIT_INPUT)
    if result.anchor_problems:
        raise typer.Exit(EXIT_ANCHOR_PROBLEMS)


def _fetch_stats(api_url: str, timeout: float) -> tuple[object | None, str]:
    """GET {api_url}/api/v1/index/stats through the HTTP target (same client, retries, key)."""
    import asyncio

    from evalkit.targets.http import HttpTarget, safe_url

    async def fetch() -> object | None:
        target = HttpTarget(api_url, timeout=timeout, retries=1)
        try:
            return await target.index_stats()
        finally:
            await target.aclose()

    return asyncio.run(fetch()), f"target {safe_url(api_url)}"



def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


plain_metavars(app)
