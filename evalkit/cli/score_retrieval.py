"""score_retrieval.py: (re)compute the retrieval metrics of a stored run (seed 000 §3.A).

An alias of `evalkit score --retrieval`, with this script's own flags and help: it calls
the same `evalkit.cli.score.score_run`. Reads results/<run_id>/results.jsonl once (streamed),
scores each case's stored chunks and references against the eval set config.json names (or
--eval-set), and merges the retrieval numbers into metrics.json. The target is never called.
--k adds cut-offs; the run's primary K stays unless --primary-k names another. Exit 0 ok; 2
bad input (unknown run, K larger than the run asked for, an eval set that changed since the
run without --eval-set, snippets on cut text without --allow-truncated-text).

`--trec-run RUN.trec --qrels QRELS` scores an existing TREC run file instead (no run folder):
sorted as trec_eval sorts it, every @K metric plus trec_eval's names for each
(`evalkit.interop.trec_run`; docs/interop.md, "Scoring a TREC run file").
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    RESULTS_DIR,
    PanelledCommand,
    json_option,
    k_option,
    plain_metavars,
    quiet_option,
    rescore_options,
    score_trec_file,
    trec_run_options,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="(Re)compute the retrieval metrics of a run from its results.jsonl: new K values (up to the run's), "
    "snippet rules, fixed labels. Updates metrics.json. Exit 0 ok, 2 bad input. (The seed's script for `evalkit score --retrieval`, with its own flags.)",
)

_RESCORE = rescore_options()


_TREC_OPTIONS = trec_run_options("Scoring a TREC run file")


@app.command(cls=PanelledCommand)
def main(
    run_id: Optional[str] = typer.Option(
        None, "--run-id", metavar="RUN_ID", help="Run id (a folder name under --results-dir); required unless --trec-run."
    ),
    results_dir: Path = RESULTS_DIR,
    k: Optional[list[int]] = k_option("At most the largest K the run asked for. (default: the run's)", rescore=True),
    primary_k: Optional[int] = typer.Option(
        None, "--primary-k", metavar="K", help="Make K the primary K: the one the headline metrics, slices, gate and "
        "compare_runs use. (default: the run's primary K, kept)",
    ),
    require_snippets: Optional[bool] = _RESCORE["require_snippets"],
    eval_set: Optional[list[Path]] = _RESCORE["eval_set"],
    allow_truncated_text: bool = _RESCORE["allow_truncated_text"],
    workers: Optional[int] = typer.Option(
        None, "--workers", min=1, help="Processes that score parts of results.jsonl side by side (Linux; 1 = this one). "
        "(default: one per CPU, at most 8, for results.jsonl over 32 MB)"
    ),
    quiet: bool = quiet_option(),
    json_output: bool = json_option(
        "run_id, retrieval_scoring, aggregate_metrics, by_category, warnings; printed last, the tables go to stderr "
        "(with --trec-run: ks, at_k means and n, ir_measures, trec_eval, skipped, warnings)"
    ),
    trec_run: Optional[Path] = _TREC_OPTIONS["trec_run"],
    qrels: Optional[list[Path]] = _TREC_OPTIONS["qrels"],
    relevance_level: Optional[float] = _TREC_OPTIONS["relevance_level"],
    gain: Optional[str] = _TREC_OPTIONS["gain"],
    no_relevant: Optional[str] = _TREC_OPTIONS["no_relevant"],
    per_query: bool = _TREC_OPTIONS["per_query"],
) -> None:
    """Re-score the retrieval of RUN_ID and update its metrics.json (evalkit score --retrieval)."""
    trec = {"trec_run": trec_run, "qrels": qrels, "relevance_level": relevance_level, "gain": gain,
            "no_relevant": no_relevant, "per_query": per_query}
    if score_trec_file(trec, run_id=run_id, k=k, quiet=quiet, json_output=json_output):
        return
    from evalkit.cli.score import score_run

    score_run(
        ("retrieval",), run_id=run_id, results_dir=results_dir, k=k, primary_k=primary_k, require_snippets=require_snippets,
        eval_set=eval_set, allow_truncated_text=allow_truncated_text, workers=workers, quiet=quiet, json_output=json_output,
        command="score_retrieval.py",
    )


plain_metavars(app)
