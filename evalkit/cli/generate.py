"""generate.py: candidate eval cases for a person to review, offline or written by an LLM.

`evalkit generate --vault V --output candidates.jsonl` writes the candidates (validated with
evalkit's eval-set loader; an existing file is kept unless --force) and
`candidates.report.json` beside them: counts generated per pattern, filtered per reason,
flagged unretrievable, and the category mix (against --mix when given).

Offline by default (no LLM): questions the notes' structure already spells out
(evalkit.authoring.generate). With --model, --provider or --base-url (the EVALKIT_JUDGE_* variables
alone never switch it on) an LLM writes single-section, multi-hop (wikilinked notes) and
unanswerable questions (evalkit.authoring.generate_llm), through the judge machinery: cached,
retried, repaired once and costed; `candidates.config.json` records the sample, the model
and the prompt version. Keys come from the environment or `.env`, never from a flag.

Candidates never go into an eval set here; review them with `evalkit label --review-auto`.
Exit 0 ok; 2 bad input or LLM configuration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    PanelledCommand,
    concurrency_option,
    exit_on_known_errors,
    force_option,
    json_option,
    judge_options,
    load_dotenv_once,
    plain_metavars,
    printable,
)

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="Generate candidate eval cases from the notes, for a person to review. Offline by default, from the "
    "notes' structure (question headings, Q:/A: and FAQ pairs, definitions, tables); with --model, --provider or "
    "--base-url an LLM writes single-section, multi-hop (wikilinked notes) and unanswerable questions. Candidates "
    "are filtered for overlap and duplicates and flagged when the reference retriever misses them. Writes --output, "
    "<output stem>.report.json and, with an LLM, <output stem>.config.json. Exit 0 ok, 2 bad input.",
)


def report_path(output: Path) -> Path:
    """Where the report of `output` goes: `candidates.jsonl` -> `candidates.report.json`."""
    return output.with_name(output.stem + ".report.json")


def config_path(output: Path) -> Path:
    """Where the LLM run's config goes: `candidates.jsonl` -> `candidates.config.json`."""
    return output.with_name(output.stem + ".config.json")


_IO = "Notes and output"
_C = "Candidates"
_L = "LLM generation"
_LLM = judge_options(_L)  # the judge machinery's pinning, cache, price and request flags


