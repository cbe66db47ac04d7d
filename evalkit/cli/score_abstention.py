"""score_abstention.py: (re)compute the abstention metrics of a stored run.

Reads results/<run_id>/results.jsonl once (streamed): each case's `abstained` (from the
target, or from the judge's fallback classifier) against the `answerable` label of the eval
set config.json names (or --eval-set), and merges accuracy, hallucination rate, false
abstention rate and the confusion matrix into metrics.json. With --classifier, answers the
target gave no `abstained` for are classified again first. Exit 0 ok; 2 bad input.
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
    emit_scoring,
    exit_on_known_errors,
    json_option,
    judge_options,
    load_dotenv_once,
    plain_metavars,
    quiet_option,
    rescore_options,
)

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="(Re)compute the abstention metrics of a run from its results.jsonl: accuracy, hallucination rate, "
    "false-abstention rate, confusion matrix; optionally re-classify answers (--classifier). Updates metrics.json. "
    "Exit 0 ok, 2 bad input.",
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
    """Re-score the abstention of RUN_ID and update its metrics.json."""
    load_dotenv_once()
    with exit_on_known_errors():
        from evalkit.rescore.scoring import score_abstention

        settings = None
        if classifier == "llm":
            from evalkit.judges import JudgeSettings

            settings = JudgeSettings(
                provider=judge_provider, model=judge_model, base_url=judge_base_url, allow_unpinned=allow_unpinned,
                use_cache=not no_cache, cache_path=cache_path, concurrency=concurrency,
            )
        result = score_abstention(
            run_id, eval_set=eval_set or None, results_dir=results_dir, classifier=classifier, judge_settings=settings,
        )
    emit_scoring(result, "print_abstention_scoring", quiet=quiet, json_output=json_output)


plain_metavars(app)
