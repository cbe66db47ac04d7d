"""judge_answers.py: (re)judge the answers of a stored run (seed 000 §3.B).

Judges results/<run_id>/results.jsonl (typically a --retrieval-only run), rewrites it
atomically, recomputes metrics.json and records the run's judges in config.json. The target
is never called again. Exit 0 ok; 1 the judge failed every judgment (nothing rewritten);
2 bad input (unknown run, missing key, unpinned model, a provider that refuses the key, chunk
text cut to 200 characters that cannot be re-read without --allow-truncated-context).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from evalkit.cli.common import (
    EXIT_GATE,
    PANEL_JUDGE,
    PANEL_OUTPUT,
    PanelledCommand,
    concurrency_option,
    exit_on_known_errors,
    json_option,
    judge_options,
    load_dotenv_once,
    max_retry_wait_option,
    plain_metavars,
    quiet_option,
    results_dir_option,
    rps_option,
    run_id_option,
    selection_options,
    settings_default,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="(Re)judge the answers of a run: groundedness and correctness (0-5), abstention fallback, "
    "cache, cost, reliability spot-check. Exit 0 ok, 1 the judge failed every judgment (nothing rewritten), "
    "2 bad input (including chunk text cut to 200 chars that cannot be re-read).",
)

_RUN = "Run"
_J = PANEL_JUDGE
_C = "Judge requests and cache"
_R = "Reliability"
_B = "Batch (half price, answers within 24 h)"
_O = PANEL_OUTPUT
_JUDGE = judge_options(_J)
_CACHE = judge_options(_C)  # the same flags, listed under another panel


@app.command(cls=PanelledCommand)
def main(
    run_id: str = run_id_option(_RUN),
    results_dir: Path = results_dir_option(_RUN),
    ids: Optional[str] = selection_options(_RUN, ids_help="Comma-separated case ids to judge (others are kept).")["ids"],
    vault: Optional[Path] = typer.Option(
        None, "--vault", help="Re-read full chunk text from this notes folder when results hold 200-char texts. "
        "(default: the vault config.json records, for in-process reference runs)", rich_help_panel=_RUN
    ),
    allow_truncated_context: bool = typer.Option(
        False, "--allow-truncated-context", help="Judge chunk text cut to 200 chars when the full text cannot be re-read "
        "(otherwise exit 2).", rich_help_panel=_RUN
    ),
    judge_provider: Optional[str] = _JUDGE["judge_provider"],
    judge_model: Optional[str] = _JUDGE["judge_model"],
    judge_base_url: Optional[str] = _JUDGE["judge_base_url"],
    judge_temperature: Optional[float] = _JUDGE["judge_temperature"],
    allow_unpinned: bool = _JUDGE["allow_unpinned"],
    claim_level: bool = typer.Option(False, "--claim-level", help="Judge groundedness claim by claim (score = 5 × supported / claims).", rich_help_panel=_J),
    answer_quality: bool = _JUDGE["answer_quality"],
    evaluators: Optional[list[str]] = _JUDGE["evaluators"],
    judge_trials: int = typer.Option(1, "--judge-trials", min=1, help="Judge each answer N times; report per-case spread and the mean's SE.", rich_help_panel=_J),
    concurrency: int = concurrency_option("Requests", _C),
    rps: Optional[float] = rps_option(_C),
    timeout: float = _CACHE["timeout"],
    max_retry_wait: float = max_retry_wait_option("the judge's provider", _C),
    no_cache: bool = _CACHE["no_cache"],
    refresh_cache: bool = _CACHE["refresh_cache"],
    cache_path: Path = _CACHE["cache_path"],
    price_file: Optional[Path] = _CACHE["price_file"],
    spot_check: int = typer.Option(0, "--spot-check", min=0, help="Re-judge N random judged cases with a second judge.", rich_help_panel=_R),
    spot_check_model: Optional[str] = typer.Option(None, "--spot-check-model", help="Second judge model (same provider unless --spot-check-provider).", rich_help_panel=_R),
    spot_check_provider: Optional[str] = typer.Option(None, "--spot-check-provider", help="Provider of the second judge.", rich_help_panel=_R),
    spot_check_prompt_version: Optional[str] = typer.Option(None, "--spot-check-prompt-version", help="Second prompt set for the same judge, e.g. v1-alt.", rich_help_panel=_R),
    seed: int = typer.Option(0, "--seed", help="Seed of the spot-check sample (np.random.default_rng).", rich_help_panel=_R),
    batch: bool = typer.Option(
        False, "--batch", help="Submit the judge prompts the cache lacks through the provider's batch API (OpenAI Batch API, "
        "Anthropic Message Batches: half the price), wait for it, then judge from the cache. Killed, rerun the same "
        "command: it picks the recorded batch up instead of submitting it again.", rich_help_panel=_B,
    ),
    batch_poll_interval: float = typer.Option(
        30.0, "--batch-poll-interval", min=0.0, metavar="SECONDS", help="Seconds between two looks at a running batch.",
        rich_help_panel=_B,
    ),
    batch_resubmit: bool = typer.Option(
        False, "--batch-resubmit", help="A batch submission was killed before its id was recorded: submit a new one "
        "(if the provider did receive the first, you pay for both).", rich_help_panel=_B,
    ),
    batch_id: Optional[str] = typer.Option(
        None, "--batch-id", metavar="ID", help="A batch submission was killed before its id was recorded: collect this "
        "batch (its id from the provider's console).", rich_help_panel=_B,
    ),
    quiet: bool = quiet_option(panel=_O),
    json_output: bool = json_option(
        "run_id, judge, judge_stats, judge_reliability, aggregate_metrics; printed last, the tables go to stderr", _O
    ),
) -> None:
    """Judge the answers of RUN_ID and rewrite its results and metrics."""
    load_dotenv_once()
    rerun = f"judge_answers.py --run-id {shlex.quote(run_id)}"
    if results_dir != Path("results"):
        rerun += f" --results-dir {shlex.quote(str(results_dir))}"
    hint = f"{rerun} (cached judgments are reused)"
    if batch:
        hint = f"{rerun} --batch (and the same judge flags: the recorded batch is picked up, not submitted again)"
    with exit_on_known_errors(resume_hint=hint):
        from evalkit.derive import open_run
        from evalkit.judges import JudgeSettings
        from evalkit.judges.runner import parse_judge_evaluators
        from evalkit.rescore.answers import SpotCheck, judge_run

        run = open_run(results_dir, run_id)
        from evalkit.net.retry import RetryPolicy

        settings = JudgeSettings(
            provider=judge_provider,
            model=judge_model,
            base_url=judge_base_url,
            temperature=settings_default("judge_temperature") if judge_temperature is None else judge_temperature,
            allow_unpinned=allow_unpinned,
            use_cache=not no_cache,
            refresh_cache=refresh_cache,
            cache_path=cache_path,
            price_file=price_file,
            claim_level=claim_level,
            answer_quality=answer_quality,
            evaluators=parse_judge_evaluators(evaluators),
            trials=judge_trials,
            concurrency=concurrency,
            rps=rps,
            timeout=timeout,
            retry_policy=RetryPolicy(max_retry_after=max_retry_wait),
        )
        spot = None
        if spot_check:
            spot = SpotCheck(
                n=spot_check, model=spot_check_model, provider=spot_check_provider, prompt_set=spot_check_prompt_version, seed=seed
            )
        id_list = [i.strip() for i in ids.split(",") if i.strip()] if ids else None

        from rich.console import Console

        from evalkit.report.judges import JudgeProgress, print_judge_summary

        batch_options = None
        if batch or batch_resubmit or batch_id:
            from evalkit.judges.batch import BatchOptions

            batch_options = BatchOptions(
                poll_interval=batch_poll_interval, resubmit=batch_resubmit, batch_id=batch_id,
                on_progress=None if quiet else _BatchLine(),
            )
        console = Console(stderr=json_output)
        # What is imported by now lives for the whole process: keep the collector from
        # scanning it again and again while the judge calls are in flight (as run_eval does).
        import gc

        gc.freeze()
        with JudgeProgress(Console(stderr=True), disable=quiet or json_output) as progress:
            result = judge_run(
                run, settings, ids=id_list, vault=vault, allow_truncated_context=allow_truncated_context,
                spot_check=spot, on_progress=progress.update, batch=batch_options,
            )

    for w in result.warnings:
        print(f"evalkit: warning: {w}", file=sys.stderr)
    if not quiet and not result.all_failed:
        print_judge_summary(result, console=console)
    if json_output:
        import orjson

        sys.stdout.write(orjson.dumps(result.to_json(), option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    if result.all_failed:
        # The instrument failed, not the input: exit 1, like a failed gate.
        print(f"evalkit: {result.failure}; results.jsonl, metrics.json and config.json were left as they were", file=sys.stderr)
        raise typer.Exit(EXIT_GATE)


class _BatchLine:
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
