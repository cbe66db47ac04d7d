"""judge_answers' terminal output: a progress bar and the judging summary table.

Heuristic-judged scores are always labelled "(heuristic)": they are a lexical proxy and
must not be read as LLM-judge scores.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from evalkit.metrics.registry import METRICS, label_of
from evalkit.store.runlog import Cell, Met, Rec

__all__ = ["JudgeProgress", "judge_summary_rows", "print_judge_summary"]


class JudgeProgress:
    """A rich progress bar fed by judge_run's on_progress(done, total)."""

    def __init__(self, console: Console | None = None, *, disable: bool = False):
        self.console = console or Console(stderr=True)
        self.disable = disable
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> JudgeProgress:
        return self

    def update(self, done: int, total: int) -> None:
        """Show progress; the bar starts with the first finished case, so that a config
        error before any judging leaves stderr holding only its one-line message."""
        if self.disable:
            return
        if self._progress is None:
            self._progress = Progress(
                TextColumn("[bold]judging"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("judging", total=total)
        self._progress.update(self._task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


_JUDGE_KEYS = tuple(m.key for m in METRICS if m.stage == "judge")


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def judge_summary_rows(result: Any) -> list[tuple[str, str, str]]:
    """(label, value, n) rows of the summary table, from a JudgeRunResult."""
    agg = result.metrics.get(Met.AGGREGATE) or {}
    n = agg.get("n") or {}
    stats = result.stats
    mixed = " (mixed judges)" if stats.get("mixed") else ""
    heuristic = bool(stats.get("heuristic")) and not mixed
    rows = [  # the judge means by the registry's labels, as every report names them
        (label_of(key, heuristic=heuristic) + mixed, _fmt(agg.get(key)), _fmt(n.get(key))) for key in _JUDGE_KEYS
    ]
    rows += [
        ("Judge errors (excluded from means)", str(stats.get("n_judge_errors", 0)), _fmt(stats.get("records"))),
        ("Not judged: target error", str(stats.get("not_judged_target_error", 0)), ""),
        ("Not judged: correct abstention", str(stats.get("not_judged_correct_abstention", 0)), ""),
        ("Scored by rule (abstained / empty / unanswerable)", str(stats.get("rule_scored", 0)), ""),
        ("Correctness unscoreable (no expected facts)", str(stats.get("correctness_unscoreable", 0)), ""),
        ("Abstention decided by fallback classifier", str(stats.get("abstention_classified", 0)), ""),
    ]
    if not stats.get("heuristic"):
        rows += [
            ("Provider calls", str(stats.get("calls", 0)), ""),
            ("Cache hits / misses", f"{stats.get('cache_hits', 0)} / {stats.get('cache_misses', 0)}", ""),
            ("Judge tokens (prompt + completion)", f"{stats.get('total_tokens', 0):,}", ""),
            ("Judge cost (USD)", f"${stats.get('cost_usd', 0.0):.4f}", ""),
        ]
        if stats.get("unpriced_models"):
            rows.append(("No price for (cost counted as 0)", ", ".join(stats["unpriced_models"]), ""))
    trials = stats.get("trials")
    if trials:
        for kind in (Rec.GROUNDEDNESS, Rec.CORRECTNESS):
            t = trials.get(kind)
            if t:
                rows.append(
                    (
                        f"{label_of(f'{kind}_avg')} over {trials['n_trials']} trials: mean case std / SE (judge noise)",
                        f"{_fmt(t.get('mean_case_std'))} / {_fmt(t.get('se_judge_noise'), 3)}",
                        _fmt(t.get("n")),
                    )
                )
    rel = result.reliability
    if rel:
        second = rel.get("second_judge") or {}
        who = second.get("model") if second.get("model") else second.get("provider")
        if second.get("prompt_set"):
            who = f"{who} prompts {second['prompt_set']}"
        when = " (earlier session, not re-measured)" if rel.get("carried_over") else ""
        rows.append((f"Spot-check vs {who}{when}: disagreement (>1 point or other yes/no)", _fmt(rel.get("disagreement_rate")),
                     _fmt(rel.get("n_pairs"))))
        binary = [k for k in ("abstention", "conflict") if (rel.get("by_judge") or {}).get(k)]
        for kind in binary:
            b = rel["by_judge"][kind]
            rows.append((f"  {kind} decided otherwise", f"{b.get('n_disagree')} of {b.get('n')}", _fmt(b.get("n"))))
        rows.append(("Spot-check quadratic-weighted kappa", _fmt(rel.get("weighted_kappa")), _fmt(rel.get("spot_check_n"))))
    agree = agg.get(Cell.JUDGE_AGREEMENT)
    if agree:
        g, c = agree.get(Rec.GROUNDEDNESS) or {}, agree.get(Rec.CORRECTNESS) or {}
        rows.append((
            "Judge vs human grades: kappa / MAE (groundedness; correctness)",
            f"{_fmt(g.get('kappa_quadratic'))} / {_fmt(g.get('mae'))}; {_fmt(c.get('kappa_quadratic'))} / {_fmt(c.get('mae'))}",
            f"{_fmt(g.get('n'))}; {_fmt(c.get('n'))}",
        ))
    ppi = agg.get(Cell.JUDGE_PPI) or {}
    for kind in (Rec.GROUNDEDNESS, Rec.CORRECTNESS):
        b = ppi.get(kind)
        if isinstance(b, dict) and isinstance(b.get("ci"), list):
            rows.append((f"{kind.capitalize()} corrected by human grades (PPI++)",
                         f"{_fmt(b.get('estimate'))} [{_fmt(b['ci'][0])}, {_fmt(b['ci'][1])}]",
                         f"{b.get('n_labeled')} / {(b.get('n_labeled') or 0) + (b.get('n_unlabeled') or 0)}"))
    return rows


def _signed(v: Any) -> str:
    return "—" if v is None else f"{v:+.2f}"


def bias_lines(bias: Any) -> list[str]:
    """The --bias-probes lines under the summary table (metrics.json's `judge_bias`)."""
    if not isinstance(bias, dict):
        return []
    earlier = " (probes of an earlier judging session)" if bias.get("carried_over") else ""
    out = [f"bias probes{earlier}: {bias.get('n_cases')} cases (seed {bias.get('seed')}), score change under each "
           f"probe, {round(100 * 0.95)}% interval"]
    for probe, what in (("verbosity", f"answer padded ({bias.get('pad')})"), ("position", "context order reversed")):
        for name, e in (bias.get(probe) or {}).items():
            ci = e.get("ci") or [None, None]
            line = f"  {what}: {name} {_signed(e.get('mean_change'))} [{_signed(ci[0])}, {_signed(ci[1])}] (n {e.get('n')})"
            if "flip_rate" in e and e["flip_rate"] is not None:
                line += f", flip rate {e['flip_rate']:.0%} (moved ≥ {e.get('flip_gap'):g})"
            out.append(line)
    sp = bias.get("self_preference") or {}
    if sp.get("flagged"):
        out.append(f"  self-preference: the answers ({sp.get('answerer_model')}) and the judge ({sp.get('judge_model')}) "
                   f"are both {sp.get('judge_family')} models; a judge is known to favour its own family's answers")
    elif sp.get("same_family") is None:
        out.append("  self-preference: not checked (the answerer's or the judge's model family is unknown)")
    else:
        out.append(f"  self-preference: none (answerer {sp.get('answerer_family')}, judge {sp.get('judge_family')})")
    return out


def print_judge_summary(result: Any, console: Console | None = None) -> None:
    """The end-of-judging table, the judge's identity, and the heuristic warning."""
    from rich.markup import escape

    console = console or Console()
    judge = result.judge
    # Model names, run ids and paths are the user's text, never rich markup.
    table = Table(title=f"judged {result.n_judged} of {result.n_records} cases · {escape(str(result.run_id))}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("n", justify="right")
    for label, value, n in judge_summary_rows(result):
        table.add_row(escape(label), escape(value), escape(n))
    console.print(table)
    if judge.get("mixed"):
        parts = [f"{j.get('n_cases')} cases by {j.get('provider')} {j.get('model')}" for j in judge.get("judges") or []]
        console.print(
            f"[yellow]judges: mixed ({escape('; '.join(parts))}); scores from different judges are not comparable, "
            "re-judge without --ids to make them one judge[/yellow]"
        )
    elif judge.get("heuristic"):
        console.print(
            "[yellow]judge: offline heuristic (lexical overlap, no LLM); scores are a rough proxy and are not "
            "comparable with LLM-judged runs; see docs/judges.md[/yellow]"
        )
    else:
        pin = "" if judge.get("pinned") else " [red](unpinned)[/red]"
        who = escape(f"{judge.get('provider')} {judge.get('model')}")
        console.print(f"judge: {who}{pin} · prompts {escape(str(judge.get('prompt_set')))} · temperature {judge.get('temperature')}")
    for line in bias_lines(getattr(result, "bias", None)):
        console.print(escape(line))
    console.print(f"[dim]{escape(str(result.run_dir))}[/dim]")
