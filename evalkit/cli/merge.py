"""merge.py: join the shards of one run: their run folders (`run_eval --shard I/N`) and the
judge caches they filled on several hosts. The one door for both (`evalkit cache merge` is a
hidden alias of `merge --cache`, the same `merge_shards` below).

`evalkit merge RUN_ID... --run-id ID` checks that the shards share one config_hash, one
eval set and one shard count, that each shard is given once and finished, and that
together they hold every selected case exactly once; then it writes results/ID/ with
results.jsonl in eval-set order and metrics.json aggregated as run_eval does, and points
`latest` at it. `--cache CACHE` (repeatable) copies every judgment of each judge cache into
`--into` (a key both hold keeps --into's). Exit 0 ok, 2 refused (every problem is listed;
nothing is written).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from evalkit.cli.common import (
    RESULTS_DIR,
    exit_on_known_errors,
    json_option,
    plain_metavars,
)
from evalkit.store.runlog import Met

# evalkit.judges.cache.DEFAULT_CACHE_PATH (a test holds them equal); --help does not import the judges.
CACHE_PATH = Path("cache/judge_cache.sqlite")

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Merge the shard runs of one run (run_eval --shard I/N) into one run folder whose metrics equal a "
    "single-machine run's, and (--cache) the judge caches the shards filled on several hosts into one. Exit 0 ok, "
    "2 refused (shards of different configs, a shard twice or missing, unfinished shards, a damaged cache).",
)


def into_option() -> Any:
    """`--into`, the judge cache merged into (merge --cache and its alias cache merge)."""
    return typer.Option(CACHE_PATH, "--into", metavar="PATH", help="The judge cache to merge into (created if missing).")


@app.command()
def main(
    run_ids: Optional[list[str]] = typer.Argument(
        None, metavar="RUN_IDS", help="The shard runs, one per shard index (none with --cache alone).", show_default=False,
    ),
    run_id: Optional[str] = typer.Option(None, "--run-id", metavar="RUN_ID", help="Name of the merged run folder (with RUN_IDS)."),
    results_dir: Path = RESULTS_DIR,
    cache: Optional[list[Path]] = typer.Option(
        None, "--cache", metavar="CACHE", help="A judge cache file to copy every judgment from into --into; repeatable.",
    ),
    into: Path = into_option(),
    json_output: bool = json_option(
        "run_id, run_dir, merged_from, n_records, aggregate_metrics (and cache: target, added, same, conflicts, sources); "
        "with --cache alone the cache's object; instead of the summary"
    ),
) -> None:
    """Merge shard runs into one run, and the judge caches of the shards into one."""
    merge_shards(run_ids or [], run_id=run_id, results_dir=results_dir, caches=cache or [], into=into, json_output=json_output)


def merge_shards(
    run_ids: list[str],
    *,
    run_id: str | None,
    results_dir: Path = Path("results"),
    caches: list[Path],
    into: Path = CACHE_PATH,
    json_output: bool = False,
) -> None:
    """Merge the shard runs `run_ids` into `run_id`, then the judge caches `caches` into `into`;
    print what was merged (one JSON object with json_output). The one implementation of
    `evalkit merge` and `evalkit cache merge`. Exits 2 on refused input."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem

        if not run_ids and not caches:
            raise BadConfig(Problem("give the shard runs (RUN_IDS --run-id ID), --cache CACHE, or both", field="RUN_IDS"))
        if run_ids and not run_id:
            raise BadConfig(Problem("name the merged run: --run-id ID", field="--run-id"))
        if run_id and not run_ids:
            raise BadConfig(Problem("goes with the shard runs to merge (RUN_IDS)", field="--run-id"))
    payload: dict[str, Any] = {}
    if run_ids:
        with exit_on_known_errors():
            from evalkit.run.merge import merge_runs

            result = merge_runs(run_ids, run_id=run_id, results_dir=results_dir)
        payload = {
            "run_id": result.run_id,
            "run_dir": str(result.run_dir),
            "merged_from": result.merged_from,
            "n_records": result.n_records,
            Met.AGGREGATE: result.metrics.get(Met.AGGREGATE, {}),
        }
        if not json_output:
            typer.echo(f"evalkit: merged {len(result.merged_from)} shards ({result.n_records} records) into {result.run_dir}")
    if caches:
        with exit_on_known_errors():
            from evalkit.judges.cache import merge_caches

            merged = merge_caches(into, caches)
        if not json_output:
            for s in merged.sources:
                typer.echo(f"evalkit: {s['path']}: {s['added']} added, {s['same']} already there")
            typer.echo(f"evalkit: merged {len(merged.sources)} cache(s) into {into}: {merged.added} judgments added")
        if merged.conflicts and not json_output:
            typer.echo(
                f"evalkit: warning: {merged.conflicts} key(s) held different judgments; {into}'s were kept "
                "(a judge sampled above temperature 0, or a model that changed under a pinned name)",
                err=True,
            )
        payload = {**payload, "cache": merged.to_json()} if run_ids else merged.to_json()
    if json_output:
        if run_ids:
            import orjson

            typer.echo(orjson.dumps(payload).decode())
        else:
            typer.echo(json.dumps(payload))


plain_metavars(app)
