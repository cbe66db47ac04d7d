"""run_eval.py: run an eval set against a chatbot and write `results/<run_id>/`.

Every option defaults to None here so that the library can tell what the user gave:
on `--resume` only given values override the stored run; the real defaults live in
evalkit.config.RunSettings (and are shown in each option's help).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    RPS,
    allow_missing_metrics_option,
    exit_on_known_errors,
    judge_options,
    load_dotenv_once,
    plain_metavars,
    regression_threshold_option,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Run an eval set against a chatbot (HTTP API, Python callable, replayed log or the built-in "
    "reference chatbot) and write results/<run_id>/{config.json,results.jsonl,metrics.json}. "
    "Exit 0 ok, 1 regression gate or --threshold failed, 2 bad input or unusable target, 3 incomplete run "
    "(the target failed on more than --max-error-rate of the cases), 130 interrupted (resume with --resume).",
)

_T = "target"
_J = "judge"
_S = "selection"
_G = "regression gate"
_O = "output"
_JUDGE = judge_options(_J)
_M = "config matrix"
_R = "reproducibility"


@app.command()
def main(
    eval_set: Optional[list[Path]] = typer.Option(
        None, "--eval-set", metavar="PATH", help="Eval set: a .jsonl file or a folder of per-domain .jsonl files; repeatable. (default: eval_set.jsonl)"
    ),
    api_url: Optional[str] = typer.Option(
        None, "--api-url", metavar="URL", envvar="EVAL_API_URL", help="Chatbot API base URL (POST /api/v1/ask).", rich_help_panel=_T
    ),
    target: Optional[str] = typer.Option(
        None, "--target", metavar="SPEC", help="python:package.module:function or replay:path.jsonl.", rich_help_panel=_T
    ),
    vault: Optional[Path] = typer.Option(
        None, "--vault", metavar="PATH", help="Notes folder for the in-process reference chatbot (no --api-url/--target). (default: sample_vault)", rich_help_panel=_T
    ),
    k: Optional[list[int]] = typer.Option(
        None, "--k", metavar="K", help="Cut-off K; repeatable, the first is the primary K. (default: 5)", rich_help_panel=_T
    ),
    folder_mode: Optional[str] = typer.Option(
        None, "--folder-mode", metavar="MODE", help="off | on | on_with_fallback. (default: off)", rich_help_panel=_T
    ),
    send_scope: Optional[str] = typer.Option(
        None,
        "--send-scope",
        metavar="SCOPE",
        help="none | vaults | folders | both: which of a case's vaults/folders to send as a search filter. "
        "They are written from the gold labels, so sending them tells the chatbot where the answer is; "
        "use only when your chatbot's users pick a scope themselves. (default: none)",
        rich_help_panel=_T,
    ),
    rerank_vector_weight: Optional[float] = typer.Option(None, "--rerank-vector-weight", metavar="FLOAT", help="Weight of the vector score in reranking. (default: 0.7)", rich_help_panel=_T),
    rerank_lexical_weight: Optional[float] = typer.Option(None, "--rerank-lexical-weight", metavar="FLOAT", help="Weight of the lexical score in reranking. (default: 0.3)", rich_help_panel=_T),
    param: Optional[list[str]] = typer.Option(
        None, "--param", metavar="KEY=VALUE", help="Free option sent in the request's `options`, key=value (JSON values parsed); repeatable.", rich_help_panel=_T
    ),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help="Seconds per try of a request, all of it: connect, send and the whole answer. (default: 60)", rich_help_panel=_T),
    retries: Optional[int] = typer.Option(
        None, "--retries", metavar="N", help="Retries on connection errors, 429 and 5xx (backoff + jitter). (default: 3)", rich_help_panel=_T
    ),
    rps: Optional[float] = RPS,
    max_response_bytes: Optional[int] = typer.Option(
        None,
        "--max-response-bytes",
        metavar="BYTES",
        help="Largest answer body read from an HTTP target (after any decompression); a larger one is "
        "recorded as error kind response_too_large. (default: 33554432, 32 MiB)",
        rich_help_panel=_T,
    ),
    max_retry_wait: Optional[float] = typer.Option(
        None,
        "--max-retry-wait",
        metavar="SECONDS",
        help="Longest wait honoured when a server (target or judge) answers 429/503 with Retry-After; "
        "a longer request is cut to this. (default: 60)",
        rich_help_panel=_T,
    ),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", metavar="N", help="Cases in flight at once (1 = sequential). (default: 4)"
    ),
    max_error_rate: Optional[float] = typer.Option(
        None,
        "--max-error-rate",
        metavar="SHARE",
        help="Share of cases the target may fail (timeouts, HTTP errors, bad responses) before the run "
        "exits 3 as incomplete; failed cases score as misses. (default: 0)",
        rich_help_panel=_T,
    ),
    no_probe: Optional[bool] = typer.Option(
        None,
        "--no-probe",
        help="Do not ask the target one probe question before the first case (the probe stops a run "
        "against a dead or non-contract target in seconds, exit 2).",
        rich_help_panel=_T,
    ),
    retrieval_only: Optional[bool] = typer.Option(
        None, "--retrieval-only", help="Retrieval (and target-reported abstention) metrics only: no judge calls.", rich_help_panel=_J
    ),
    judge_provider: Optional[str] = _JUDGE["judge_provider"],
    judge_model: Optional[str] = _JUDGE["judge_model"],
    judge_base_url: Optional[str] = _JUDGE["judge_base_url"],
    judge_temperature: Optional[float] = _JUDGE["judge_temperature"],
    allow_unpinned: Optional[bool] = typer.Option(
        None, "--allow-unpinned", help="Accept a judge model alias that is not a dated snapshot.", rich_help_panel=_J
    ),
    no_cache: Optional[bool] = typer.Option(None, "--no-cache", help="Do not read or write the judge cache.", rich_help_panel=_J),
    limit: Optional[int] = typer.Option(None, "--limit", metavar="N", help="Run only the first N selected cases.", rich_help_panel=_S),
    ids: Optional[str] = typer.Option(None, "--ids", metavar="ID,ID,...", help="Comma-separated case ids to run.", rich_help_panel=_S),
    tag: Optional[list[str]] = typer.Option(None, "--tag", metavar="TAG", help="Only cases with this tag; repeatable (OR).", rich_help_panel=_S),
    category: Optional[list[str]] = typer.Option(
        None, "--category", metavar="CATEGORY", help="Only cases of this category; repeatable (OR).", rich_help_panel=_S
    ),
    require_snippets: Optional[bool] = typer.Option(
        None, "--require-snippets", help="A chunk matches a gold support only if it contains the gold snippets.", rich_help_panel=_S
    ),
    seed: Optional[int] = typer.Option(
        None, "--seed", metavar="N", help="Seed recorded in config.json and metrics.json (part of the config hash); nothing in a run draws random numbers.", rich_help_panel=_S
    ),
    response_schema: Optional[Path] = typer.Option(
        None, "--response-schema", metavar="PATH", help="JSON Schema file each response (or --response-field of it) is validated against: response_validity per case, response_valid_rate in metrics.json.", rich_help_panel=_S
    ),
    response_field: Optional[str] = typer.Option(
        None, "--response-field", metavar="PATH", help="Dotted path of the validated value in the response, e.g. answer (a string there is parsed as JSON first). (default: the whole response)", rich_help_panel=_S
    ),
    require_fields: Optional[list[str]] = typer.Option(
        None, "--require-fields", metavar="A,B", help="Short form of --response-schema: the response (or --response-field) must be an object with these keys.", rich_help_panel=_S
    ),
    shard: Optional[str] = typer.Option(
        None,
        "--shard",
        metavar="I/N",
        help="Run only shard I of N (0-based: 0/4 .. 3/4): the selected cases whose sha256(id) mod N is I, into "
        "their own run folder (<run id>-shard-I-of-N); join the N shard runs with `evalkit merge`.",
        rich_help_panel=_S,
    ),
    shard_from_env: Optional[bool] = typer.Option(
        None,
        "--shard-from-env",
        help="Take the shard index from EVALKIT_SHARD_INDEX, JOB_COMPLETION_INDEX (Kubernetes Indexed Job) or "
        "SLURM_ARRAY_TASK_ID (minus SLURM_ARRAY_TASK_MIN), and the count from --shard-count, EVALKIT_SHARD_COUNT "
        "or SLURM_ARRAY_TASK_COUNT.",
        rich_help_panel=_S,
    ),
    shard_count: Optional[int] = typer.Option(
        None, "--shard-count", metavar="N", help="With --shard-from-env: the number of shards.", rich_help_panel=_S
    ),
    results_dir: Optional[Path] = typer.Option(
        None, "--results-dir", "--output-dir", metavar="PATH", help="Folder holding run folders. (default: results)", rich_help_panel=_O
    ),
    run_id: Optional[str] = typer.Option(None, "--run-id", metavar="RUN_ID", help="Name the run folder (default: <UTC time>-<config hash>).", rich_help_panel=_O),
    resume: Optional[str] = typer.Option(
        None, "--resume", metavar="RUN_ID", help="Finish an interrupted run: same config, skip finished cases.", rich_help_panel=_O
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
    baseline: Optional[str] = typer.Option(None, "--baseline", metavar="RUN_ID", help="Run id to gate against (its metrics.json).", rich_help_panel=_G),
    regression_threshold_recall: Optional[float] = regression_threshold_option("recall", _G),
    regression_threshold_mrr: Optional[float] = regression_threshold_option("mrr", _G),
    regression_threshold_scope_miss: Optional[float] = regression_threshold_option("scope_miss", _G),
    regression_threshold_groundedness: Optional[float] = regression_threshold_option("groundedness", _G),
    regression_threshold_correctness: Optional[float] = regression_threshold_option("correctness", _G),
    regression_threshold_attribution: Optional[float] = regression_threshold_option("attribution", _G),
    regression_threshold_abstention: Optional[float] = regression_threshold_option("abstention", _G),
    regression_threshold_hallucination: Optional[float] = regression_threshold_option("hallucination", _G),
    regression_threshold_false_abstention: Optional[float] = regression_threshold_option("false_abstention", _G),
    allow_regressions: Optional[bool] = typer.Option(
        None, "--allow-regressions", help="Report gate failures (regressions, nothing comparable, broken invariants) but exit 0.", rich_help_panel=_G
    ),
    ignore_invariants: Optional[bool] = typer.Option(
        None,
        "--ignore-invariants",
        help="Gate against a baseline run on another eval set version or case count (refused by default).",
        rich_help_panel=_G,
    ),
    allow_missing_metrics: Optional[bool] = allow_missing_metrics_option(_G),
    threshold: Optional[list[str]] = typer.Option(
        None,
        "--threshold",
        metavar="[METRIC=]VALUE",
        help="Absolute floor, exit 1 below it (no baseline needed); repeatable. VALUE like 0.7 or 70%. "
        "Bare: every one of recall_at_k_avg, mrr_avg, ndcg_at_k_avg, attribution_hit_rate, abstention_accuracy, "
        "latency_budget_score_avg the run measured. METRIC=VALUE: that metrics.json key (or ndcg@10), which must "
        "be measured; a ceiling for lower-is-better rates; judge means on their 0-5 scale. "
        "Not silenced by --allow-regressions.",
        rich_help_panel=_G,
    ),
    latency_budget_ms: Optional[float] = typer.Option(
        None,
        "--latency-budget-ms",
        metavar="MS",
        help="Latency budget per case (a case's constraints.latency_budget_ms wins): per-case score "
        "1 within budget, else max(0, 1 - (t - budget) / budget), t = the case's total latency; "
        "latency_budget_score_avg and within_budget_rate in metrics.json.",
        rich_help_panel=_T,
    ),
    answer_quality: Optional[bool] = typer.Option(
        None,
        "--answer-quality",
        help="Also run seed 002's answer-quality judge on answered answerable cases: relevance, groundedness and "
        "completeness vs the case's expected_topics, 0-1 each; answer_quality_avg is their mean.",
        rich_help_panel=_J,
        show_default=False,
    ),
    trials: Optional[int] = typer.Option(
        None,
        "--trials",
        min=1,
        max=100,
        metavar="N",
        help="Ask every case N times (Evalite's trialCount): per metric, each trial's value, mean, std and the "
        "per-case flake rate in metrics.json `trials`; compare_runs pairs cases on their trial mean.",
        rich_help_panel=_T,
    ),
    suite: Optional[Path] = typer.Option(
        None,
        "--suite",
        metavar="PATH",
        help="Scenario suite (TOML: [scenarios.<name>] metric, weight): each scenario's primary score and the "
        "weighted global score in metrics.json `suite` and summary.md (seed 004).",
        rich_help_panel=_T,
    ),
    matrix: Optional[list[str]] = typer.Option(
        None, "--matrix", metavar="KEY=V1,V2,...", help="Run the same cases once per value into sibling runs <run id>-<value> "
        "and print one table; KEY is a --param option or one of folder_mode, send_scope, rerank_*_weight, latency_budget_ms. "
        "Repeatable (cross product).", rich_help_panel=_M,
    ),
    matrix_file: Optional[Path] = typer.Option(
        None, "--matrix-file", metavar="PATH", help="TOML file of named presets: [presets.NAME] params = {...} (and run settings).",
        rich_help_panel=_M,
    ),
    expect_order: Optional[str] = typer.Option(
        None, "--expect-order", metavar="SPEC", help='With --matrix: e.g. "fast<=balanced<=thorough:ndcg@10" (or >=; metric default '
        "ndcg_at_k_avg); exit 1 when a neighbour pair is inverted significantly (compare_runs' paired test).", rich_help_panel=_M,
    ),
    repro: Optional[bool] = typer.Option(
        None, "--repro", help="Reproducibility check: run twice (the second run is <run id>-repro) and compare the runs "
        "record by record (retrieved chunk ids and scores, every per-case metric; not latency or cost); exit 1 naming "
        "the cases that differ beyond --tolerance. Not with --resume, --baseline, --threshold or --matrix.",
        rich_help_panel=_R,
    ),
    tolerance: Optional[float] = typer.Option(
        None, "--tolerance", min=0.0, metavar="FLOAT", help="With --repro: largest |b - a| of a per-case metric that is not a difference "
        "(a chunk's score_final: at least 1e-10). (default: 0)",
        rich_help_panel=_R,
    ),
) -> None:
    """Run an eval set and write results/<run_id>/."""
    load_dotenv_once()
    with exit_on_known_errors():
        from evalkit.errors import GateFailed
        from evalkit.run.api import RunInterrupted, run_eval
        from evalkit.targets import parse_param_options

        values = {
            "eval_set": [str(p) for p in eval_set] if eval_set else None,
            "api_url": api_url or None,
            "target": target,
            "vault": str(vault) if vault is not None else None,
            "k": list(k) if k else None,
            "folder_mode": folder_mode,
            "send_scope": send_scope,
            "max_error_rate": max_error_rate,
            "no_probe": no_probe,
            "rerank_vector_weight": rerank_vector_weight,
            "rerank_lexical_weight": rerank_lexical_weight,
            "params": parse_param_options(param) if param else None,
            "timeout": timeout,
            "retries": retries,
            "rps": rps,
            "max_retry_wait": max_retry_wait,
            "max_response_bytes": max_response_bytes,
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
            "response_schema": str(response_schema) if response_schema is not None else None,
            "response_field": response_field,
            "require_fields": list(require_fields) if require_fields else None,
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
            "regression_threshold_correctness": regression_threshold_correctness,
            "regression_threshold_attribution": regression_threshold_attribution,
            "regression_threshold_abstention": regression_threshold_abstention,
            "regression_threshold_hallucination": regression_threshold_hallucination,
            "regression_threshold_false_abstention": regression_threshold_false_abstention,
            "allow_regressions": allow_regressions,
            "ignore_invariants": ignore_invariants,
            "allow_missing_metrics": allow_missing_metrics,
            "thresholds": list(threshold) if threshold else None,
            "latency_budget_ms": latency_budget_ms,
            "trials": trials,
            "answer_quality": answer_quality,
            "suite": str(suite) if suite is not None else None,
        }
        values = {key: v for key, v in values.items() if v is not None}
        values.update(_shard_values(shard, shard_from_env, shard_count))
        if repro or tolerance is not None:
            from evalkit.cli.repro import run_repro_cli

            matrix_flags = [f for f, v in (("--matrix", matrix), ("--matrix-file", matrix_file), ("--expect-order", expect_order)) if v]
            raise typer.Exit(run_repro_cli(values, tolerance, repro=bool(repro), refused=matrix_flags))
        if matrix or matrix_file is not None or expect_order is not None:
            from evalkit.cli.run_matrix import run_matrix_cli

            raise typer.Exit(run_matrix_cli(values, matrix, matrix_file, expect_order))

        from rich.console import Console

        from evalkit.report.run import RunProgress, print_run_summary

        # With --json, stdout carries only the JSON object; people-facing output goes to stderr.
        console = Console(stderr=bool(json_output))
        progress = RunProgress(Console(stderr=True), disable=bool(quiet))
        # What is imported by now lives for the whole process: keep the collector from
        # scanning it again and again during the run, and at exit (about 0.15 s a run).
        import gc

        gc.freeze()
        try:
            result = run_eval(progress=progress, **values)
        except RunInterrupted as e:
            print(f"evalkit: interrupted; resume with: {e.resume_command}", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None

        if not quiet:
            print_run_summary(result.metrics, result.run_dir, judge=result.judge, gate=result.gate, console=console)
        for w in result.warnings:
            # target errors are said below with the exit code they cause; stale anchors were said before the run
            if w.get("kind") not in ("target_errors", "stale_anchors"):
                level = "note" if w.get("severity") == "info" else "warning"
                print(f"evalkit: {level}: {w['message']}", file=sys.stderr)
        if json_output:
            import orjson

            sys.stdout.write(orjson.dumps(result.to_json()).decode() + "\n")
        elif quiet:
            print(result.run_dir)
        if result.gate_failed or result.thresholds_failed:
            lines = list(result.gate.get("failures") or []) if result.gate_failed and result.gate else []
            if result.thresholds_failed and result.thresholds:
                both = result.gate_failed
                lines += [f"threshold: {line}" if both else str(line) for line in result.thresholds.get("failures") or []]
            title = (
                "regression gate and threshold check failed" if result.gate_failed and result.thresholds_failed
                else "threshold check failed" if result.thresholds_failed else "regression gate failed"
            )
            raise GateFailed(lines, title=title)
        if result.incomplete:
            allowed = result.max_error_rate
            print(
                f"evalkit: incomplete run: the target failed {result.n_errors} of {result.n_cases} cases "
                f"({result.error_rate:.1%}; --max-error-rate {allowed:g}); they score as misses. "
                f"Fix the target and redo them with: --resume {shlex.quote(result.run_id)} --retry-errors",
                file=sys.stderr,
            )
            raise typer.Exit(EXIT_INCOMPLETE)


def _shard_values(shard: str | None, from_env: bool | None, count: int | None) -> dict[str, str]:
    """{"shard": "i/n"} from --shard or --shard-from-env (BadConfig, exit 2, when unusable)."""
    from evalkit.errors import BadConfig, Problem

    if shard is not None and from_env:
        raise BadConfig(Problem("give --shard I/N or --shard-from-env, not both", field="--shard"))
    if count is not None and not from_env:
        raise BadConfig(Problem("goes with --shard-from-env (--shard I/N says the count itself)", field="--shard-count"))
    if from_env:
        from evalkit.evalset.shard import shard_from_env

        return {"shard": str(shard_from_env(count))}
    return {"shard": shard} if shard is not None else {}


plain_metavars(app)
