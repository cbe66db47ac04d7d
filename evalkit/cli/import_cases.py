"""import_cases.py: another harness's fixtures -> an evalkit eval set (JSONL).

`evalkit import --format gno queries.json ask-cases.json --docid-map docids.tsv` writes
eval_set.jsonl (or --output), after loading it with evalkit's own eval-set loader; an
existing file is kept unless --force. `evalkit import --format hindsight fixture.jsonl
--vault-out DIR` also writes each case's seedFacts as notes under DIR. Exit 0 ok; 2 bad
input (every problem is named by file, item index or line, and field).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import exit_on_known_errors, plain_metavars, printable

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Convert another harness's fixtures into an evalkit eval set: --format gno (seed 002's queries.json / "
    "ask-cases.json) or --format hindsight (seed 004's JSONL; its seedFacts become notes under --vault-out). "
    "Exit 0 ok, 2 bad input.",
)


@app.command()
def main(
    paths: list[Path] = typer.Argument(..., metavar="PATH...", help="Fixture files (JSON or JSONL), converted in order."),
    fmt: str = typer.Option(..., "--format", metavar="FORMAT", help="Fixture format: gno | hindsight."),
    output: Path = typer.Option(Path("eval_set.jsonl"), "--output", "-o", metavar="PATH", help="Eval set to write."),
    force: bool = typer.Option(
        False, "--force", help="Overwrite --output when it exists, and replace a --vault-out an earlier import wrote."
    ),
    vault_out: Optional[Path] = typer.Option(
        None, "--vault-out", metavar="DIR", help="Where hindsight's seedFacts are written as notes, one folder per "
        "case (a new or empty folder; required by --format hindsight)."
    ),
    docid_map: Optional[Path] = typer.Option(
        None, "--docid-map", metavar="PATH", help="docid -> rel_path [+ heading_path], JSON object or TSV. "
        "(default: each docid becomes a chunk_id support)"
    ),
    category: str = typer.Option("factual", "--category", help="Category of cases that do not name one."),
    tag: Optional[list[str]] = typer.Option(None, "--tag", help="Tag added to every case; repeatable."),
) -> None:
    """Convert PATH... into an eval set."""
    with exit_on_known_errors():
        from evalkit.importers import ImportOptions, check_vault_out, import_cases, write_eval_set, write_vault
        from evalkit.importers.docids import load_docid_map

        options = ImportOptions(
            docid_map=load_docid_map(docid_map) if docid_map is not None else None,
            category=category,
            tags=tuple(tag or ()),
        )
        cases = import_cases(fmt, paths, options)
        check_vault_out(cases, vault_out, output=output, force=force, fmt=fmt)
        write_eval_set(cases, output, force=force)
        n_notes = write_vault(cases, vault_out, force=force) if vault_out is not None else 0
    for c in cases:
        for w in c.warnings:
            print(printable(f"evalkit: warning: {w}"), file=sys.stderr)
    supports = [s for c in cases for s in c.case.get("gold_supports", [])]
    graded = sum(1 for s in supports if s.get("graded_only"))
    unlabeled = sum(1 for c in cases if not c.case.get("gold_supports"))
    typer.echo(
        f"evalkit: wrote {len(cases)} cases to {output}: {len(supports) - graded} gold supports, "
        f"{graded} graded-only (nDCG only), {unlabeled} cases without supports"
    )
    if vault_out is not None:
        typer.echo(
            f"evalkit: wrote {n_notes} notes to {vault_out} (one folder per case); run them with: "
            f"evalkit run --eval-set {shlex.quote(str(output))} --vault {shlex.quote(str(vault_out))} "
            "--send-scope folders --retrieval-only"
        )


plain_metavars(app)
