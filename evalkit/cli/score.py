"""`evalkit score --run-id ID`: (re)score a stored run, the one door to the three re-scoring jobs.

--retrieval   the retrieval metrics, from the stored chunks and references (seed 000 §3.A)
--abstention  the abstention metrics; --classifier re-classifies answers first (§3.C)
--answers     judge the answers: groundedness, correctness, ... (§3.B)

No part flag scores retrieval and abstention (neither calls a model unless --classifier llm);
several run in that order, each on the records the one before left. The target is never
called. The seed's scripts are this command with one part: `score_retrieval.py` is `--retrieval`,
`score_abstention.py` is `--abstention`, `judge_answers.py` is `--answers` (each keeps its
own flags and help; `evalkit score-retrieval`, `score-abstention` and `judge` are hidden
aliases of the same). All of them end in `score_run` below.

`--trec-run RUN --qrels QRELS` scores a TREC run file instead, with no stored run (as trec_eval
would: `evalkit.interop.trec_run`; the door shared with score_retrieval.py is
`common.score_trec_file`).

Exit 0 ok; 1 the judge failed every judgment (nothing rewritten); 2 bad input (unknown run, a
K larger than the run asked for, an eval set that changed since the run without --eval-set,
snippets or judge context on cut text without --allow-truncated-text / -context, a flag of a
part not asked for).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path
from typing import Any, Optional

import typer

from evalkit.cli.common import (
    EXIT_GATE,
    PANEL_OUTPUT,
    PanelledCommand,
    concurrency_option,
    custom_metric_options,
    exit_on_known_errors,
    json_option,
    judge_options,
    k_option,
    load_dotenv_once,
    max_retry_wait_option,
    plain_metavars,
    quiet_option,
    rejudge_options,
    rescore_options,
    results_dir_option,
    rps_option,
    score_trec_file,
    selection_options,
    settings_default,
    trec_run_options,
)
from evalkit.store.runlog import Met

PARTS = ("retrieval", "abstention", "answers")
DEFAULT_PARTS = ("retrieval", "abstention")

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="(Re)score a stored run from its results.jsonl, without calling the chatbot: --retrieval (metrics at new K, "
    "snippet rules, fixed labels), --abstention (accuracy, hallucination and false-abstention rates; --classifier "
    "re-classifies answers), --answers (judge groundedness and correctness 0-5, cache, cost, spot-check). No part "
    "flag: --retrieval and --abstention. Updates results.jsonl and metrics.json. Exit 0 ok, 1 the judge failed every "
    "judgment (nothing rewritten), 2 bad input.",
)

_RUN = "Run"
_P = "Parts"
_RET = "Retrieval (--retrieval)"
_ABS = "Abstention (--abstention)"
_J = "Judge (--answers; --classifier llm)"
_C = "Judge requests and cache"
_ANS = "Answers (--answers)"
_R = "Reliability (--answers)"
_B = "Batch (--answers; half price, answers within 24 h)"
_O = PANEL_OUTPUT
_CUS = "Your own metrics (--rubric, --scorer, --custom)"
_JUDGE = judge_options(_J)
_CACHE = judge_options(_C)
_REJUDGE = rejudge_options(judge=_J, reliability=_R, batch=_B, answers=_ANS)
_RESCORE = rescore_options()
_TREC = trec_run_options("A TREC run file (--trec-run; no stored run)")
_CUSTOM = custom_metric_options(_CUS)

# The flags only one part reads: given without that part, they are refused (exit 2).
_ONLY = {
    "retrieval": ("k", "primary_k", "require_snippets", "allow_truncated_text", "workers"),
    "abstention": ("classifier",),
    "answers": (
        "ids", "vault", "allow_truncated_context", "judge_temperature", "claim_level", "answer_quality", "evaluators",
        "judge_trials", "rps", "timeout", "max_retry_wait", "refresh_cache", "price_file", "spot_check",
        "spot_check_model", "spot_check_provider", "spot_check_prompt_version", "seed", "bias_probes", "batch",
        "batch_poll_interval",
        "batch_resubmit", "batch_id",
    ),
}
_EITHER = {"eval_set": ("retrieval", "abstention")}
# Of those, the ones the rubric judge reads too (_score_custom): not refused beside --rubric / --custom.
_RUBRIC_READS = frozenset({"judge_temperature", "judge_trials", "timeout", "refresh_cache"})


def _option(info: Any, panel: str) -> Any:
    """One of this module's own shared options (rescore_options() makes new ones), listed under `panel`."""
    info.rich_help_panel = panel
    return info


