"""serve_reference.py: serve the reference chatbot over the /api/v1/ask contract (DESIGN.md §5)."""

from __future__ import annotations

from pathlib import Path

import typer

from evalkit.cli.common import exit_on_known_errors, load_dotenv_once, plain_metavars, vault_id_option

app = typer.Typer(add_completion=False, rich_markup_mode=None, help="Serve the reference chatbot over HTTP (POST /api/v1/ask).")


@app.command()
def main(
    vault: Path = typer.Option(Path("sample_vault"), "--vault", help="Folder of markdown notes to index."),
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port (0 = any free port)."),
    vault_id: str | None = vault_id_option(from_eval_set=False),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=8, help="Chunk token budget [default: 256]."),
    abstain_threshold: float | None = typer.Option(
        None, "--abstain-threshold", min=0.0, max=1.0, help="Abstain when the evidence share is below this [default: 0.4]."
    ),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request on stderr."),
) -> None:
    """Index VAULT once, then answer until Ctrl-C. Endpoints come from EMBEDDINGS_* / ANSWER_* (or .env)."""
    load_dotenv_once()
    with exit_on_known_errors():
        from evalkit.reference.server import build_reference_server

        server, bot = build_reference_server(
            vault, host=host, port=port, vault_id=vault_id, max_tokens=max_tokens,
            abstain_threshold=abstain_threshold, quiet=not verbose,
        )
    stats = bot.index_stats()
    bound_host, bound_port = server.server_address[:2]
    typer.echo(
        f"reference chatbot: {stats['docs_processed']} notes, {stats['chunks_embedded']} chunks "
        f"({bot.versions()['retriever_version']}, {bot.versions()['answerer_version']})"
    )
    typer.echo(f"serving on http://{bound_host}:{bound_port}  (POST /api/v1/ask?debug=true; Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        typer.echo("stopped")
    finally:
        server.server_close()
        bot.close()


plain_metavars(app)
