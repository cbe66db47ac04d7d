"""export.py: a stored run as files other tools read.

`evalkit export --run-id ID --format trec [--unit anchor|chunk|note] [--k K] [--output DIR]`
writes run.trec, qrels.trec and topics.tsv (and docids.tsv for units chunk and note) so
trec_eval, pytrec_eval or ranx can recompute the retrieval numbers
(`evalkit.interop.trec`). Exit 0 ok; 2 bad input (unknown run, unit or format, K larger
than the run asked for, snippets on cut text without --allow-truncated-text).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    RESULTS_DIR,
    RUN_ID,
    exit_on_known_errors,
    json_option,
    plain_metavars,
    printable,
    rescore_options,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Export a run for other tools: --format trec writes a TREC run file and qrels (plus topics.tsv) that "
    "trec_eval or ranx score to evalkit's numbers. Exit 0 ok, 2 bad input.",
)

_RESCORE = rescore_options()


@app.command()
def main(
    run_id: str = RUN_ID,
    results_dir: Path = RESULTS_DIR,
    fmt: str = typer.Option("trec", "--format", metavar="FORMAT", help="Output format: trec."),
    unit: str = typer.Option(
        "anchor", "--unit", metavar="UNIT", help="What a TREC document is: anchor (the gold support a chunk is "
        "credited with: reproduces recall, MRR, nDCG) | chunk (reproduces precision, MRR) | note."
    ),
    k: Optional[int] = typer.Option(None, "--k", metavar="K", help="Cut-off. (default: the run's primary K)"),
    tag: Optional[str] = typer.Option(None, "--tag", help="The run.trec tag column. (default: the run id)"),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", metavar="DIR", help="Folder to write. (default: <run folder>/trec-<unit>)"
    ),
    require_snippets: Optional[bool] = _RESCORE["require_snippets"],
    allow_truncated_text: bool = _RESCORE["allow_truncated_text"],
    json_output: bool = json_option("files, counts, differences; instead of the summary"),
) -> None:
    """Export RUN_ID as TREC files."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.interop.trec import export_trec

        if fmt != "trec":
            raise BadConfig(Problem(f"unknown format {fmt!r}; expected trec", field="--format"))
        result = export_trec(
            run_id, output, unit=unit, k=k, tag=tag, results_dir=results_dir,  # type: ignore[arg-type]
            require_snippets=require_snippets, allow_truncated_text=allow_truncated_text,
        )
    for w in result.warnings:
        print(printable(f"evalkit: warning: {w}"), file=sys.stderr)
    if json_output:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
        return
    excluded = ", ".join(f"{n} {why}" for why, n in result.excluded.items() if n) or "none"
    typer.echo(
        f"evalkit: wrote {result.n_queries} queries of run {result.run_id} (unit {result.unit}, K={result.k}) to "
        f"{result.out_dir}: run.trec ({result.n_run_lines} lines), qrels.trec ({result.n_qrels_lines} lines), "
        f"topics.tsv{', docids.tsv' if result.docids_path else ''}; left out: {excluded}"
    )
    typer.echo(
        f"evalkit: check with: ranx (Qrels.from_file, Run.from_file, kind='trec') or "
        f"trec_eval -m all_trec {result.qrels_path} {result.run_path}"
    )


plain_metavars(app)
