"""compare_runs.py: compare two runs (or a run and a saved baseline) and gate regressions.

    compare_runs.py --run-id-1 BASELINE --run-id-2 NEW        (also: evalkit compare BASELINE NEW)
    compare_runs.py --baseline docs/eval/baseline.json NEW     (a baseline.json or a metrics.json)
    compare_runs.py --save-baseline docs/eval/baseline.json RUN

Exit 0 pass (or any outcome with --allow-regressions), 1 a regression shown (the gate failed),
4 not enough evidence to decide (a gated metric not settled; --on-inconclusive pass|fail maps
it), 2 bad input (an unknown run, broken invariants without --ignore-invariants, bad flags).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from evalkit.cli.common import (
    PANEL_GATE,
    PANEL_OUTPUT,
    THRESHOLD_NAMES,
    PanelledCommand,
    exit_on_known_errors,
    gate_options,
    load_dotenv_once,
    plain_metavars,
    results_dir_option,
)

if TYPE_CHECKING:
    from evalkit.gate.thresholds import Thresholds

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Compare run a (baseline) with run b: the merge verdict (better, equivalent, non-inferior, worse or "
    "inconclusive, per metric against its margin), invariants, deltas overall and per slice with paired bootstrap "
    "CIs and randomization tests (Holm or BH corrected), flips, answer drift, latency, config diff, and the "
    "merge decision. Exit 0 pass, 1 a regression shown, 4 not enough evidence (--on-inconclusive), 2 bad input "
    "(unknown run, broken invariants).",
)

_RUNS = "Runs"
_G = PANEL_GATE
_S = "Statistics"
_O = PANEL_OUTPUT
_GATE = gate_options(_G)


def _pick(runs: list[str], run_id_1: str | None, run_id_2: str | None, baseline: Path | None) -> tuple[str | Path | None, str | None]:
    """(a, b) from the positional runs, --run-id-1/2 and --baseline; b is None in save-only mode."""
    from evalkit.errors import InputError, Problem

    given = [r for r in (run_id_1, run_id_2) if r is not None]
    if baseline is not None:
        named = given + list(runs)
        if len(named) != 1:
            raise InputError(Problem(f"with --baseline give exactly one run to compare (got {len(named)})", field="--baseline"))
        return baseline, named[0]
    slots = [run_id_1, run_id_2]
    rest = list(runs)
    for i in range(2):
        if slots[i] is None and rest:
            slots[i] = rest.pop(0)
    if rest:
        raise InputError(Problem(f"too many runs: {', '.join(rest)} (give two: baseline and new)", field="RUNS"))
    if slots[0] is None and slots[1] is not None:
        slots = [slots[1], None]
    if slots[0] is None:
        raise InputError(Problem("which runs? give --run-id-1 A --run-id-2 B (or: evalkit compare A B)", field="--run-id-1"))
    return slots[0], slots[1]


@app.command(cls=PanelledCommand)
def main(
    runs: Optional[list[str]] = typer.Argument(None, metavar="[RUN_A] [RUN_B]", help="The baseline run and the new run (same as --run-id-1/--run-id-2)."),
    run_id_1: Optional[str] = typer.Option(None, "--run-id-1", metavar="RUN_ID", help="Run a, the baseline.", rich_help_panel=_RUNS),
    run_id_2: Optional[str] = typer.Option(None, "--run-id-2", metavar="RUN_ID", help="Run b, the new run.", rich_help_panel=_RUNS),
    baseline: Optional[Path] = typer.Option(
        None, "--baseline", metavar="PATH", rich_help_panel=_RUNS,
        help="Compare the run against a saved baseline file (baseline.json from --save-baseline, or a metrics.json).",
    ),
    save_baseline: Optional[Path] = typer.Option(
        None, "--save-baseline", metavar="PATH", rich_help_panel=_RUNS,
        help="Write the new run (or the only run given) as a baseline file: its metrics, config and one slim record per case.",
    ),
    results_dir: Path = results_dir_option(_RUNS),
    output_format: str = typer.Option("rich", "--format", metavar="FORMAT", help="rich | markdown | json. Markdown is also appended to $GITHUB_STEP_SUMMARY when set.", rich_help_panel=_O),
    metric: Optional[list[str]] = typer.Option(
        None, "--metric", metavar="NAME", help="Show only these metrics' rows: ours or ir_measures' names (ndcg@10, nDCG@10, R@5, "
        "groundedness_avg; ndcg = every K). Repeatable. Tests and the gate still cover every metric.", rich_help_panel=_O,
    ),
    show_drift: int = typer.Option(5, "--show-drift", min=0, metavar="N", help="Changed answers to show with a word diff.", rich_help_panel=_O),
    max_flips: int = typer.Option(20, "--max-flips", min=0, metavar="N", help="Flips listed per direction in the terminal report (json has all).", rich_help_panel=_O),
    pairwise_judge: Optional[str] = typer.Option(
        None, "--pairwise-judge", metavar="JUDGE", rich_help_panel=_O,
        help="Ask a judge which run answered each case better (A, B or tie), each pair twice with the order swapped "
        "(the share that flips is its position bias; on 20 pairs also against run b's answer padded with itself, its "
        "verbosity bias): heuristic (offline), or PROVIDER:MODEL such as "
        "openai:gpt-4o-2024-08-06 (a pinned model; openai-compatible's URL from EVALKIT_JUDGE_BASE_URL). Its verdicts "
        "go to run b's pairwise_judge.jsonl and are tallied beside the human side-by-side reviews; not part of the gate.",
    ),
    seed: int = typer.Option(0, "--seed", min=0, metavar="N", help="Seed of the bootstrap and randomization draws.", rich_help_panel=_S),
    resamples: int = typer.Option(10_000, "--resamples", min=1, metavar="N", help="Bootstrap resamples and random sign patterns per test.", rich_help_panel=_S),
    alpha: float = typer.Option(0.05, "--alpha", metavar="FLOAT", help="Significance level after correction.", rich_help_panel=_S),
    fdr: bool = typer.Option(False, "--fdr", help="Correct with Benjamini-Hochberg (false discovery rate) instead of Holm.", rich_help_panel=_S),
    gate: Optional[str] = typer.Option(
        None, "--gate", metavar="MODE", rich_help_panel=_G,
        help="verdict (the default; alias non-inferior): fails when any metric is shown worse than its margin allows, "
        "exit 4 when a gated metric is not settled. threshold: run_eval's thresholds (the default with --gate-preset or "
        "a bare metrics.json). significant: a threshold regression fails only if its paired test is significant after "
        "correction.",
    ),
    on_inconclusive: str = typer.Option(
        "exit-4", "--on-inconclusive", metavar="ACTION", rich_help_panel=_G,
        help="What not enough evidence exits with: exit-4 (the default), pass (0) or fail (1).",
    ),
    margin: Optional[list[str]] = typer.Option(
        None, "--margin", metavar="NAME=VALUE", rich_help_panel=_G,
        help="A metric's non-inferiority margin in the verdict (default: the registry's, the gated metrics' thresholds and "
        "error_rate 0.05): recall_frac@5=0.03, error_rate=0.02; a metric without a default joins the verdict; VALUE off "
        "leaves one out. Repeatable.",
    ),
    fail_on_flip: bool = typer.Option(False, "--fail-on-flip", help="Fail the gate when any case goes pass -> fail.", rich_help_panel=_G),
    gate_preset: Optional[str] = typer.Option(
        None, "--gate-preset", metavar="NAME", rich_help_panel=_G,
        help="A named gate; flags given beside it win. bob (alias seed001): seed 001's 'Flag regressions', each "
        "'drop > X%' a share of the baseline's value: recall_frac drop > 5% and MRR drop > 10% "
        "(--regression-threshold-mrr-relative) of the baseline's, --fail-on-flip, --gate-by domain.",
    ),
    regression_threshold: Optional[list[str]] = _GATE["regression_threshold"],
    gate_by: Optional[list[str]] = _GATE["gate_by"],
    gate_min_n: Optional[int] = _GATE["gate_min_n"],
    allow_regressions: Optional[bool] = _GATE["allow_regressions"],
    ignore_invariants: Optional[bool] = _GATE["ignore_invariants"],
    allow_missing_metrics: Optional[bool] = _GATE["allow_missing_metrics"],
    allow_label_change: Optional[bool] = _GATE["allow_label_change"],
    same_corpus: Optional[bool] = _GATE["same_corpus"],
    regression_threshold_recall: Optional[float] = _GATE["regression_threshold_recall"],
    regression_threshold_mrr: Optional[float] = _GATE["regression_threshold_mrr"],
    regression_threshold_mrr_relative: Optional[float] = typer.Option(
        None, "--regression-threshold-mrr-relative", min=0.0, metavar="FLOAT", help="Max MRR drop as a share of the baseline's MRR (seed 001's 'MRR drop > 10%'). (default: 0.1)", rich_help_panel=_G
    ),
    regression_threshold_scope_miss: Optional[float] = _GATE["regression_threshold_scope_miss"],
    regression_threshold_groundedness: Optional[float] = _GATE["regression_threshold_groundedness"],
    regression_threshold_correctness: Optional[float] = _GATE["regression_threshold_correctness"],
    regression_threshold_attribution: Optional[float] = _GATE["regression_threshold_attribution"],
    regression_threshold_abstention: Optional[float] = _GATE["regression_threshold_abstention"],
    regression_threshold_hallucination: Optional[float] = _GATE["regression_threshold_hallucination"],
    regression_threshold_false_abstention: Optional[float] = _GATE["regression_threshold_false_abstention"],
) -> None:
    """Compare run a (the baseline) with run b and gate regressions."""
    given = dict(locals())
    with exit_on_known_errors():
        from evalkit.compare import compare_runs, open_source
        from evalkit.compare import save_baseline as write_baseline
        from evalkit.errors import GateFailed, InputError, Problem

        if pairwise_judge is not None:
            load_dotenv_once()  # the judge's key and EVALKIT_JUDGE_BASE_URL
        if output_format not in ("rich", "markdown", "json"):
            raise InputError(Problem(f"expected rich, markdown or json, got {output_format!r}", field="--format"))
        from evalkit.gate.verdict import parse_margins

        margins = parse_margins(margin or [])
        a, b = _pick(list(runs or []), run_id_1, run_id_2, baseline)
        if b is None:
            if save_baseline is None:
                raise InputError(Problem("give a second run to compare with (or --save-baseline PATH to save this one)", field="--run-id-2"))
            source = open_source(a, results_dir, flag="--run-id-1")  # type: ignore[arg-type]
            path = write_baseline(source, save_baseline)
            print(f"saved baseline of {source.run_id} to {path}", file=sys.stderr)
            return
        if pairwise_judge is not None:  # its verdicts are kept in run b's folder; compare_runs tallies them
            from evalkit.rescore.pairwise import judge_runs

            judge_runs(open_source(a, results_dir, flag="--run-id-1"), open_source(b, results_dir, flag="--run-id-2"),
                       pairwise_judge)
        # The gate's own default for every --regression-threshold-* not given; a preset's values
        # under the flags given beside it.
        thresholds, mrr_relative, fail_on_flip = _gate_thresholds(given)
        result = compare_runs(
            a, b, results_dir=results_dir, seed=seed, resamples=resamples, alpha=alpha, correction="bh" if fdr else "holm",
            ignore_invariants=bool(ignore_invariants), thresholds=thresholds,
            mrr_relative_threshold=mrr_relative, gate=gate, on_inconclusive=on_inconclusive,  # type: ignore[arg-type]
            margins=margins, fail_on_flip=fail_on_flip,
            allow_regressions=bool(allow_regressions), show_drift=show_drift, allow_missing_metrics=bool(allow_missing_metrics),
            same_corpus=bool(same_corpus), allow_label_change=bool(allow_label_change),
        )

        if metric:
            from evalkit.compare import select_metrics

            result = select_metrics(result, metric)
        if output_format == "json":
            sys.stdout.write(result.model_dump_json() + "\n")
        elif output_format == "markdown":
            from evalkit.report.compare import append_step_summary, render_markdown

            text = render_markdown(result)
            sys.stdout.write(text)
            append_step_summary(text)
        else:
            from evalkit.report.compare import print_comparison

            print_comparison(result, max_flips=max_flips)
        if save_baseline is not None:
            path = write_baseline(open_source(b, results_dir, flag="--run-id-2"), save_baseline)
            print(f"saved baseline of {result.run_id_2} to {path}", file=sys.stderr)
        decision = result.decision
        if decision is not None and decision.exit_code != 0:
            lines = result.gate.failures or result.gate.inconclusive
            title = "regression gate failed" if decision.outcome == "fail" else "not enough evidence to decide the merge"
            raise GateFailed(lines or [decision.headline], title=title, exit_code=decision.exit_code)


def _gate_thresholds(given: dict) -> tuple[Thresholds, float, bool]:
    """(thresholds, relative MRR drop, fail on flip) from the gate flags and --gate-preset:
    a flag given wins over the preset, the preset over the gate's default.

    Raises:
        InputError: an unknown preset, metric name or grouping, or a value off its scale (exit 2).
    """
    from dataclasses import replace

    from evalkit.errors import InputError, Problem
    from evalkit.gate.thresholds import (
        Thresholds,
        gate_preset,
        parse_gate_by,
        parse_regression_thresholds,
    )

    try:
        preset = gate_preset(given["gate_preset"]) if given["gate_preset"] is not None else None
    except ValueError as e:
        raise InputError(Problem(str(e), field="--gate-preset")) from None
    problems = []
    try:
        named = parse_regression_thresholds(given["regression_threshold"] or [])
    except ValueError as e:
        problems.append(Problem(str(e), field="--regression-threshold"))
    try:
        by = parse_gate_by(given["gate_by"] or [])
    except ValueError as e:
        problems.append(Problem(str(e), field="--gate-by"))
    if problems:
        raise InputError(problems)
    builtin = {name: given[f"regression_threshold_{name}"] for name in THRESHOLD_NAMES}
    thresholds = Thresholds(**{n: v for n, v in builtin.items() if v is not None})
    if preset is not None:
        thresholds = replace(thresholds.with_named(dict(preset.thresholds)).with_relative(dict(preset.relative)),
                             by=preset.by, preset=preset.name)
    thresholds = thresholds.with_named(named)
    if by:
        thresholds = replace(thresholds, by=tuple(by))
    if given["gate_min_n"] is not None:
        thresholds = replace(thresholds, min_slice_n=int(given["gate_min_n"]))
    relative = given["regression_threshold_mrr_relative"]
    if relative is None:
        relative = preset.mrr_relative if preset is not None else 0.10
    return thresholds, float(relative), bool(given["fail_on_flip"] or (preset is not None and preset.fail_on_flip))


plain_metavars(app)