@app.command(cls=PanelledCommand)
def main(
    ctx: typer.Context,
    run_id: Optional[str] = typer.Option(
        None, "--run-id", metavar="RUN_ID", help="Run id (a folder name under --results-dir); required unless --trec-run.",
        rich_help_panel=_RUN,
    ),
    results_dir: Path = results_dir_option(_RUN),
    retrieval: bool = typer.Option(False, "--retrieval", help="Re-score retrieval (score_retrieval.py).", rich_help_panel=_P),
    abstention: bool = typer.Option(False, "--abstention", help="Re-score abstention (score_abstention.py).", rich_help_panel=_P),
    answers: bool = typer.Option(
        False, "--answers", help="Judge the answers (judge_answers.py); calls the judge, which --judge-* pick.", rich_help_panel=_P,
    ),
    eval_set: Optional[list[Path]] = _option(_RESCORE["eval_set"], _RUN),
    k: Optional[list[int]] = k_option("At most the largest K the run asked for. (default: the run's)", _RET, rescore=True),
    primary_k: Optional[int] = typer.Option(
        None, "--primary-k", metavar="K", help="Make K the primary K: the one the headline metrics, slices, gate and "
        "compare_runs use. (default: the run's primary K, kept)", rich_help_panel=_RET,
    ),
    require_snippets: Optional[bool] = _option(_RESCORE["require_snippets"], _RET),
    allow_truncated_text: bool = _option(_RESCORE["allow_truncated_text"], _RET),
    workers: Optional[int] = typer.Option(
        None, "--workers", min=1, help="Processes that score parts of results.jsonl side by side (Linux; 1 = this one). "
        "(default: one per CPU, at most 8, for results.jsonl over 32 MB)", rich_help_panel=_RET,
    ),
    classifier: Optional[str] = typer.Option(
        None, "--classifier", metavar="llm|heuristic", help="Re-classify answers the target gave no `abstained` for: "
        "heuristic (refusal phrases, offline) or llm (--judge-model). (default: use the stored decisions)", rich_help_panel=_ABS,
    ),
    ids: Optional[str] = selection_options(_ANS, ids_help="Comma-separated case ids to judge (others are kept).")["ids"],
    vault: Optional[Path] = typer.Option(
        None, "--vault", help="Re-read full chunk text from this notes folder when results hold 200-char texts. "
        "(default: the vault config.json records, for in-process reference runs)", rich_help_panel=_ANS,
    ),
    allow_truncated_context: bool = _REJUDGE["allow_truncated_context"],
    judge_provider: Optional[str] = _JUDGE["judge_provider"],
    judge_model: Optional[str] = _JUDGE["judge_model"],
    judge_base_url: Optional[str] = _JUDGE["judge_base_url"],
    judge_temperature: Optional[float] = _JUDGE["judge_temperature"],
    allow_unpinned: bool = _JUDGE["allow_unpinned"],
    claim_level: bool = _REJUDGE["claim_level"],
    answer_quality: bool = _JUDGE["answer_quality"],
    evaluators: Optional[list[str]] = _JUDGE["evaluators"],
    judge_trials: int = _REJUDGE["judge_trials"],
    concurrency: int = concurrency_option("Judge and classifier requests", _C),
    rps: Optional[float] = rps_option(_C),
    timeout: float = _CACHE["timeout"],
    max_retry_wait: float = max_retry_wait_option("the judge's provider", _C),
    no_cache: bool = _CACHE["no_cache"],
    refresh_cache: bool = _CACHE["refresh_cache"],
    cache_path: Path = _CACHE["cache_path"],
    price_file: Optional[Path] = _CACHE["price_file"],
    spot_check: int = _REJUDGE["spot_check"],
    spot_check_model: Optional[str] = _REJUDGE["spot_check_model"],
    spot_check_provider: Optional[str] = _REJUDGE["spot_check_provider"],
    spot_check_prompt_version: Optional[str] = _REJUDGE["spot_check_prompt_version"],
    seed: int = _REJUDGE["seed"],
    bias_probes: int = _REJUDGE["bias_probes"],
    batch: bool = _REJUDGE["batch"],
    batch_poll_interval: float = _REJUDGE["batch_poll_interval"],
    batch_resubmit: bool = _REJUDGE["batch_resubmit"],
    batch_id: Optional[str] = _REJUDGE["batch_id"],
    rubric: Optional[list[Path]] = _CUSTOM["rubric"],
    scorer: Optional[list[str]] = _CUSTOM["scorer"],
    custom: bool = typer.Option(
        False, "--custom", help="Score every rubric and scorer evalkit.toml declares ([[rubrics]], [[scorers]]).",
        rich_help_panel=_CUS,
    ),
    trec_run: Optional[Path] = _TREC["trec_run"],
    qrels: Optional[list[Path]] = _TREC["qrels"],
    relevance_level: Optional[float] = _TREC["relevance_level"],
    gain: Optional[str] = _TREC["gain"],
    no_relevant: Optional[str] = _TREC["no_relevant"],
    per_query: bool = _TREC["per_query"],
    quiet: bool = quiet_option(panel=_O),
    json_output: bool = json_option(
        "with one part, that part's object (as its script prints it); with several, run_id, parts, one object per part "
        "and the final aggregate_metrics; printed last, the tables go to stderr", _O,
    ),
) -> None:
    """Score RUN_ID again: the parts asked for, in order, and update its results and metrics."""
    settings = {name: value for name, value in locals().items() if name != "ctx"}  # as typer passed them
    trec = {name: settings.pop(name) for name in _TREC}
    if trec["trec_run"] is not None:
        with exit_on_known_errors():
            _refuse_with_trec_run(ctx)
    if score_trec_file(trec, run_id=run_id, k=k, quiet=quiet, json_output=json_output):
        return
    own = {name: settings.pop(name) for name in ("rubric", "scorer", "custom")}
    asked = tuple(p for p in PARTS if settings.pop(p))
    # Only --rubric / --scorer / --custom: those alone, not the default parts.
    parts = asked or (() if any(own.values()) else DEFAULT_PARTS)
    if parts:
        with exit_on_known_errors():
            _refuse_other_parts(ctx, parts, _RUBRIC_READS if own["rubric"] or own["custom"] else frozenset())
        score_run(parts, **settings, command="evalkit score")
    if any(own.values()):
        with exit_on_known_errors():
            _score_custom(settings, **own)


