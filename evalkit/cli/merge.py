"""merge.py: join the shard runs of one run (`run_eval --shard I/N`) into one run folder.

`evalkit merge RUN_ID... --run-id ID` checks that the shards share one config_hash, one
eval set and one shard count, that each shard is given once and finished, and that
together they hold every selected case exactly once; then it writes results/ID/ with
results.jsonl in eval-set order and metrics.json aggregated as run_eval does, and points
`latest` at it. Exit 0 ok, 2 refused (every problem is listed; nothing is written).
"""

from __future__ import annotations

from pathlib import Path

import typer

from evalkit.cli.common import RESULTS_DIR, exit_on_known_errors, json_option, plain_metavars

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Merge the shard runs of one run (run_eval --shard I/N) into one run folder whose metrics equal a "
    "single-machine run's. Exit 0 ok, 2 refused (shards of different configs, a shard twice or missing, "
    "unfinished shards).",
)


@app.command()
def main(
    run_ids: list[str] = typer.Argument(..., metavar="RUN_IDS", help="The shard runs, one per shard index."),
    run_id: str = typer.Option(..., "--run-id", metavar="RUN_ID", help="Name of the merged run folder."),
    results_dir: Path = RESULTS_DIR,
    json_output: bool = json_option("run_id, run_dir, merged_from, n_records, aggregate_metrics; instead of the summary"),
) -> None:
    """Merge shard runs into one run."""
    with exit_on_known_errors():
        from evalkit.run.merge import merge_runs

        result = merge_runs(run_ids, run_id=run_id, results_dir=results_dir)
        if json_output:
            import orjson

            typer.echo(orjson.dumps({
                "run_id": result.run_id,
                "run_dir": str(result.run_dir),
                "merged_from": result.merged_from,
                "n_records": result.n_records,
                "aggregate_metrics": result.metrics.get("aggregate_metrics", {}),
            }).decode())
        else:
            typer.echo(
                f"evalkit: merged {len(result.merged_from)} shards ({result.n_records} records) into {result.run_dir}"
            )


plain_metavars(app)
