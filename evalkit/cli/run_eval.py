"""run_eval.py: run an eval set against a chatbot and write `results/<run_id>/`.

Every option defaults to None here so that the library can tell what the user gave:
on `--resume` only given values override the stored run. The real defaults live in
evalkit.config.RunSettings; each option's help reads its default there (cli.common.run_setting),
and the parameters map onto its fields by name (given_settings).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import typer

from evalkit.cli.common import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    PANEL_GATE,
    PANEL_JUDGE,
    PANEL_OUTPUT,
    PANEL_SCORING,
    PANEL_SELECTION,
    PANEL_TARGET,
    PanelledCommand,
    categories_option,
    concurrency_option,
    custom_metric_options,
    eval_set_option,
    exit_on_known_errors,
    gate_options,
    json_option,
    judge_options,
    judge_samples_option,
    k_option,
    load_dotenv_once,
    max_retry_wait_option,
    plain_metavars,
    quiet_option,
    require_snippets_option,
    results_dir_option,
    rps_option,
    run_setting,
    selection_options,
    target_options,
    tolerance_option,
    vault_id_option,
)
from evalkit.defaults import FLAG_OF_FIELD, TRUNCATE_CHARS

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Run an eval set against a chatbot (HTTP API, Python callable, replayed log or the built-in "
    "reference chatbot) and write results/<run_id>/{config.json,results.jsonl,metrics.json}. "
    "Exit 0 ok, 1 regression gate or --threshold failed, 2 bad input, unusable target, or a run that could not "
    "measure retrieval (--allow-format-mismatch), 3 incomplete run "
    "(the target failed on more than --max-error-rate of the cases), 4 not enough evidence for the --baseline gate, 130 interrupted (resume with --resume).",
)

_T, _S, _C, _J, _G, _O = PANEL_TARGET, PANEL_SELECTION, PANEL_SCORING, PANEL_JUDGE, PANEL_GATE, PANEL_OUTPUT
_M = "Config matrix"
_R = "Reproducibility"
_TARGET = target_options(_T, api_url_envvar="EVAL_API_URL")
_SELECT = selection_options(_S)
_JUDGE = judge_options(_J)
_GATE = gate_options(_G)
_CUSTOM = custom_metric_options(_J)

# Parameters that are not RunSettings fields: modes and flags the CLI resolves itself.
CLI_ONLY = frozenset({"shard_from_env", "shard_count", "matrix", "matrix_file", "expect_order", "repro", "tolerance",
                      "watch", "watch_max_runs"})
# Parameters named after their flag whose RunSettings field has another name (--param -> params).
FIELD_OF = {flag.removeprefix("--").replace("-", "_"): field for field, flag in FLAG_OF_FIELD.items()}


@app.command(cls=PanelledCommand)
def main(
    api_url: Optional[str] = _TARGET["api_url"],
    target: Optional[str] = _TARGET["target"],
    vault: Optional[Path] = _TARGET["vault"],
    vault_id: Optional[str] = vault_id_option(_T),
    param: Optional[list[str]] = _TARGET["param"],
    folder_mode: Optional[str] = run_setting(
        typer.Option(None, "--folder-mode", metavar="MODE", help="off | on | on_with_fallback.", rich_help_panel=_T)
    ),
    history: Optional[str] = run_setting(typer.Option(
        None, "--history", metavar="MODE",
        help="live | reference | none: what a conversation's later turns are sent as the turns before them: the "
        "chatbot's own earlier answers, the eval set's reference answers (expected_answer; a late turn is not "
        "punished for an early mistake), or nothing (each turn asked alone).",
        rich_help_panel=_T,
    )),
    send_scope: Optional[str] = run_setting(typer.Option(
        None,
        "--send-scope",
        metavar="SCOPE",
        help="none | vaults | folders | both | collection, or parts joined by commas (folders,collection): which of "
        "a case's vaults/folders to send as a search filter, and its collection (seed 002's, as options.collection). "
        "They are written from the gold labels, so sending them tells the chatbot where the answer is; "
        "use only when your chatbot's users pick a scope themselves.",
        rich_help_panel=_T,
    )),
    rerank_vector_weight: Optional[float] = run_setting(typer.Option(
        None, "--rerank-vector-weight", metavar="FLOAT", help="Weight of the vector score in reranking.", rich_help_panel=_T
    )),
    rerank_lexical_weight: Optional[float] = run_setting(typer.Option(
        None, "--rerank-lexical-weight", metavar="FLOAT", help="Weight of the lexical score in reranking.", rich_help_panel=_T
    )),
    timeout: Optional[float] = _TARGET["timeout"],
    retries: Optional[int] = _TARGET["retries"],
    concurrency: Optional[int] = run_setting(concurrency_option("Cases", _T)),
    target_processes: Optional[int] = run_setting(typer.Option(
        None, "--target-processes", min=1, metavar="N",
        help="Run a sync python: target's function in N worker processes instead of threads, for a function "
        "that computes rather than waits (threads share one core); each process imports its module once. "
        "Calls in flight stay at most --concurrency.",
        rich_help_panel=_T,
    )),
    task_cache: Optional[str] = run_setting(typer.Option(
        None, "--task-cache", metavar="PATH",
        help="Keep the target's answers in this SQLite file and answer from it when the same question (history, "
        "options, --param) goes to the same target again: a second run asks the target nothing. Hits and misses "
        "in config.json; a cached answer's latency is the stored one (latency.cached).",
        rich_help_panel=_T,
    )),
    rps: Optional[float] = run_setting(rps_option(_T)),
    max_response_bytes: Optional[int] = run_setting(
        typer.Option(
            None,
            "--max-response-bytes",
            metavar="BYTES",
            help="Largest answer body read from an HTTP target (after any decompression); a larger one is "
            "recorded as error kind response_too_large.",
            rich_help_panel=_T,
        ),
        show=lambda n: f"{n}, {n / 2**20:g} MiB",
    ),
    max_retry_wait: Optional[float] = run_setting(max_retry_wait_option("a server (target or judge)", _T)),
    max_error_rate: Optional[float] = run_setting(typer.Option(
        None,
        "--max-error-rate",
        metavar="SHARE",
        help="Share of cases the target may fail (timeouts, HTTP errors, bad responses) before the run "
        "exits 3 as incomplete; failed cases score as misses.",
        rich_help_panel=_T,
    )),
    allow_format_mismatch: Optional[bool] = run_setting(typer.Option(
        None,
        "--allow-format-mismatch",
        help="Accept a run in which not one retrieved chunk matched any gold support (by default it exits 2: "
        "retrieval was not measured, usually heading paths or rel_paths in another form than the labels').",
        rich_help_panel=_T,
    )),
    no_probe: Optional[bool] = run_setting(typer.Option(
        None,
        "--no-probe",
        help="Do not ask the target one probe question before the first case (the probe stops a run "
        "against a dead or non-contract target in seconds, exit 2).",
        rich_help_panel=_T,
    )),
    trials: Optional[int] = run_setting(typer.Option(
        None,
        "--trials",
        min=1,
        max=100,
        metavar="N",
        help="Ask every case N times (Evalite's trialCount): per metric, each trial's value, mean, std and the "
        "per-case flake rate in metrics.json `trials`; compare_runs pairs cases on their trial mean.",
        rich_help_panel=_T,
    )),
    eval_set: Optional[list[Path]] = eval_set_option(panel=_S),
    limit: Optional[int] = typer.Option(None, "--limit", metavar="N", help="Run only the first N selected cases.", rich_help_panel=_S),
    ids: Optional[str] = _SELECT["ids"],
    tag: Optional[list[str]] = _SELECT["tag"],
    category: Optional[list[str]] = _SELECT["category"],
    categories: Optional[list[str]] = categories_option(_S),
    shard: Optional[str] = typer.Option(
        None,
        "--shard",
        metavar="I/N",
        help="Run only shard I of N, counted from 1 as in Playwright and Jest (1/4 .. 4/4): the selected cases "
        "whose sha256(id) mod N is I-1, into their own run folder (<run id>-shard-I-of-N); join the N shard runs "
        "with `evalkit merge`.",
        rich_help_panel=_S,
    ),
    shard_from_env: Optional[bool] = typer.Option(
        None,
        "--shard-from-env",
        help="Take the shard from the batch engine's job index: EVALKIT_SHARD_INDEX (from 1, like --shard), or "
        "the 0-based JOB_COMPLETION_INDEX (Kubernetes Indexed Job), SLURM_ARRAY_TASK_ID (minus SLURM_ARRAY_TASK_MIN), "
        "CIRCLE_NODE_INDEX or BUILDKITE_PARALLEL_JOB (each + 1), or GitLab's 1-based CI_NODE_INDEX; the count from "
        "--shard-count, EVALKIT_SHARD_COUNT or the engine's own (SLURM_ARRAY_TASK_COUNT, CIRCLE_NODE_TOTAL, "
        "BUILDKITE_PARALLEL_JOB_COUNT, CI_NODE_TOTAL). Table: docs/sharding.md.",
        rich_help_panel=_S,
    ),
    shard_count: Optional[int] = typer.Option(
        None, "--shard-count", metavar="N", help="With --shard-from-env: the number of shards.", rich_help_panel=_S
    ),
    k: Optional[list[int]] = run_setting(k_option(panel=_C)),
    require_snippets: Optional[bool] = require_snippets_option(_C),
    latency_budget_ms: Optional[float] = typer.Option(
        None,
        "--latency-budget-ms",
        metavar="MS",
        help="Latency budget per case (a case's constraints.latency_budget_ms wins): per-case score "
        "1 within budget, else max(0, 1 - (t - budget) / budget), t = the case's total latency; "
        "latency_budget_score_avg and within_budget_rate in metrics.json.",
        rich_help_panel=_C,
    ),
    latency_budget: Optional[list[str]] = typer.Option(
        None,
        "--latency-budget",
        metavar="PHASE=MS",
        help="Budget on one phase the target reports in debug.timings_ms (retrieval, generation, or its own such "
        "as rerank), scored like --latency-budget-ms on that phase's time; repeatable. Per case: phase_budgets; in "
        "metrics.json: latency.phases.<phase>.budget (score_avg, within_rate, n).",
        rich_help_panel=_C,
    ),
    response_schema: Optional[Path] = typer.Option(
        None, "--response-schema", metavar="PATH", help="JSON Schema file each response (or --response-field of it) is validated against: response_validity per case, response_valid_rate in metrics.json.", rich_help_panel=_C
    ),
    response_field: Optional[str] = typer.Option(
        None, "--response-field", metavar="PATH", help="Dotted path of the validated value in the response, e.g. answer (a string there is parsed as JSON first). (default: the whole response)", rich_help_panel=_C
    ),
    require_fields: Optional[list[str]] = typer.Option(
        None, "--require-fields", metavar="A,B", help="Short form of --response-schema: the response (or --response-field) must be an object with these keys.", rich_help_panel=_C
    ),
    suite: Optional[Path] = typer.Option(
        None,
        "--suite",
        metavar="PATH",
        help="Scenario suite (TOML: [scenarios.<name>] metric, weight): each scenario's primary score and the "
        "weighted global score in metrics.json `suite` and summary.md (seed 004).",
        rich_help_panel=_C,
    ),
    retrieval_only: Optional[bool] = typer.Option(
        None, "--retrieval-only", help="Retrieval (and target-reported abstention) metrics only: no judge calls "
        "(= --evaluators retrieval).", rich_help_panel=_J
    ),
    evaluators: Optional[list[str]] = _JUDGE["evaluators"],
    judge_provider: Optional[str] = _JUDGE["judge_provider"],
    judge_model: Optional[str] = _JUDGE["judge_model"],
    judge_base_url: Optional[str] = _JUDGE["judge_base_url"],
    judge_temperature: Optional[float] = _JUDGE["judge_temperature"],
    allow_unpinned: Optional[bool] = run_setting(_JUDGE["allow_unpinned"]),
    no_cache: Optional[bool] = run_setting(_JUDGE["no_cache"]),
    answer_quality: Optional[bool] = run_setting(_JUDGE["answer_quality"]),
    judge_trials: Optional[int] = run_setting(judge_samples_option(_J)),
    rubric: Optional[list[Path]] = _CUSTOM["rubric"],
    scorer: Optional[list[str]] = _CUSTOM["scorer"],
    baseline: Optional[str] = typer.Option(None, "--baseline", metavar="RUN_ID", help="Run id to gate against: the merge decision of compare_runs BASELINE RUN (exit 1 a regression shown, 4 not enough evidence).", rich_help_panel=_G),
    gate: Optional[str] = run_setting(typer.Option(
        None, "--gate", metavar="MODE", rich_help_panel=_G,
        help="verdict: the merge decision (the default when the baseline run has per-case results and no threshold "
        "flag is given); threshold: the --regression-threshold-* gate.",
    )),
    on_inconclusive: Optional[str] = run_setting(typer.Option(
        None, "--on-inconclusive", metavar="ACTION", rich_help_panel=_G,
        help="What not enough evidence exits with: exit-4, pass (0) or fail (1).",
    )),
    regression_threshold_recall: Optional[float] = _GATE["regression_threshold_recall"],
    regression_threshold_mrr: Optional[float] = _GATE["regression_threshold_mrr"],
    regression_threshold_scope_miss: Optional[float] = _GATE["regression_threshold_scope_miss"],
    regression_threshold_groundedness: Optional[float] = _GATE["regression_threshold_groundedness"],
    regression_threshold_correctness: Optional[float] = _GATE["regression_threshold_correctness"],
    regression_threshold_attribution: Optional[float] = _GATE["regression_threshold_attribution"],
    regression_threshold_abstention: Optional[float] = _GATE["regression_threshold_abstention"],
    regression_threshold_hallucination: Optional[float] = _GATE["regression_threshold_hallucination"],
    regression_threshold_false_abstention: Optional[float] = _GATE["regression_threshold_false_abstention"],
    regression_threshold: Optional[list[str]] = _GATE["regression_threshold"],
    gate_by: Optional[list[str]] = _GATE["gate_by"],
    gate_min_n: Optional[int] = _GATE["gate_min_n"],
    allow_regressions: Optional[bool] = _GATE["allow_regressions"],
    ignore_invariants: Optional[bool] = _GATE["ignore_invariants"],
    allow_missing_metrics: Optional[bool] = _GATE["allow_missing_metrics"],
    allow_label_change: Optional[bool] = _GATE["allow_label_change"],
    same_corpus: Optional[bool] = _GATE["same_corpus"],
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
    results_dir: Optional[Path] = run_setting(results_dir_option(_O, "--output-dir")),
    run_id: Optional[str] = typer.Option(None, "--run-id", metavar="RUN_ID", help="Name the run folder (default: <UTC time>-<config hash>).", rich_help_panel=_O),
    resume: Optional[str] = typer.Option(
        None, "--resume", metavar="RUN_ID", help="Finish an interrupted run: same config, skip finished cases. With --matrix or --matrix-file: the matrix's id.", rich_help_panel=_O
    ),
    retry_errors: Optional[bool] = typer.Option(
        None,
        "--retry-errors",
        help="With --resume: also redo the cases the target failed (timeouts, HTTP errors...); their new record replaces the old.",
        rich_help_panel=_O,
    ),
    store_full_text: Optional[bool] = typer.Option(
        None, "--store-full-text", help=f"Store full chunk text (default: first {TRUNCATE_CHARS} characters).", rich_help_panel=_O
    ),
    quiet: Optional[bool] = run_setting(quiet_option("the run folder", _O)),
    json_output: Optional[bool] = run_setting(
        json_option("run_id, run_dir, aggregate_metrics, gate...; printed last, the tables go to stderr", _O), "json_output"
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
    tolerance: Optional[float] = tolerance_option(_R, with_repro=True),
    seed: Optional[int] = typer.Option(
        None, "--seed", metavar="N", help="Seed recorded in config.json and metrics.json (part of the config hash); nothing in a run draws random numbers.", rich_help_panel=_R
    ),
    watch: bool = typer.Option(
        False, "--watch", help="Run, then watch the eval set (and the notes, for the built-in reference chatbot) and "
        "re-run the affected cases on every change, each into a run of its own, until Ctrl-C (needs "
        "pip install 'evalkit[watch]'). Not with --resume, --repro or --matrix.", rich_help_panel=_O,
    ),
    watch_max_runs: Optional[int] = typer.Option(None, "--watch-max-runs", min=1, hidden=True, rich_help_panel=_O),  # test hook
) -> None:
    """Run an eval set against a chatbot (HTTP API, Python callable, replayed log or the built-in
    reference chatbot) and write results/<run_id>/ (config.json, results.jsonl, metrics.json, summary.md).

    Exit 0 ok, 1 regression gate or --threshold failed, 2 bad input, an unusable target, or a run that
    could not measure retrieval (--allow-format-mismatch), 3 incomplete run (the target failed on more
    than --max-error-rate of the cases), 4 not enough evidence to decide the --baseline gate,
    130 interrupted (resume with --resume).
    """
    given = dict(locals())  # first: every parameter, as parsed (None = not given)
    load_dotenv_once()
    with exit_on_known_errors():
        from evalkit.errors import GateFailed
        from evalkit.run.api import run_eval
        from evalkit.run.result import RunInterrupted

        values = given_settings(given)
        values.update(_shard_values(shard, shard_from_env, shard_count))
        if watch and (repro or matrix or matrix_file is not None):
            from evalkit.errors import BadConfig, Problem

            raise BadConfig(Problem("--watch re-runs one run's cases; it cannot be combined with --repro or --matrix",
                                    field="--watch"))
        if repro or tolerance is not None:
            from evalkit.cli.repro import run_repro_cli

            matrix_flags = [f for f, v in (("--matrix", matrix), ("--matrix-file", matrix_file), ("--expect-order", expect_order)) if v]
            raise typer.Exit(run_repro_cli(values, tolerance, repro=bool(repro), refused=matrix_flags))
        if matrix or matrix_file is not None or expect_order is not None:
            from evalkit.cli.run_matrix import run_matrix_cli

            raise typer.Exit(run_matrix_cli(values, matrix, matrix_file, expect_order))

        from rich.console import Console

        from evalkit.report.run import RunProgress, print_run_summary

        if watch:
            raise typer.Exit(_watch(values, quiet=bool(quiet), max_runs=watch_max_runs))

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
            # target errors are said below with the exit code they cause; stale anchors and
            # unchecked rules were said before the run
            if w.get("kind") not in ("target_errors", "stale_anchors", "unchecked_rules", "stopped_early"):
                level = {"info": "note", "error": "error"}.get(w.get("severity"), "warning")
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
            code = 1
            if result.gate_failed and result.gate:
                from evalkit.gate.decision import gate_exit_code

                lines = lines or list(result.gate.get("inconclusive") or [])
                code = gate_exit_code(result.gate) if not result.thresholds_failed else 1
            title = (
                "regression gate and threshold check failed" if result.gate_failed and result.thresholds_failed
                else "threshold check failed" if result.thresholds_failed
                else "not enough evidence to decide the merge" if code == 4 else "regression gate failed"
            )
            raise GateFailed(lines, title=title, exit_code=code)
        if result.unmeasurable:
            print(
                f"evalkit: retrieval was not measured (see the error above); the run is kept in {result.run_dir}. "
                "Fix the target's format (evalkit check-target), or pass --allow-format-mismatch to accept it",
                file=sys.stderr,
            )
            raise typer.Exit(2)
        if result.stopped is not None:  # the target failed every request: one line, what to check
            print(f"evalkit: incomplete run: {result.stopped['message']}", file=sys.stderr)
            raise typer.Exit(EXIT_INCOMPLETE)
        if result.incomplete:
            allowed = result.max_error_rate
            print(
                f"evalkit: incomplete run: the target failed {result.n_errors} of {result.n_cases} cases "
                f"({result.error_rate:.1%}; --max-error-rate {allowed:g}); they score as misses. "
                f"Fix the target and redo them with: --resume {shlex.quote(result.run_id)} --retry-errors",
                file=sys.stderr,
            )
            raise typer.Exit(EXIT_INCOMPLETE)


def _watch(values: dict[str, Any], *, quiet: bool, max_runs: int | None) -> int:
    """--watch: run, then re-run the affected cases on each change (evalkit.run.watch)."""
    from rich.console import Console

    from evalkit.errors import BadConfig, Problem
    from evalkit.report.run import RunProgress, print_run_summary
    from evalkit.run.api import run_eval
    from evalkit.run.watch import max_runs_from_env, watch_runs

    if values.get("resume"):
        raise BadConfig(Problem("--watch starts runs of its own; it cannot --resume one", field="--watch"))
    console = Console(stderr=True)

    def one(v: dict[str, Any]) -> Any:
        result = run_eval(progress=RunProgress(Console(stderr=True), disable=quiet), **v)
        if quiet:
            print(result.run_dir)
        else:
            print_run_summary(result.metrics, result.run_dir, judge=result.judge, gate=result.gate, console=console)
        return result

    watch_runs(values, one, say=lambda line: print(f"evalkit: watch: {line}", file=sys.stderr),
               max_runs=max_runs if max_runs is not None else max_runs_from_env())
    return 0


def given_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """The RunSettings values among main's parameters that the user gave.

    Derived, not listed: a parameter names its RunSettings field (FIELD_OF for the renamed
    ones), so a new flag is one parameter plus one field. None and an empty repeatable flag
    mean "not given" and are left out: on --resume only given values override the stored run.
    Paths become strings, --param is parsed, and an empty --api-url (EVAL_API_URL="") is unset.

    Args:
        params: main's parameters by name, as parsed (its locals, or a click context's params).

    Returns:
        {RunSettings field: value} for build_settings / evalkit.run_eval.

    Raises:
        BadConfig: a --param that is not key=value.
    """
    from evalkit.config import RunSettings
    from evalkit.targets import parse_param_options

    values: dict[str, Any] = {}
    for name, value in params.items():
        field = FIELD_OF.get(name, name)
        if name in CLI_ONLY or field not in RunSettings.model_fields or value is None:
            continue
        if isinstance(value, list | tuple):
            if not value:
                continue
            value = [str(v) if isinstance(v, Path) else v for v in value]
        elif isinstance(value, Path):
            value = str(value)
        values[field] = value
    if "params" in values:
        values["params"] = parse_param_options(values["params"])
    if values.get("api_url") == "":
        del values["api_url"]
    return values


def _shard_values(shard: str | None, from_env: bool | None, count: int | None) -> dict[str, str]:
    """{"shard": "i/n"} (1-based i) from --shard or --shard-from-env (BadConfig, exit 2, when unusable)."""
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
