"""embed.py: `evalkit embed --run-id ID`, the embedding analysis of a
stored run (evalkit.embeddings.analysis; EVAL.md, "Embedding analysis").

Writes embeddings.json into the run folder (and re-renders its report.html when it has one).
Offline by default (lexical vectors); `--embed-base-url URL --embed-model MODEL` (or
EVALKIT_EMBED_BASE_URL / EVALKIT_EMBED_MODEL) use any OpenAI-compatible embeddings endpoint,
its key read from EVALKIT_EMBED_API_KEY (the environment or .env). Exit 0 ok; 2 bad input or
an endpoint that failed (recorded in embeddings.json; the run's other files are untouched).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    RESULTS_DIR,
    RUN_ID,
    PanelledCommand,
    exit_on_known_errors,
    judge_options,
    load_dotenv_once,
    plain_metavars,
    printable,
    target_options,
)

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="Embedding analysis of a stored run: question-to-gold against question-to-retrieved similarity, the cases "
    "whose gold is far from the question, and k-means clusters of the questions with their failure rates; written "
    "to embeddings.json and shown in report.html. Offline lexical vectors by default, or any OpenAI-compatible "
    "/v1/embeddings endpoint (key in EVALKIT_EMBED_API_KEY). Exit 0 ok, 2 bad input or an endpoint that failed.",
)

_JUDGE = judge_options("Cache")
_TARGET = target_options("Endpoint")


@app.command(cls=PanelledCommand)
def main(
    run_id: str = RUN_ID,
    results_dir: Path = RESULTS_DIR,
    embed_base_url: Optional[str] = typer.Option(
        None, "--embed-base-url", metavar="URL", envvar="EVALKIT_EMBED_BASE_URL", rich_help_panel="Endpoint",
        help="Base URL of an OpenAI-compatible embeddings server, e.g. https://api.openai.com/v1 or "
        "http://127.0.0.1:11434/v1 (Ollama). (default: offline lexical vectors, no download)",
    ),
    embed_model: Optional[str] = typer.Option(
        None, "--embed-model", metavar="MODEL", envvar="EVALKIT_EMBED_MODEL", rich_help_panel="Endpoint",
        help="Embedding model the server knows, e.g. text-embedding-3-small or nomic-embed-text.",
    ),
    batch_size: int = typer.Option(64, "--batch-size", min=1, metavar="N", rich_help_panel="Endpoint",
                                   help="Texts per embeddings request."),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0, metavar="SECONDS", rich_help_panel="Endpoint",
                                  help="Seconds per embeddings request."),
    retries: Optional[int] = _TARGET["retries"],
    notes: Optional[Path] = typer.Option(
        None, "--notes", metavar="PATH", help="Notes folder the gold supports' text (and the full text of chunks the run stored cut) is "
        "read from. (default: the vault config.json records, for a reference-chatbot run; else the run's retrieved "
        "chunks that match the gold)",
    ),
    far_percentile: float = typer.Option(
        10.0, "--far-percentile", min=0.0, max=100.0, metavar="P",
        help="Gold is far from the question at or below this percentile of the run's question-to-gold similarity.",
    ),
    max_clusters: int = typer.Option(8, "--max-clusters", min=2, metavar="K",
                                     help="Largest k tried for the question clusters (k = 2..K, best silhouette)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the k-means seeding."),
    no_cache: bool = _JUDGE["no_cache"],
    refresh_cache: bool = _JUDGE["refresh_cache"],
    cache_path: Path = _JUDGE["cache_path"],
) -> None:
    """Analyze RUN_ID's questions, gold and retrieved chunks with embeddings."""
    with exit_on_known_errors():
        load_dotenv_once()  # EVALKIT_EMBED_* and the key, from .env
        from evalkit.derive.summary import open_run
        from evalkit.embeddings.analysis import analyze_run, error_body, write_analysis
        from evalkit.embeddings.embedders import EmbeddingError, build_embedder

        base_url = embed_base_url or os.environ.get("EVALKIT_EMBED_BASE_URL") or None
        model = embed_model or os.environ.get("EVALKIT_EMBED_MODEL") or None
        embedder = build_embedder(
            base_url=base_url, model=model, timeout=timeout, retries=3 if retries is None else retries,
            batch_size=batch_size, cache_path=None if no_cache else cache_path, refresh_cache=refresh_cache,
        )
        if notes is not None and not notes.is_dir():
            from evalkit.errors import InputError, Problem

            raise InputError(Problem("is not a folder", path=str(notes), field="--notes"))
        run = open_run(results_dir, run_id)
        with run.writer("embed"):
            try:
                body = analyze_run(run, embedder, notes=notes, far_percentile=far_percentile,
                                   max_clusters=max_clusters, seed=seed)
            except EmbeddingError as e:
                write_analysis(run, error_body(run, embedder.identity(), e))
                raise
            path = write_analysis(run, body)
    stats = body["distribution"]
    clusters = body["clusters"]
    cache = ""
    if hasattr(embedder, "hits"):
        cache = f"; cache {embedder.hits} hits, {embedder.misses} misses"  # type: ignore[attr-defined]
    gold = stats["q_gold_best"]["median"]
    ret = stats["q_retrieved_best"]["median"]
    typer.echo(printable(
        f"evalkit: wrote {path}: {_cases(body['n_cases'])}, embedder {body['embedder'].get('kind')}"
        f"{' ' + body['embedder']['model'] if body['embedder'].get('model') else ''}{cache}; median similarity "
        f"question-gold {_f(gold)}, question-retrieved {_f(ret)}; {_cases(body['far_gold']['n'])} with far gold; "
        + (f"{clusters['k']} clusters (silhouette {_f(clusters['silhouette'])})" if clusters.get("k")
           else f"no clusters ({clusters.get('skipped')})")
    ))
    if body["gold_unresolved"]:
        print(printable(f"evalkit: warning: {body['gold_unresolved']} gold supports have no text (not in the notes "
                        "or the run's chunks; pass --notes)"), file=sys.stderr)


def _cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


plain_metavars(app)
