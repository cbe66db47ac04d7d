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
    CONCURRENCY,
    RESULTS_DIR,
    RUN_ID,
    emit_scoring,
    exit_on_known_errors,
    judge_options,
    load_dotenv_once,
    plain_metavars,
)

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="(Re)compute the abstention metrics of a run from its results.jsonl: accuracy, hallucination rate, "
    "false-abstention rate, confusion matrix; optionally re-classify answers (--classifier). Updates metrics.json. "
    "Exit 0 ok, 2 bad input.",
)

_J = "classifier"
_JUDGE = judge_options(_J)


@app.command()
def main(
    run_id: str = RUN_ID,
    results_dir: Path = RESULTS_DIR,
    eval_set: Optional[list[Path]] = typer.Option(
        None, "--eval-set", help="Score against this eval set (file or folder; repeatable), even if it changed since the run. "
        "(default: the one config.json names, which must be unchanged)"
    ),
    classifier: Optional[str] = typer.Option(
        None, "--classifier", metavar="llm|heuristic", help="Re-classify answers the target gave no `abstained` for: "
        "heuristic (refusal phrases, offline) or llm (--judge-model). (default: use the stored decisions)", rich_help_panel=_J,
    ),
    judge_provider: Optional[str] = _JUDGE["judge_provider"],
    judge_model: Optional[str] = _JUDGE["judge_model"],
    judge_base_url: Optional[str] = _JUDGE["judge_base_url"],
    allow_unpinned: bool = typer.Option(False, "--allow-unpinned", help="Accept a floating model alias.", rich_help_panel=_J),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the judge cache.", rich_help_panel=_J),
    cache_path: Path = typer.Option(Path("cache/judge_cache.sqlite"), "--cache-path", help="SQLite judge cache file.", rich_help_panel=_J),
    concurrency: int = CONCURRENCY,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No tables."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object last (run_id, abstention_scoring, aggregate_metrics, by_category, warnings)."),
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
