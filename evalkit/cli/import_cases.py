"""import_cases.py: another harness's fixtures -> an evalkit eval set (JSONL).

`evalkit import --format gno queries.json ask-cases.json --docid-map docids.tsv` writes
eval_set.jsonl (or --output), after loading it with evalkit's own eval-set loader; an
existing file is kept unless --force. `evalkit import --format hindsight fixture.jsonl
--vault-out DIR` also writes each case's seedFacts as notes under DIR, and `--format mtrag
generation_tasks.jsonl --vault-out DIR` MTRAG's conversations and their passages. Exit 0 ok; 2 bad
input (every problem is named by file, item index or line, and field).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    exit_on_known_errors,
    force_option,
    plain_metavars,
    printable,
    results_dir_option,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Convert another harness's fixtures into an evalkit eval set: --format gno (seed 002's queries.json / "
    "ask-cases.json), --format hindsight (seed 004's JSONL; its seedFacts become notes under --vault-out), "
    "--format beir, --format trec, or --format mtrag (MTRAG's generation tasks: one conversation per line, "
    "their gold passages become notes under --vault-out), or --format mtrag-ratings (MTRAG's human evaluations: one "
    "model's rated answers become a run folder, each annotator's ratings its human grades). Exit 0 ok, 2 bad input.",
)


@app.command()
def main(
    paths: Optional[list[Path]] = typer.Argument(
        None, metavar="PATH...", help="Fixture files (JSON or JSONL), converted in order (none for --format trec)."
    ),
    fmt: str = typer.Option(..., "--format", metavar="FORMAT", help="Fixture format: gno | hindsight | beir | trec | mtrag | mtrag-ratings."),
    output: Path = typer.Option(Path("eval_set.jsonl"), "--output", "-o", metavar="PATH", help="Eval set to write."),
    force: bool = force_option(" (and a --vault-out an earlier import wrote)"),
    vault_out: Optional[Path] = typer.Option(
        None, "--vault-out", "--vault", metavar="DIR", help="Where the notes are written: hindsight's seedFacts, one "
        "folder per case; beir's documents, one note each; mtrag's passages, one note per source document "
        "(a new or empty folder; required by hindsight, beir and mtrag)."
    ),
    split: Optional[str] = typer.Option(
        None, "--split", metavar="NAME", help="--format beir: the qrels/<NAME>.tsv whose queries are imported. (default: test)"
    ),
    docid_map: Optional[Path] = typer.Option(
        None, "--docid-map", metavar="PATH", help="docid -> rel_path [+ heading_path], JSON object or TSV. "
        "(default: each docid becomes a chunk_id support)"
    ),
    category: str = typer.Option("factual", "--category", help="Category of cases that do not name one."),
    tag: Optional[list[str]] = typer.Option(None, "--tag", help="Tag added to every case; repeatable."),
    topics: Optional[Path] = typer.Option(
        None, "--topics", metavar="PATH", help="--format trec: the topics (qid<TAB>text TSV, BEIR queries.jsonl or TREC <top> SGML)."
    ),
    qrels: Optional[list[Path]] = typer.Option(
        None, "--qrels", metavar="PATH", help="--format trec: the qrels (qid 0 docid rel; `#` comment lines skipped); "
        "repeatable."
    ),
    relevance_level: Optional[float] = typer.Option(
        None, "--relevance-level", metavar="L", help="--format trec: a grade >= L is a gold support (trec_eval -l); a "
        "grade in (0, L) a graded_only one (nDCG only). (default: every grade > 0)"
    ),
    model: Optional[str] = typer.Option(
        None, "--model", metavar="ID", help="--format mtrag-ratings: whose rated answers become the run (reference, "
        "gpt-4o, llama-3.1-405b-instruct); the run is <results-dir>/mtrag-<ID>, its grades one per annotator."
    ),
    results_dir: Path = results_dir_option(),
) -> None:
    """Convert PATH... into an eval set (--format mtrag-ratings: into a run folder with human grades)."""
    if fmt == "mtrag-ratings" or model is not None:
        _import_ratings(list(paths or []), fmt, model, results_dir, force)
        return
    paths = _trec_paths(list(paths or []), fmt, topics, qrels)
    if relevance_level is not None and fmt != "trec":
        with exit_on_known_errors():
            from evalkit.errors import BadConfig, Problem

            raise BadConfig(Problem(f"--relevance-level is for --format trec, not {fmt!r}", field="--relevance-level"))
    if fmt == "beir" or split is not None:
        _import_beir(paths, fmt, split or "test", vault_out, output, force, category, tuple(tag or ()), docid_map)
        return
    with exit_on_known_errors():
        from evalkit.interop.importers import import_cases
        from evalkit.interop.importers.base import ImportOptions
        from evalkit.interop.importers.docids import load_docid_map
        from evalkit.interop.importers.output import check_output, check_vault_out, write_eval_set, write_vault

        options = ImportOptions(
            docid_map=load_docid_map(docid_map) if docid_map is not None else None,
            category=category,
            tags=tuple(tag or ()),
            relevance_level=relevance_level,
        )
        check_output(output, paths)
        cases = import_cases(fmt, paths, options)
        check_vault_out(cases, vault_out, output=output, force=force, fmt=fmt)
        # The notes first, then the eval set that points into them: a vault that cannot be
        # written leaves no eval set behind, and an eval set that does not validate removes the
        # vault this import created.
        created = vault_out is not None and not vault_out.exists()
        n_notes = write_vault(cases, vault_out, force=force) if vault_out is not None else 0
        try:
            kept = write_eval_set(cases, output, force=force)
        except BaseException:
            if created:
                import shutil

                shutil.rmtree(vault_out, ignore_errors=True)
            raise
    if kept is not None:
        print(printable(f"evalkit: kept the file --force replaced as {kept}"), file=sys.stderr)
    for c in cases:
        for w in c.warnings:
            print(printable(f"evalkit: warning: {w}"), file=sys.stderr)
    # A conversation's labels are on its turns (--format mtrag): count those, one per case.
    labeled = [t for c in cases for t in c.case.get("turns", [c.case])]
    supports = [s for t in labeled for s in t.get("gold_supports", [])]
    graded = sum(1 for s in supports if s.get("graded_only"))
    unlabeled = sum(1 for t in labeled if not t.get("gold_supports"))
    turns = len(labeled) != len(cases)
    typer.echo(
        f"evalkit: wrote {len(cases)} {'conversations' if turns else 'cases'} to {output}: "
        + (f"{len(labeled)} turns, " if turns else "")
        + f"{len(supports) - graded} gold supports, {graded} graded-only (nDCG only), "
        f"{unlabeled} {'turns' if turns else 'cases'} without supports"
    )
    if vault_out is not None:
        # hindsight gives each case its own folder of facts; mtrag's notes are one corpus
        per_case = fmt != "mtrag"
        typer.echo(
            f"evalkit: wrote {n_notes} notes to {vault_out} "
            f"({'one folder per case' if per_case else 'one per source document'}); run them with: "
            f"evalkit run --eval-set {shlex.quote(str(output))} --vault {shlex.quote(str(vault_out))} "
            + ("--send-scope folders " if per_case else "") + "--retrieval-only"
        )


def _import_ratings(paths: list[Path], fmt: str, model: str | None, results_dir: Path, force: bool) -> None:
    """--format mtrag-ratings: MTRAG's human evaluations -> a run folder of one model's rated answers."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.interop.importers.mtrag_ratings import import_ratings

        if fmt != "mtrag-ratings":
            raise BadConfig(Problem(f"--model is for --format mtrag-ratings, not {fmt!r}", field="--model"))
        if len(paths) != 1 or model is None:
            raise BadConfig(Problem("--format mtrag-ratings needs one PATH (human_evaluations.json) and --model ID",
                                    field="PATH" if len(paths) != 1 else "--model"))
        folder = import_ratings(paths[0], results_dir, model, force=force)
    typer.echo(printable(f"evalkit: wrote the run {folder.name} to {folder} with its human grades; judge it with: "
                         f"evalkit judge --run-id {shlex.quote(folder.name)} --results-dir {shlex.quote(str(results_dir))}"))


