"""`evalkit promote`: move chosen questions of a run or a question log into an eval set, to label.

The library is evalkit.authoring.promote (what a promoted case holds, how it is written).
Exit 0 ok (also when nothing matched); 2 bad input (unknown run or id, an unreadable log or
filter, a locked eval set, an --output that is not a version of it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import exit_on_known_errors, force_option, json_option, plain_metavars, results_dir_option

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Move chosen questions of a run (--run-id) or a question log (--log) into an eval set as unlabeled cases "
    "(no gold_supports, label_source promoted): by --ids, or by a filter on their judge scores such as "
    "--where 'context_relevance<0.5'. Exit 0 ok, 2 bad input.",
)


@app.command()
def main(
    eval_set: Path = typer.Option(..., "--eval-set", metavar="PATH", help="The eval set file to add the questions to."),
    run_id: Optional[str] = typer.Option(
        None, "--run-id", metavar="RUN_ID", help="Take the questions of this stored run (with its judge scores)."
    ),
    log: Optional[Path] = typer.Option(
        None, "--log", metavar="PATH", help="Take the questions of a JSONL log: one object a line with `question`, "
        "optionally `id` and scores a system gave (numbers under the score names)."
    ),
    results_dir: Path = results_dir_option(),
    ids: Optional[str] = typer.Option(None, "--ids", metavar="IDS", help="Comma-separated ids of the questions to take."),
    where: Optional[list[str]] = typer.Option(
        None, "--where", metavar="FILTER", help="Keep questions whose score passes, e.g. context_relevance<0.5 "
        "(context_relevance, groundedness, correctness, answer_quality; <, <=, >, >=, =; comma-separated or repeated: "
        "all must hold). A question without that score never passes."
    ),
    limit: Optional[int] = typer.Option(
        None, "--limit", min=1, metavar="N", help="Add at most N questions: the worst by the first --where's score "
        "(questions skipped as already in the eval set do not count)."
    ),
    tag: Optional[list[str]] = typer.Option(None, "--tag", metavar="TAG", help="Also tag every new case TAG (repeatable)."),
    output: Optional[Path] = typer.Option(
        None, "--output", metavar="PATH", help="Write a new version here instead of editing --eval-set "
        "(e.g. eval_set.v2.jsonl; an existing version of it is added to)."
    ),
    force: bool = force_option(" (kept as .bak; needed when it is not a version of --eval-set)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be added; write nothing."),
    json_output: bool = json_option("written, backed_up, promoted [{id, source_id}], skipped [{source_id, reason}]"),
) -> None:
    """Add the chosen questions to --eval-set (or --output) as cases waiting for gold."""
    with exit_on_known_errors():
        from evalkit.authoring.promote import candidates_from_log, candidates_from_run, parse_filters, promote, select
        from evalkit.errors import BadConfig, Problem

        if (run_id is None) == (log is None):
            raise BadConfig(Problem("give --run-id or --log (one of them)", field="--run-id"))
        filters = parse_filters(where or [])
        if run_id is not None:
            candidates, origin = candidates_from_run(results_dir, run_id), {"run_id": run_id}
        else:
            assert log is not None
            candidates, origin = candidates_from_log(log), {"log": str(log)}
        id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None
        # --limit counts what is added: a question already in the eval set does not take a place
        chosen = select(candidates, ids=id_list, filters=filters, worst_first=limit is not None)
        result = promote(eval_set, chosen, origin=origin, output=output, force=force, results_dir=results_dir,
                         tags=tag or (), filters=filters, dry_run=dry_run, limit=limit)
    if json_output:
        import orjson

        typer.echo(orjson.dumps({**result.to_json(), "dry_run": dry_run, "matched": len(chosen),
                                 "candidates": len(candidates)}).decode())
        return
    verb = "would add" if dry_run else "added"
    where_to = result.written or (output or eval_set)
    typer.echo(f"evalkit: {len(chosen)} of {len(candidates)} questions chosen; {verb} {len(result.promoted)} to {where_to}")
    for new, src in result.promoted:
        typer.echo(f"  {new}  <- {src}")
    for src, why in result.skipped:
        typer.echo(f"  skipped {src}: {why}")
    if result.backed_up is not None:
        typer.echo(f"evalkit: the old {output} is kept as {result.backed_up}")
    if result.promoted and not dry_run:
        typer.echo(f"evalkit: label them: evalkit label --eval-set {where_to} (they wait in its default queue)")


plain_metavars(app)
