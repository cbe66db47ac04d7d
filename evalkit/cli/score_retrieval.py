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
    exit_on_known_errors,
    json_option,
    k_option,
    plain_metavars,
    quiet_option,
    rescore_options,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="(Re)compute the retrieval metrics of a run from its results.jsonl: new K values (up to the run's), "
    "snippet rules, fixed labels. Updates metrics.json. Exit 0 ok, 2 bad input. (The seed's script for `evalkit score --retrieval`, with its own flags.)",
)

_RESCORE = rescore_options()


_TREC = "Scoring a TREC run file"


@app.command()
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
    trec_run: Optional[Path] = typer.Option(
        None, "--trec-run", metavar="PATH", rich_help_panel=_TREC, help="Score this TREC run file (qid Q0 docno rank "
        "score tag) against --qrels instead of a stored run: sorted by score, then docno descending, as trec_eval sorts.",
    ),
    qrels: Optional[list[Path]] = typer.Option(
        None, "--qrels", metavar="PATH", rich_help_panel=_TREC, help="--trec-run: the qrels (qid 0 docno rel; `#` "
        "comment lines skipped); repeatable.",
    ),
    relevance_level: Optional[float] = typer.Option(
        None, "--relevance-level", metavar="L", rich_help_panel=_TREC, help="--trec-run: a grade >= L is relevant "
        "(trec_eval -l); a grade in (0, L) counts for nDCG only. (default: every grade > 0, trec_eval's -l 1 on integers)",
    ),
    gain: str = typer.Option(
        "exponential", "--gain", metavar="exponential|linear", rich_help_panel=_TREC, help="--trec-run: nDCG's gain, "
        "2^rel - 1 (exponential, evalkit's) or rel (linear, trec_eval's ndcg_cut); equal on binary grades.",
    ),
    no_relevant: str = typer.Option(
        "skip", "--no-relevant", metavar="skip|zero", rich_help_panel=_TREC, help="--trec-run: a judged query with no "
        "relevant document is left out of every mean (skip, evalkit's rule) or counts 0 (zero, as trec_eval).",
    ),
    per_query: bool = typer.Option(
        False, "--per-query", rich_help_panel=_TREC, help="--trec-run: each query's values too (trec_eval -q).",
    ),
) -> None:
    """Re-score the retrieval of RUN_ID and update its metrics.json (evalkit score --retrieval)."""
    if trec_run is not None or qrels:
        _score_trec(trec_run, qrels, run_id, k, relevance_level, gain, no_relevant, per_query, quiet, json_output)
        return
    if run_id is None:
        with exit_on_known_errors():
            from evalkit.errors import BadConfig, Problem

            raise BadConfig(Problem("pass --run-id RUN_ID (or --trec-run RUN --qrels QRELS)", field="--run-id"))
    from evalkit.cli.score import score_run

    score_run(
        ("retrieval",), run_id=run_id, results_dir=results_dir, k=k, primary_k=primary_k, require_snippets=require_snippets,
        eval_set=eval_set, allow_truncated_text=allow_truncated_text, workers=workers, quiet=quiet, json_output=json_output,
        command="score_retrieval.py",
    )


def _score_trec(
    trec_run: Path | None, qrels: list[Path] | None, run_id: str | None, k: list[int] | None,
    relevance_level: float | None, gain: str, no_relevant: str, per_query: bool, quiet: bool, json_output: bool,
) -> None:
    """`--trec-run RUN --qrels Q`: print the table (stderr with --json) and, with --json, the object."""
    import json
    import sys

    from evalkit.cli.common import printable

    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.interop.trec_run import read_trec_run, score_trec_run

        if trec_run is None or not qrels:
            raise BadConfig(Problem("--trec-run needs --qrels, and --qrels needs --trec-run", field="--trec-run"))
        if run_id is not None:
            raise BadConfig(Problem("--trec-run scores a run file, not a stored run: drop --run-id", field="--run-id"))
        run = read_trec_run(trec_run)
        # Default cut-offs: 10 and the deepest ranking, where map, rprec, mrr and ndcg are trec_eval's uncut values.
        depth = max((len(r) for r in run.rankings.values()), default=10)
        ks = list(k) if k else sorted({10, max(depth, 1)})
        scores = score_trec_run(run, qrels, ks=ks, relevance_level=relevance_level, gain=gain,
                                no_relevant=no_relevant)  # type: ignore[arg-type]
    out = sys.stderr if json_output else sys.stdout
    for w in scores.warnings:
        print(printable(f"evalkit: warning: {w}"), file=sys.stderr)
    if not quiet:
        print(trec_table(scores), file=out)
    if per_query and not json_output:
        for qid, values in scores.per_query.items():
            for key, block in values.items():
                for m, v in block.items():
                    if v is not None:
                        print(printable(f"{m}@{key}\t{qid}\t{v:.4f}"), file=out)
    if json_output:
        print(json.dumps(scores.to_json(per_query=per_query), ensure_ascii=False))


def trec_table(scores) -> str:  # noqa: ANN001 - TrecScores, imported lazily
    """The means as a table: evalkit's name, the trec_eval measures it equals (— none: a cut-off trec_eval
    lacks, or exponential nDCG), the value and its n; one row per metric and K."""
    from evalkit.interop.trec_run import TREC_METRICS, trec_eval_names

    rows = [("metric", "trec_eval", "value", "n")]
    for k in scores.ks:
        for m in TREC_METRICS:
            v = scores.means[str(k)][m]
            name = " = ".join(trec_eval_names(m, k, scores.depth, scores.gain)) or "—"
            rows.append((f"{m}@{k}", name, "—" if v is None else f"{v:.4f}", str(scores.n[str(k)][m])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    head = (f"{scores.n_queries} queries; gain {scores.gain}; relevance level "
            f"{scores.relevance_level if scores.relevance_level is not None else '> 0'}; no relevant: {scores.no_relevant}")
    lines = [head] + ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                      for r in rows]
    return "\n".join(lines)


plain_metavars(app)