def _score_custom(settings: dict[str, Any], *, rubric: Optional[list[Path]], scorer: Optional[list[str]],
                  custom: bool) -> None:
    """Score the run with the rubrics and Python scorers asked for (judges.rubric), print what
    each metric came to (one JSON object with --json)."""
    import json

    from evalkit.judges.rubric import load_custom, rubric_llm
    from evalkit.metrics.custom import CUSTOM_ERRORS, CUSTOM_METRICS
    from evalkit.rescore.custom import score_run_custom
    from evalkit.store.runs import RunDir

    if not settings.get("run_id"):
        from evalkit.errors import BadConfig, Problem

        raise BadConfig(Problem("--rubric / --scorer / --custom score a stored run: give --run-id", field="--run-id"))
    rubrics, scorers = load_custom(rubric or [], scorer or [], project=custom)
    if not rubrics and not scorers:
        from evalkit.errors import BadConfig, Problem

        raise BadConfig(Problem("--custom: evalkit.toml declares no [[rubrics]] or [[scorers]]", field="--custom"))
    llm = None
    if rubrics:  # the judge the --judge-* flags or EVALKIT_JUDGE_* name; the offline heuristic without one
        from evalkit.judges import JudgeSettings

        load_dotenv_once()
        llm = rubric_llm(JudgeSettings(
            provider=settings.get("judge_provider"), model=settings.get("judge_model"),
            base_url=settings.get("judge_base_url"), temperature=settings.get("judge_temperature") or 0.0,
            allow_unpinned=settings.get("allow_unpinned", False), use_cache=not settings.get("no_cache"),
            refresh_cache=settings.get("refresh_cache", False), cache_path=settings.get("cache_path"),
            concurrency=settings.get("concurrency", 4), timeout=settings.get("timeout", 60.0),
        ))
    run = RunDir.open(settings["results_dir"], settings["run_id"])
    with run.writer("evalkit score --rubric"):
        metrics = score_run_custom(run, rubrics, scorers, llm=llm, concurrency=settings.get("concurrency", 4),
                                   samples=settings.get("judge_trials") or 1)
    block = (metrics.get(Met.AGGREGATE) or {}).get(CUSTOM_METRICS) or {}
    failed: dict[str, int] = {}
    for record in run.iter_results():
        for name in record.get(CUSTOM_ERRORS) or {}:
            failed[name] = failed.get(name, 0) + 1
    for name, n in sorted(failed.items()):  # never silent: a judge that gave no score is not a 0
        print(f"evalkit: warning: {name}: the judge gave no score on {n} case(s) (their record's custom_errors "
              "says why); they are left out of its mean", file=sys.stderr)
    if settings.get("json_output"):
        print(json.dumps({"run_id": run.run_id, CUSTOM_METRICS: block}, sort_keys=True))
    elif not settings.get("quiet"):
        for name in [*(r.metric.name for r in rubrics), *(s.metric.name for s in scorers)]:
            entry = block.get(name) or {}
            mean = entry.get("mean")
            shown = "—" if mean is None else f"{mean:.3f}"
            print(f"{name}: {shown} on [0, {entry.get('scale', 1):g}] over {entry.get('n', 0)} case(s) "
                  f"({entry.get('direction', 'higher')} is better; version {entry.get('version', '')})", file=sys.stderr)


