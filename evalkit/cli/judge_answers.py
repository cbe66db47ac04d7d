"""judge_answers.py: (re)judge the answers of a stored run (seed 000 §3.B).

An alias of `evalkit score --answers`, with this script's own flags and help: it calls the
same `evalkit.cli.score.score_run`. Judges results/<run_id>/results.jsonl (typically a
--retrieval-only run), rewrites it atomically, recomputes metrics.json and records the run's
judges in config.json. The target is never called again. Exit 0 ok; 1 the judge failed every
judgment (nothing rewritten); 2 bad input (unknown run, missing key, unpinned model, a
provider that refuses the key, chunk text cut to 200 characters that cannot be re-read
without --allow-truncated-context).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    PANEL_JUDGE,
    PANEL_OUTPUT,
    PanelledCommand,
    concurrency_option,
    json_option,
    judge_options,
    max_retry_wait_option,
    plain_metavars,
    quiet_option,
    rejudge_options,
    results_dir_option,
    rps_option,
    run_id_option,
    selection_options,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="(Re)judge the answers of a run: groundedness and correctness (0-5), abstention fallback, "
    "cache, cost, reliability spot-check. Exit 0 ok, 1 the judge failed every judgment (nothing rewritten), "
    "2 bad input (including chunk text cut to 200 chars that cannot be re-read). (The seed's script for `evalkit score --answers`, with its own flags.)",
)

_RUN = "Run"
_J = PANEL_JUDGE
_C = "Judge requests and cache"
_R = "Reliability"
_B = "Batch (half price, answers within 24 h)"
_O = PANEL_OUTPUT
_JUDGE = judge_options(_J)
_CACHE = judge_options(_C)  # the same flags, listed under another panel
_REJUDGE = rejudge_options(judge=_J, reliability=_R, batch=_B, answers=_RUN)


@app.command(cls=PanelledCommand)
def main(
    run_id: str = run_id_option(_RUN),
    results_dir: Path = results_dir_option(_RUN),
    ids: Optional[str] = selection_options(_RUN, ids_help="Comma-separated case ids to judge (others are kept).")["ids"],
    vault: Optional[Path] = typer.Option(
        None, "--vault", help="Re-read full chunk text from this notes folder when results hold 200-char texts. "
        "(default: the vault config.json records, for in-process reference runs)", rich_help_panel=_RUN
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
    concurrency: int = concurrency_option("Requests", _C),
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
    quiet: bool = quiet_option(panel=_O),
    json_output: bool = json_option(
        "run_id, judge, judge_stats, judge_reliability, aggregate_metrics; printed last, the tables go to stderr", _O
    ),
) -> None:
    """Judge the answers of RUN_ID and rewrite its results and metrics (evalkit score --answers)."""
    from evalkit.cli.score import score_run

    score_run(
        ("answers",), run_id=run_id, results_dir=results_dir, ids=ids, vault=vault,
        allow_truncated_context=allow_truncated_context, judge_provider=judge_provider, judge_model=judge_model,
        judge_base_url=judge_base_url, judge_temperature=judge_temperature, allow_unpinned=allow_unpinned,
        claim_level=claim_level, answer_quality=answer_quality, evaluators=evaluators, judge_trials=judge_trials,
        concurrency=concurrency, rps=rps, timeout=timeout, max_retry_wait=max_retry_wait, no_cache=no_cache,
        refresh_cache=refresh_cache, cache_path=cache_path, price_file=price_file, spot_check=spot_check,
        spot_check_model=spot_check_model, spot_check_provider=spot_check_provider,
        spot_check_prompt_version=spot_check_prompt_version, seed=seed, bias_probes=bias_probes, batch=batch,
        batch_poll_interval=batch_poll_interval, batch_resubmit=batch_resubmit, batch_id=batch_id, quiet=quiet,
        json_output=json_output, command="judge_answers.py",
    )


plain_metavars(app)