def _trec_paths(paths: list[Path], fmt: str, topics: Path | None, qrels: list[Path] | None) -> list[Path]:
    """--format trec reads --topics then each --qrels (as `importers.trec.convert` expects), not PATH."""
    if fmt != "trec" and topics is None and not qrels:
        return paths
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem

        if fmt != "trec":
            raise BadConfig(Problem(f"--topics/--qrels are for --format trec, not {fmt!r}", field="--topics"))
        if paths:
            raise BadConfig(Problem("--format trec reads --topics and --qrels, not PATH", field="PATH"))
        if topics is None or not qrels:
            raise BadConfig(Problem("--format trec needs --topics PATH and --qrels PATH", field="--topics" if topics is None else "--qrels"))
    return [topics, *qrels]


def _import_beir(
    paths: list[Path],
    fmt: str,
    split: str,
    vault_out: Path | None,
    output: Path,
    force: bool,
    category: str,
    tags: tuple[str, ...],
    docid_map: Path | None,
) -> None:
    """`--format beir DIR --split S --vault OUT`: streamed by `importers.beir.import_beir`."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.interop.importers.base import ImportOptions
        from evalkit.interop.importers.beir import import_beir

        if fmt != "beir":
            raise BadConfig(Problem(f"--split is for --format beir, not {fmt!r}", field="--split"))
        if len(paths) != 1:
            raise BadConfig(Problem(f"--format beir takes one BEIR folder, got {len(paths)} paths", field="PATH"))
        if vault_out is None:
            raise BadConfig(Problem(
                "--format beir writes one note per corpus document and needs a folder for them: "
                "pass --vault DIR (a new or empty folder)",
                field="--vault",
            ))
        if docid_map is not None:
            raise BadConfig(Problem("--format beir maps each document to its own note; drop --docid-map", field="--docid-map"))
        from evalkit.interop.importers.output import check_output

        check_output(output, paths)
        done = import_beir(
            paths[0], vault_out=vault_out, output=output, split=split, force=force,
            options=ImportOptions(category=category, tags=tags),
        )
    for w in done.warnings:
        print(printable(f"evalkit: warning: {w}"), file=sys.stderr)
    typer.echo(
        f"evalkit: wrote {len(done.cases)} cases ({split} split) to {output}: {done.n_judgments} gold supports; "
        f"{done.skipped_queries} queries without judgments in the split skipped"
    )
    typer.echo(
        f"evalkit: wrote {done.n_docs} notes to {vault_out}; run them with: "
        f"evalkit run --eval-set {shlex.quote(str(output))} --vault {shlex.quote(str(vault_out))} --retrieval-only"
    )


plain_metavars(app)