# What --trec-run reads of the flags a stored run's scoring takes: --k (its cut-offs), the output flags.
_WITH_TREC_RUN = frozenset({"k", "quiet", "json_output", "results_dir"})


def _refuse_with_trec_run(ctx: typer.Context) -> None:
    """BadConfig naming each given flag a TREC run file's scoring does not read (the parts, the
    stored run's settings, the judge's)."""
    from evalkit.errors import BadConfig, Problem

    problems = [
        Problem("scores a stored run; --trec-run scores a run file", field=p.opts[0])
        for p in ctx.command.params
        if p.name not in _WITH_TREC_RUN and p.name not in _TREC and p.name is not None
        and (src := ctx.get_parameter_source(p.name)) is not None and src.name in ("COMMANDLINE", "ENVIRONMENT")
        and p.name != "run_id"  # said by score_trec_file
    ]
    if problems:
        raise BadConfig(problems)


def _refuse_other_parts(ctx: typer.Context, parts: Sequence[str], also_read: frozenset[str] = frozenset()) -> None:
    """BadConfig naming each given flag that only a part not asked for reads (and `also_read`
    does not name: the rubric judge's)."""
    from evalkit.errors import BadConfig, Problem

    def given(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")

    flags = {p.name: p.opts[0] for p in ctx.command.params}
    problems = [
        Problem(f"goes with --{part}", field=flags[name])
        for part, names in _ONLY.items() if part not in parts
        for name in names if given(name) and name not in also_read
    ]
    problems += [
        Problem(f"goes with {' or '.join('--' + p for p in owners)}", field=flags[name])
        for name, owners in _EITHER.items() if given(name) and not set(owners) & set(parts)
    ]
    if problems:
        raise BadConfig(problems)


def score_run(
    parts: Sequence[str],
    *,
    run_id: str,
    results_dir: Path = Path("results"),
    eval_set: Optional[list[Path]] = None,
    k: Optional[list[int]] = None,
    primary_k: Optional[int] = None,
    require_snippets: Optional[bool] = None,
    allow_truncated_text: bool = False,
    workers: Optional[int] = None,
    classifier: Optional[str] = None,
    ids: Optional[str] = None,
    vault: Optional[Path] = None,
    allow_truncated_context: bool = False,
    judge_provider: Optional[str] = None,
    judge_model: Optional[str] = None,
    judge_base_url: Optional[str] = None,
    judge_temperature: Optional[float] = None,
    allow_unpinned: bool = False,
    claim_level: bool = False,
    answer_quality: bool = False,
    evaluators: Optional[list[str]] = None,
    judge_trials: int = 1,
    concurrency: int = 4,
    rps: Optional[float] = None,
    timeout: float = 60.0,
    max_retry_wait: float = 60.0,
    no_cache: bool = False,
    refresh_cache: bool = False,
    cache_path: Path = Path("cache/judge_cache.sqlite"),
    price_file: Optional[Path] = None,
    spot_check: int = 0,
    spot_check_model: Optional[str] = None,
    spot_check_provider: Optional[str] = None,
    spot_check_prompt_version: Optional[str] = None,
    seed: int = 0,
    bias_probes: int = 0,
    batch: bool = False,
    batch_poll_interval: float = 30.0,
    batch_resubmit: bool = False,
    batch_id: Optional[str] = None,
    quiet: bool = False,
    json_output: bool = False,
    command: str = "evalkit score",
) -> None:
    """Score the `parts` of a stored run (retrieval, abstention, answers; in that order), print
    each part's tables, then one JSON object with --json; raise typer.Exit(1) when the judge
    failed every judgment. The one implementation behind `evalkit score` and its aliases
    (score_retrieval.py, score_abstention.py, judge_answers.py); `command` is the door, for
    the resume hint."""
    if set(parts) - {"retrieval"}:
        load_dotenv_once()  # the judge's keys and EVALKIT_JUDGE_*
    objects: dict[str, dict[str, Any]] = {}
    # Several parts: the run's writer lock across them all (each part's function takes it
    # again), so no other command changes the run between two of them.
    with _writer_across(parts, run_id, results_dir, command):
        for part in PARTS:
            if part not in parts:
                continue
            if part == "retrieval":
                with exit_on_known_errors():
                    from evalkit.rescore.scoring import score_retrieval

                    result = score_retrieval(
                        run_id, ks=k or None, primary_k=primary_k, require_snippets=require_snippets, eval_set=eval_set or None,
                        results_dir=results_dir, allow_truncated_text=allow_truncated_text, workers=workers,
                    )
                objects[part] = _show_scoring(result, "print_retrieval_scoring", quiet=quiet, json_output=json_output)
            elif part == "abstention":
                with exit_on_known_errors():
                    from evalkit.rescore.scoring import score_abstention

                    settings = None
                    if classifier == "llm":
                        from evalkit.judges import JudgeSettings

                        settings = JudgeSettings(
                            provider=judge_provider, model=judge_model, base_url=judge_base_url, allow_unpinned=allow_unpinned,
                            use_cache=not no_cache, cache_path=cache_path, concurrency=concurrency,
                        )
                    result = score_abstention(
                        run_id, eval_set=eval_set or None, results_dir=results_dir, classifier=classifier, judge_settings=settings,
                    )
                objects[part] = _show_scoring(result, "print_abstention_scoring", quiet=quiet, json_output=json_output)
            else:
                result = _judge(
                    run_id, results_dir, ids=ids, vault=vault, allow_truncated_context=allow_truncated_context,
                    judge=dict(
                        provider=judge_provider, model=judge_model, base_url=judge_base_url, temperature=judge_temperature,
                        allow_unpinned=allow_unpinned, use_cache=not no_cache, refresh_cache=refresh_cache,
                        cache_path=cache_path, price_file=price_file, claim_level=claim_level, answer_quality=answer_quality,
                        trials=judge_trials, concurrency=concurrency, rps=rps, timeout=timeout,
                    ),
                    evaluators=evaluators, max_retry_wait=max_retry_wait,
                    spot=(spot_check, spot_check_model, spot_check_provider, spot_check_prompt_version, seed),
                    bias_probes=bias_probes,
                    batch=(batch, batch_poll_interval, batch_resubmit, batch_id),
                    quiet=quiet, json_output=json_output, command=command, only=len(parts) == 1,
                )
                if result.all_failed:
                    _print_json(objects, parts, run_id, json_output, last=result.to_json())
                    # The instrument failed, not the input: exit 1, like a failed gate.
                    print(f"evalkit: {result.failure}; results.jsonl, metrics.json and config.json were left as they were",
                          file=sys.stderr)
                    raise typer.Exit(EXIT_GATE)
                objects[part] = result.to_json()
    _print_json(objects, parts, run_id, json_output)


def _writer_across(parts: Sequence[str], run_id: str, results_dir: Path, command: str) -> AbstractContextManager[object]:
    """The run's writer lock (RunDir.writer) when more than one part is scored; else nothing
    (the one part's function takes it)."""
    if len(parts) < 2:
        return nullcontext()
    with exit_on_known_errors():
        from evalkit.store.runs import RunDir

        run = RunDir.open(results_dir, run_id)
        hold = ExitStack()
        hold.enter_context(run.writer(command))
    return hold


def _print_json(
    objects: dict[str, dict[str, Any]], parts: Sequence[str], run_id: str, json_output: bool, *,
    last: dict[str, Any] | None = None,
) -> None:
    """With --json: one part's own object, or {run_id, parts, <part>: object..., aggregate_metrics}."""
    if not json_output:
        return
    import orjson

    if last is not None:
        objects = {**objects, "answers": last}
    if len(parts) == 1:
        payload = next(iter(objects.values()))
    else:
        final = list(objects.values())[-1] if objects else {}
        payload = {"run_id": run_id, "parts": list(objects), **objects, Met.AGGREGATE: final.get(Met.AGGREGATE, {})}
    sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")


def _show_scoring(result: Any, printer: str, *, quiet: bool, json_output: bool) -> dict[str, Any]:
    """A retrieval or abstention re-scoring's tables (report.scoring.<printer>), or only its
    warnings when quiet; returns its JSON object."""
    if not quiet:
        from rich.console import Console

        from evalkit.report import scoring

        getattr(scoring, printer)(result, Console(stderr=json_output))
    elif result.warnings:
        for w in result.warnings:
            print(f"evalkit: warning: {w}", file=sys.stderr)
    return result.to_json()


def _judge(
    run_id: str, results_dir: Path, *, ids: str | None, vault: Path | None, allow_truncated_context: bool,
    judge: dict[str, Any], evaluators: list[str] | None, max_retry_wait: float, spot: tuple[Any, ...],
    batch: tuple[Any, ...], quiet: bool, json_output: bool, command: str, only: bool, bias_probes: int = 0,
) -> Any:
    """--answers: judge the run's answers and print the summary; returns the JudgeRunResult."""
    use_batch, poll_interval, resubmit, given_batch_id = batch
    rerun = f"{command} --run-id {shlex.quote(run_id)}" + ("" if only else " --answers")
    if results_dir != Path("results"):
        rerun += f" --results-dir {shlex.quote(str(results_dir))}"
    hint = f"{rerun} (cached judgments are reused)"
    if use_batch:
        hint = f"{rerun} --batch (and the same judge flags: the recorded batch is picked up, not submitted again)"
    with exit_on_known_errors(resume_hint=hint):
        from evalkit.derive import open_run
        from evalkit.judges import JudgeSettings
        from evalkit.judges.settings import parse_judge_evaluators
        from evalkit.net.retry import RetryPolicy
        from evalkit.rescore.answers import SpotCheck, judge_run

        run = open_run(results_dir, run_id)
        temperature = judge.pop("temperature")
        settings = JudgeSettings(
            **judge,
            temperature=settings_default("judge_temperature") if temperature is None else temperature,
            evaluators=parse_judge_evaluators(evaluators),
            retry_policy=RetryPolicy(max_retry_after=max_retry_wait),
        )
        n, model, provider, prompt_set, seed = spot
        spot_check = SpotCheck(n=n, model=model, provider=provider, prompt_set=prompt_set, seed=seed) if n else None
        id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None

        from rich.console import Console

        from evalkit.report.judges import JudgeProgress, print_judge_summary

        batch_options = None
        if use_batch or resubmit or given_batch_id:
            from evalkit.judges.batch import BatchOptions

            batch_options = BatchOptions(
                poll_interval=poll_interval, resubmit=resubmit, batch_id=given_batch_id,
                on_progress=None if quiet else BatchLine(),
            )
        console = Console(stderr=json_output)
        # What is imported by now lives for the whole process: keep the collector from
        # scanning it again and again while the judge calls are in flight (as run_eval does).
        import gc

        gc.freeze()
        with JudgeProgress(Console(stderr=True), disable=quiet or json_output) as progress:
            result = judge_run(
                run, settings, ids=id_list, vault=vault, allow_truncated_context=allow_truncated_context,
                spot_check=spot_check, on_progress=progress.update, batch=batch_options,
                bias_probes=bias_probes, bias_seed=seed,
            )

    for w in result.warnings:
        print(f"evalkit: warning: {w}", file=sys.stderr)
    if not quiet and not result.all_failed:
        print_judge_summary(result, console=console)
    return result


class BatchLine:
    """The batch progress line on stderr: rewritten in place on a terminal, one line per
    look otherwise (a log file keeps every poll)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.open = False  # a line rewritten in place awaits its newline

    def __call__(self, p: Any) -> None:
        from evalkit.cli.common import printable

        head = f"evalkit: batch {printable(p.batch_id)} ({p.provider}, {p.requests} requests)"
        st = p.status
        if p.event == "submitted":
            line = f"{head}: submitted; its id is recorded, so a rerun after a kill picks it up"
        elif p.event == "resumed":
            line = f"{head}: resuming the recorded batch"
        elif p.event == "polled" and st is not None:
            total = st.total if st.total is not None else p.requests
            line = f"{head}: {printable(st.status)}, {st.done}/{total} done"
            line += f" ({st.failed} failed)" if st.failed else ""
            line += f", {_duration(p.elapsed_s)} elapsed"
            line += f", next look in {_duration(p.next_poll_s)}" if p.next_poll_s else ""
        else:
            line = f"{head}: replies collected into the judge cache"
        if self.tty and p.event == "polled" and not st.ended:
            print("\r\x1b[2K" + line, end="", file=sys.stderr, flush=True)
            self.open = True
            return
        print(("\r\x1b[2K" if self.open else "") + line, file=sys.stderr, flush=True)
        self.open = False


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


plain_metavars(app)
