"""generate.py: candidate eval cases from the notes' structure, for a person to review.

`evalkit generate --vault V --output candidates.jsonl` writes the candidates (validated with
evalkit's eval-set loader; an existing file is kept unless --force) and
`candidates.report.json` beside them: counts generated per pattern, filtered per reason,
flagged unretrievable, and the category mix (against --mix when given). Offline: no LLM.
Candidates never go into an eval set here; review them with `evalkit label --review-auto`.
Exit 0 ok; 2 bad input.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import exit_on_known_errors, plain_metavars, printable

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="Generate candidate eval cases offline from the notes' structure (question headings, Q:/A: and FAQ "
    "pairs, definitions, tables), filtered for overlap and duplicates and flagged when the reference retriever "
    "misses them. Writes --output and <output stem>.report.json. Exit 0 ok, 2 bad input.",
)


def report_path(output: Path) -> Path:
    """Where the report of `output` goes: `candidates.jsonl` -> `candidates.report.json`."""
    return output.with_name(output.stem + ".report.json")


@app.command()
def main(
    vault: Path = typer.Option(..., "--vault", metavar="DIR", help="The notes folder."),
    output: Path = typer.Option(..., "--output", "-o", metavar="PATH", help="Candidates file to write (JSONL)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the --limit sample."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, metavar="N", help="Keep a seeded sample of at most N candidates. (default: all)"),
    max_overlap: float = typer.Option(
        0.8, "--max-overlap", min=0.0, max=1.0, metavar="F",
        help="Drop a candidate when more than this share of its question's content words occur in the text that answers it.",
    ),
    mix: Optional[str] = typer.Option(None, "--mix", metavar="CAT=SHARE,...", help="Target category mix for the report, e.g. factual=0.4,reasoning=0.2."),
    no_retrieval: bool = typer.Option(False, "--no-retrieval", help="Skip the retrievability check (no 'unretrievable' flags)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --output (and its report) when it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of the summary."),
) -> None:
    """Generate candidate cases from the notes in --vault."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.generate import generate_candidates, parse_mix
        from evalkit.importers import ImportedCase, write_eval_set

        if not vault.is_dir():
            raise BadConfig(Problem("no such folder", path=str(vault), field="--vault"))
        target = parse_mix(mix)
        if output.exists() and not force:
            raise BadConfig(Problem("already exists; pass --force to overwrite it", path=str(output), field="--output"))
        result = generate_candidates(
            vault, seed=seed, limit=limit, max_overlap=max_overlap, check_retrieval=not no_retrieval, mix=target
        )
        if not result.candidates:
            raise BadConfig(Problem(
                f"no candidate survived ({result.report['generated']} generated, filtered: {result.report['filtered']})",
                path=str(vault), field="--vault",
            ))
        cases = [ImportedCase(c.case, c.rel_path, i, c.line) for i, c in enumerate(result.candidates)]
        write_eval_set(cases, output, force=force)
        report = dict(result.report, output=str(output))
        _write_json(report_path(output), report)
    if as_json:
        typer.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    by_pattern = ", ".join(f"{k} {v}" for k, v in report["generated_by_pattern"].items() if v) or "none"
    filtered = ", ".join(f"{k} {v}" for k, v in sorted(report["filtered"].items())) or "none"
    cats = ", ".join(f"{k} {v}" for k, v in report["categories"].items())
    typer.echo(printable(f"evalkit: {report['generated']} candidates from {vault} ({by_pattern})"))
    typer.echo(f"evalkit: filtered: {filtered}; sampled out: {report['sampled_out']}")
    typer.echo(
        printable(f"evalkit: wrote {report['written']} candidates to {output} ({cats}); "
                  f"{report['flagged']['unretrievable']} flagged unretrievable; report: {report_path(output)}")
    )
    typer.echo(printable(f"evalkit: review them with: evalkit label --eval-set {output} --review-auto"))


def _write_json(path: Path, obj: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


plain_metavars(app)
