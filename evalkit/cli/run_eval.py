"""run_eval.py: run an eval set against a chatbot and write `results/<run_id>/`.

Every option defaults to None here so that the library can tell what the user gave:
on `--resume` only given values override the stored run; the real defaults live in
evalkit.config.RunSettings (and are shown in each option's help).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import EXIT_INTERRUPTED, RPS, exit_on_known_errors, load_dotenv_once

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Run an eval set against a chatbot (HTTP API, Python callable, replayed log or the built-in "
    "reference chatbot) and write results/<run_id>/{config.json,results.jsonl,metrics.json}. "
    "Exit 0 ok, 1 regression gate failed, 2 bad input, 130 interrupted (resume with --resume).",
)

_T = "target"
_J = "judge"
_S = "selection"
_G = "regression gate"
_O = "output"


@app.command()
def main(
    eval_set: Optional[list[Path]] = typer.Option(
        None, "--eval-set", help="Eval set: a .jsonl file or a folder of per-domain .jsonl files; repeatable. (default: eval_set.jsonl)"
    ),
    api_url: Optional[str] = typer.Option(
        None, "--api-url", envvar="EVAL_API_URL", help="Chatbot API base URL (POST /api/v1/ask).", rich_help_panel=_T
    ),
    target: Optional[str] = typer.Option(
        None, "--target", help="python:package.module:function or replay:path.jsonl.", rich_help_panel=_T
    ),
    vault: Optional[Path] = typer.Option(
        None, "--vault", help="Notes folder for the in-process reference chatbot (no --api-url/--target). (default: sample_vault)", rich_help_panel=_T
    ),
    k: Optional[list[int]] = typer.Option(
        None, "--k", help="Cut-off K; repeatable, the first is the primary K. (default: 5)", rich_help_panel=_T
    ),
    folder_mode: Optional[str] = typer.Option(
        None, "--folder-mode", help="off | on | on_with_fallback. (default: off)", rich_help_panel=_T
    ),
    rerank_vector_weight: Optional[float] = typer.Option(None, "--rerank-vector-weight", help="Weight of the vector score in reranking. (default: 0.7)", rich_help_panel=_T),
    rerank_lexical_weight: Optional[float] = typer.Option(None, "--rerank-lexical-weight", help="Weight of the lexical score in reranking. (default: 0.3)", rich_help_panel=_T),
    param: Optional[list[str]] = typer.Option(
        None, "--param", help="Free option sent in the request's `options`, key=value (JSON values parsed); repeatable.", rich_help_panel=_T
    ),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per request. (default: 60)", rich_help_panel=_T),
    retries: Optional[int] = typer.Option(
        None, "--retries", help="Retries on connection errors, 429 and 5xx (backoff + jitter). (default: 3)", rich_help_panel=_T
    ),
    rps: Optional[float] = RPS,
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", help="Cases in flight at once (1 = sequential). (default: 4)"
    ),
    retrieval_only: Optional[bool] = typer.Option(
        None, "--retrieval-only", help="Retrieval (and target-reported abstention) metrics only: no judge calls.", rich_help_panel=_J
    ),
    judge_provider: Optional[str] = typer.Option(
        None, "--judge-provider", help="openai | anthropic | openai-compatible | heuristic. (default: heuristic unless configured)", rich_help_panel=_J
    ),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Pinned judge model id.", rich_help_panel=_J),
    judge_base_url: Optional[str] = typer.Option(
        None, "--judge-base-url", help="Base URL of an OpenAI-compatible judge server.", rich_help_panel=_J
    ),
    judge_temperature: Optional[float] = typer.Option(None, "--judge-temperature", help="Judge sampling temperature. (default: 0)", rich_help_panel=_J),
    allow_unpinned: Optional[bool] = typer.Option(
        None, "--allow-unpinned", help="Accept a judge model alias that is not a dated snapshot.", rich_help_panel=_J
    ),
    no_cache: Optional[bool] = typer.Option(None, "--no-cache", help="Do not read or write the judge cache.", rich_help_panel=_J),
    limit: Optional[int] = typer.Option(None, "--limit", help="Run only the first N selected cases.", rich_help_panel=_S),
    ids: Optional[str] = typer.Option(None, "--ids", help="Comma-separated case ids to run.", rich_help_panel=_S),
    tag: Optional[list[str]] = typer.Option(None, "--tag", help="Only cases with this tag; repeatable (OR).", rich_help_panel=_S),
    category: Optional[list[str]] = typer.Option(
        None, "--category", help="Only cases of this category; repeatable (OR).", rich_help_panel=_S
    ),
    require_snippets: Optional[bool] = typer.Option(
        None, "--require-snippets", help="A chunk matches a gold support only if it contains the gold snippets.", rich_help_panel=_S
    ),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Seed recorded in config.json and metrics.json (part of the config hash); nothing in a run draws random numbers.", rich_help_panel=_S
    ),
    results_dir: Optional[Path] = typer.Option(
        None, "--results-dir", "--output-dir", help="Folder holding run folders. (default: results)", rich_help_panel=_O
    ),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Name the run folder (default: <UTC time>-<config hash>).", rich_help_panel=_O),
    resume: Optional[str] = typer.Option(
        None, "--resume", help="Finish an interrupted run: same config, skip finished cases.", rich_help_panel=_O
    ),
    retry_errors: Optional[bool] = typer.Option(
        None,
        "--retry-errors",
        help="With --resume: also redo the cases the target failed (timeouts, HTTP errors...); their new record replaces the old.",
        rich_help_panel=_O,
    ),
    store_full_text: Optional[bool] = typer.Option(
        None, "--store-full-text", help="Store full chunk text (default: first 200 characters).", rich_help_panel=_O
    ),
    quiet: Optional[bool] = typer.Option(None, "--quiet", "-q", help="No progress bar or table; print the run folder.", rich_help_panel=_O),
    json_output: Optional[bool] = typer.Option(
        None, "--json", help='Print one JSON object last: {"run_id","run_dir","aggregate_metrics","gate"}.', rich_help_panel=_O
    ),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Run id to gate against (its metrics.json).", rich_help_panel=_G),
    regression_threshold_recall: Optional[float] = typer.Option(
        None, "--regression-threshold-recall", help="Max absolute drop of Recall@K. (default: 0.05)", rich_help_panel=_G
    ),
    regression_threshold_mrr: Optional[float] = typer.Option(
        None, "--regression-threshold-mrr", help="Max absolute drop of MRR. (default: 0.10)", rich_help_panel=_G
    ),
    regression_threshold_scope_miss: Optional[float] = typer.Option(
        None, "--regression-threshold-scope-miss", help="Max absolute rise of the scope miss rate. (default: 0.10)", rich_help_panel=_G
    ),
    regression_threshold_groundedness: Optional[float] = typer.Option(
        None, "--regression-threshold-groundedness", help="Max drop of mean groundedness (0-5 points). (default: 0.5)", rich_help_panel=_G
    ),
    allow_regressions: Optional[bool] = typer.Option(
        None, "--allow-regressions", help="Report regressions but exit 0.", rich_help_panel=_G
    ),
    ignore_invariants: Optional[bool] = typer.Option(
        None,
        "--ignore-invariants",
        help="Gate against a baseline run on another eval set version or case count (refused by default).",
        rich_help_panel=_G,
    ),
) -> None:
    """Run an eval set and write results/<run_id>/."""
    load_dotenv_once()
    with exit_on_known_errors():
        from evalkit.api import RunInterrupted, run_eval
        from evalkit.errors import GateFailed
        from evalkit.targets import parse_param_options

        values = {
            "eval_set": [str(p) for p in eval_set] if eval_set else None,
            "api_url": api_url or None,
            "target": target,
            "vault": str(vault) if vault is not None else None,
            "k": list(k) if k else None,
            "folder_mode": folder_mode,
            "rerank_vector_weight": rerank_vector_weight,
            "rerank_lexical_weight": rerank_lexical_weight,
            "params": parse_param_options(param) if param else None,
            "timeout": timeout,
            "retries": retries,
            "rps": rps,
            "concurrency": concurrency,
            "retrieval_only": retrieval_only,
            "judge_provider": judge_provider,
            "judge_model": judge_model,
            "judge_base_url": judge_base_url,
            "judge_temperature": judge_temperature,
            "allow_unpinned": allow_unpinned,
            "no_cache": no_cache,
            "limit": limit,
            "ids": ids,
            "tag": list(tag) if tag else None,
            "category": list(category) if category else None,
            "require_snippets": require_snippets,
            "seed": seed,
            "results_dir": str(results_dir) if results_dir is not None else None,
            "run_id": run_id,
            "resume": resume,
            "retry_errors": retry_errors,
            "store_full_text": store_full_text,
            "quiet": quiet,
            "json_output": json_output,
            "baseline": baseline,
            "regression_threshold_recall": regression_threshold_recall,
            "regression_threshold_mrr": regression_threshold_mrr,
            "regression_threshold_scope_miss": regression_threshold_scope_miss,
            "regression_threshold_groundedness": regression_threshold_groundedness,
            "allow_regressions": allow_regressions,
            "ignore_invariants": ignore_invariants,
        }
        values = {key: v for key, v in values.items() if v is not None}

        from rich.console import Console

        from evalkit.report.run import RunProgress, print_run_summary

        # With --json, stdout carries only the JSON object; people-facing output goes to stderr.
        console = Console(stderr=bool(json_output))
        progress = RunProgress(Console(stderr=True), disable=bool(quiet))
        try:
            result = run_eval(progress=progress, **values)
        except RunInterrupted as e:
            print(f"evalkit: interrupted; resume with: {e.resume_command}", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None

        if not quiet:
            print_run_summary(result.metrics, result.run_dir, judge=result.judge, gate=result.gate, console=console)
        if result.n_cases and result.n_errors == result.n_cases:
            print(f"evalkit: warning: every case failed in the target ({result.n_errors} errors)", file=sys.stderr)
        if json_output:
            import orjson

            sys.stdout.write(orjson.dumps(result.to_json()).decode() + "\n")
        elif quiet:
            print(result.run_dir)
        if result.gate_failed:
            raise GateFailed([r["message"] for r in result.gate["regressions"]] if result.gate else [])