@app.command(cls=PanelledCommand)
def main(
    vault: Path = typer.Option(..., "--vault", metavar="DIR", help="The notes folder.", rich_help_panel=_IO),
    output: Path = typer.Option(..., "--output", "-o", metavar="PATH", help="Candidates file to write (JSONL).", rich_help_panel=_IO),
    force: bool = force_option(" (and its report)", _IO),
    as_json: bool = json_option("the report; instead of the summary", _IO),
    seed: int = typer.Option(
        0, "--seed", metavar="N", rich_help_panel=_C,
        help="Seed of the --limit sample (and, with an LLM, of the section, pair and topic samples).",
    ),
    limit: Optional[int] = typer.Option(
        None, "--limit", min=1, metavar="N", help="Keep a seeded sample of at most N candidates. (default: all)", rich_help_panel=_C,
    ),
    max_overlap: float = typer.Option(
        0.8, "--max-overlap", min=0.0, max=1.0, metavar="F", rich_help_panel=_C,
        help="Drop a candidate when more than this share of its question's content words occur in the text that answers it.",
    ),
    mix: Optional[str] = typer.Option(
        None, "--mix", metavar="CAT=SHARE,...", help="Target category mix, applied (each category sampled to its share of --limit, else of all "
        "candidates; a short one is not filled by others) and reported, e.g. factual=0.6,reasoning=0.4; "
        "difficulty shares (easy=0.3) are reported only.",
        rich_help_panel=_C,
    ),
    no_retrieval: bool = typer.Option(
        False, "--no-retrieval", help="Skip the reference retriever (no 'unretrievable' flags, no offline difficulty guess).",
        rich_help_panel=_C,
    ),
    per_table: int = typer.Option(
        3, "--per-table", min=1, metavar="N", help="Offline: keep at most N candidates from each table.", rich_help_panel=_C,
    ),
    model: Optional[str] = typer.Option(
        None, "--model", metavar="MODEL", rich_help_panel=_L,
        help="LLM that writes the questions, pinned (gpt-4o-2024-08-06, claude-sonnet-4-5-20250929, name@sha256:<hex> "
        "for a local server). Any of --model/--provider/--base-url switches to LLM generation.",
    ),
    provider: Optional[str] = typer.Option(None, "--provider", metavar="PROVIDER", rich_help_panel=_L,
                                           help="openai, anthropic or openai-compatible (default: told from --model)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", metavar="URL", rich_help_panel=_L,
                                           help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1."),
    n: int = typer.Option(20, "--n", min=0, metavar="N", rich_help_panel=_L, help="Sections to write one question each from."),
    multi_hop: Optional[int] = typer.Option(None, "--multi-hop", min=0, metavar="N", rich_help_panel=_L,
                                            help="Wikilinked note pairs to write multi-hop questions from. (default: 20% of --n)"),
    unanswerable: Optional[int] = typer.Option(None, "--unanswerable", min=0, metavar="N", rich_help_panel=_L,
                                               help="Unanswerable questions to gather. (default: 10% of --n)"),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, metavar="T", rich_help_panel=_L, help="Sampling temperature."),
    allow_unpinned: bool = _LLM["allow_unpinned"],
    no_cache: bool = _LLM["no_cache"],
    refresh_cache: bool = _LLM["refresh_cache"],
    cache: Optional[Path] = typer.Option(None, "--cache", metavar="PATH", rich_help_panel=_L,
                                         help="Cache file (SQLite). (default: the judge cache, cache/judge_cache.sqlite)"),
    price_file: Optional[Path] = _LLM["price_file"],
    concurrency: int = concurrency_option("LLM calls", _L),
    timeout: float = _LLM["timeout"],
) -> None:
    """Generate candidate cases from the notes in --vault."""
    load_dotenv_once()
    use_llm = any(v is not None for v in (model, provider, base_url))
    with exit_on_known_errors():
        from evalkit.authoring.generate import generate_candidates, parse_mix
        from evalkit.errors import BadConfig, Problem
        from evalkit.interop.importers.base import ImportedCase
        from evalkit.interop.importers.output import write_eval_set

        if not vault.is_dir():
            raise BadConfig(Problem("no such folder", path=str(vault), field="--vault"))
        target = parse_mix(mix)
        if output.exists() and not force:
            raise BadConfig(Problem("already exists; pass --force to overwrite it", path=str(output), field="--output"))
        if use_llm:
            from evalkit.authoring.generate_llm import generate_with_llm
            from evalkit.judges.cache import DEFAULT_CACHE_PATH
            from evalkit.judges.settings import JudgeSettings

            settings = JudgeSettings(
                provider=provider, model=model, base_url=base_url, temperature=temperature, allow_unpinned=allow_unpinned,
                use_cache=not no_cache, refresh_cache=refresh_cache, cache_path=cache or DEFAULT_CACHE_PATH,
                price_file=price_file, concurrency=concurrency, timeout=timeout, seed=seed,
            )
            result = generate_with_llm(
                vault, settings=settings, n=n, multi_hop=multi_hop, unanswerable=unanswerable, seed=seed, limit=limit,
                max_overlap=max_overlap, check_retrieval=not no_retrieval, mix=target,
            )
        else:
            result = generate_candidates(
                vault, seed=seed, limit=limit, max_overlap=max_overlap, check_retrieval=not no_retrieval, mix=target,
                per_table=per_table,
            )
        if not result.candidates:
            raise BadConfig(Problem(
                f"no candidate survived ({result.report['generated']} generated, filtered: {result.report['filtered']})",
                path=str(vault), field="--vault",
            ))
        cases = [ImportedCase(c.case, c.rel_path or str(vault), i, c.line) for i, c in enumerate(result.candidates)]
        kept = write_eval_set(cases, output, force=force)
        if kept is not None:
            typer.echo(printable(f"evalkit: kept the file --force replaced as {kept}"), err=True)
        report = dict(result.report, output=str(output))
        _write_json(report_path(output), report)
        config = getattr(result, "config", None)
        if use_llm and config is not None:
            _write_json(config_path(output), dict(config, output=str(output)))
    if as_json:
        typer.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    by_pattern = ", ".join(f"{k} {v}" for k, v in report["generated_by_pattern"].items() if v) or "none"
    filtered = ", ".join(f"{k} {v}" for k, v in sorted(report["filtered"].items())) or "none"
    cats = ", ".join(f"{k} {v}" for k, v in report["categories"].items())
    if report.get("difficulties"):
        cats += "; " + ", ".join(f"{k} {v}" for k, v in report["difficulties"].items())
    typer.echo(printable(f"evalkit: {report['generated']} candidates from {vault} ({by_pattern})"))
    typer.echo(f"evalkit: filtered: {filtered}; sampled out: {report['sampled_out']}")
    mix_rows = [(k, m) for k, m in report.get("mix", {}).items() if "n_target" in m]
    if mix_rows:
        typer.echo(printable("evalkit: mix (written of asked, share vs target): " + ", ".join(
            f"{k} {m['n']} of {m['n_target']} ({m['actual']:.2f} vs {m['target']:.2f})" for k, m in mix_rows)))
    short = [f"{k} {m['n']} of {m['n_target']}" for k, m in mix_rows if m["n"] < m["n_target"]]
    if short:
        typer.echo(printable(f"evalkit: warning: --mix asks for more than the candidates hold: {', '.join(short)}; no other "
                             "category fills the gap (offline writes factual and how/why questions; --model writes others)"), err=True)
    typer.echo(
        printable(f"evalkit: wrote {report['written']} candidates to {output} ({cats}); "
                  f"{report['flagged']['unretrievable']} flagged unretrievable; report: {report_path(output)}")
    )
    if "llm" in report:
        llm = report["llm"]
        cost = f"${llm['cost_usd']:.4f}" if llm["price_known"] else "cost unknown (no price for this model)"
        typer.echo(printable(
            f"evalkit: {llm['provider']}:{llm['model']}: {llm['calls']} calls, {llm['cache_hits']} cache hits, "
            f"{llm['prompt_tokens']} prompt + {llm['completion_tokens']} completion tokens, {cost}"
        ))
        typer.echo(printable(f"evalkit: config: {config_path(output)}"))
    typer.echo(printable(f"evalkit: review them into a new version of your eval set with: "
                          f"evalkit label --review-auto --eval-set {output} --into EVAL_SET.jsonl --vault {vault}"))


def _write_json(path: Path, obj: dict) -> None:
    from evalkit.store.atomic import write_atomic

    write_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


plain_metavars(app)
