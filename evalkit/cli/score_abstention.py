"""score_abstention.py: (re)compute the abstention metrics of a stored run (seed 000 §3.C).

An alias of `evalkit score --abstention`, with this script's own flags and help: it calls
the same `evalkit.cli.score.score_run`. Reads results/<run_id>/results.jsonl once (streamed):
each case's `abstained` (from the target, or from the judge's fallback classifier) against
the `answerable` label of the eval set config.json names (or --eval-set), and merges
accuracy, hallucination rate, false abstention rate and the confusion matrix into
metrics.json. With --classifier, answers the target gave no `abstained` for are classified
again first. Exit 0 ok; 2 bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    RESULTS_DIR,
    RUN_ID,
    PanelledCommand,
    concurrency_option,
    json_option,
    judge_options,
    plain_metavars,
    quiet_option,
    rescore_options,
)

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="(Re)compute the abstention metrics of a run from its results.jsonl: accuracy, hallucination rate, "
    "false-abstention rate, confusion matrix; optionally re-classify answers (--classifier). Updates metrics.json. "
    "Exit 0 ok, 2 bad input. (The seed's script for `evalkit score --abstention`, with its own flags.)",
)

_J = "Classifier"
_JUDGE = judge_options(_J)
_RESCORE = rescore_options()


@app.command(cls=PanelledCommand)
def main(
    run_id: str = RUN_ID,
    results_dir: Path = RESULTS_DIR,
    eval_set: Optional[list[Path]] = _RESCORE["eval_set"],
    classifier: Optional[str] = typer.Option(
        None, "--classifier", metavar="llm|heuristic", help="Re-classify answers the target gave no `abstained` for: "
        "heuristic (refusal phrases, offline) or llm (--judge-model). (default: use the stored decisions)", rich_help_panel=_J,
    ),
    judge_provider: Optional[str] = _JUDGE["judge_provider"],
    judge_model: Optional[str] = _JUDGE["judge_model"],
    judge_base_url: Optional[str] = _JUDGE["judge_base_url"],
    allow_unpinned: bool = _JUDGE["allow_unpinned"],
    no_cache: bool = _JUDGE["no_cache"],
    cache_path: Path = _JUDGE["cache_path"],
    concurrency: int = concurrency_option("Classifier requests", _J),
    quiet: bool = quiet_option(),
    json_output: bool = json_option(
        "run_id, abstention_scoring, aggregate_metrics, by_category, warnings; printed last, the tables go to stderr"
    ),
) -> None:
    """Re-score the abstention of RUN_ID and update its metrics.json (evalkit score --abstention)."""
    from evalkit.cli.score import score_run

    score_run(
        ("abstention",), run_id=run_id, results_dir=results_dir, eval_set=eval_set, classifier=classifier,
        judge_provider=judge_provider, judge_model=judge_model, judge_base_url=judge_base_url, allow_unpinned=allow_unpinned,
        no_cache=no_cache, cache_path=cache_path, concurrency=concurrency, quiet=quiet, json_output=json_output,
        command="score_abstention.py",
    )


plain_metavars(app)
