"""run_eval's terminal output: a live progress bar and the end-of-run summary table."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from evalkit.metrics.custom import custom_definitions, custom_label
from evalkit.metrics.registry import (
    HEADLINE_KEYS,
    OPERATIONAL_KEYS,
    SUMMARY_KEYS,
    by_key,
    label_of,
    shown_in,
)
from evalkit.store.runlog import Cell, Met, Rec

__all__ = ["RunProgress", "coverage_rows", "metric_value", "print_run_summary", "summary_keys", "summary_rows"]


class _RateColumn(ProgressColumn):
    """Cases per second over rich's speed window."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("--/s" if speed is None else f"{speed:.1f}/s", style="progress.data.speed")


class _ErrorsColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        import time

        n = int(task.fields.get("errors", 0))
        text = Text(f"{n} errors", style="bold red" if n else "dim")
        until, why = task.fields.get("wait_until", 0.0), task.fields.get("wait_why", "")
        left = until - time.monotonic()
        if left > 0:
            text.append(f"  waiting {left:.0f}s ({why})", style="yellow")
        return text


class RunProgress:
    """A rich progress bar with rate, ETA and a live error count (runner.ProgressSink)."""

    def __init__(self, console: Console | None = None, *, disable: bool = False):
        self.console = console or Console(stderr=True)
        self.disable = disable
        self._progress: Progress | None = None
        self._task: Any = None
        self.errors = 0

    def note(self, message: str, details: list[str] | None = None) -> None:
        """A warning before the run (stale anchors): plain text on stderr, even when quiet."""
        import sys

        print(f"evalkit: warning: {message}", file=sys.stderr)
        for line in details or []:
            print(f"  {line}", file=sys.stderr)

    def start(self, *, run_id: str, run_dir: Path, total: int, done: int, resumed: bool) -> None:
        if self.disable:
            return
        verb = "resuming" if resumed else "run"
        if resumed and done:
            self.console.print(f"[dim]{verb} {run_id}: {done} of {total} cases already done[/dim]")
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _RateColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            _ErrorsColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(run_id, total=total, completed=done, errors=0)

    def waiting(self, seconds: float, reason: str) -> None:
        """A retry is waiting (a server's Retry-After, or backoff): the line says so until then."""
        import time

        if self._progress is not None and seconds >= 1:
            self._progress.update(self._task, wait_until=time.monotonic() + seconds, wait_why=reason)

    def advance(self, record: Mapping[str, Any]) -> None:
        if record.get("error") is not None:
            self.errors += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1, errors=self.errors)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f} ms"


def summary_keys(agg: Mapping[str, Any]) -> list[str]:
    """The registry metrics a run summary lists (terminal, summary.md, HTML), in order: each
    of `SUMMARY_KEYS` the registry lists "always", and the others when measured (n > 0)."""
    n = agg.get("n") or {}
    ops = agg.get(Cell.OPERATIONAL) or {}
    out = []
    for key in SUMMARY_KEYS:
        metric = by_key(key)
        measured = ops.get("n") if metric.block == Cell.OPERATIONAL else n.get(key)  # type: ignore[union-attr]
        if metric.summary == "always" or measured:  # type: ignore[union-attr]
            out.append(key)
    return out


def metric_value(agg: Mapping[str, Any], key: str) -> tuple[Any, Any]:
    """(value, n) of a registry metric in a metrics.json cell, from the block that holds it."""
    metric = by_key(key)
    if metric is not None and metric.block is not None:
        block = agg.get(metric.block) or {}
        return block.get(key), block.get("n")
    return agg.get(key), (agg.get("n") or {}).get(key)


def summary_rows(metrics: Mapping[str, Any], judge: Mapping[str, Any] | None = None) -> list[tuple[str, str, str]]:
    """(label, value, n) rows of the summary table, from a metrics.json body.

    Args:
        metrics: metrics.json (aggregate_metrics is read).
        judge: config.json's "judge" object, to mark heuristic judge scores.
    """
    agg = metrics.get(Met.AGGREGATE) or {}
    k = agg.get("k")
    rows: list[tuple[str, str, str]] = []

    heuristic = bool(judge and judge.get("heuristic"))
    keys = summary_keys(agg)
    ops = agg.get(Cell.OPERATIONAL) or {}

    def row(key: str, detail: str = "") -> None:  # labels from the registry: the HTML report shows the same ones
        value, n = metric_value(agg, key)
        rows.append((label_of(key, k, heuristic=heuristic), _fmt(value) + detail, str("—" if n is None else n)))

    for key in HEADLINE_KEYS:
        row(key)
    for other, cell in (agg.get(Cell.AT_K) or {}).items():
        if str(other) == str(k):
            continue
        for m in shown_in("compact"):  # the other K: the registry's compact few
            rows.append((label_of(m.key, other), _fmt(cell.get(m.name)), str((cell.get("n_by_metric") or {}).get(m.name, "—"))))
    for key in keys:
        if key not in HEADLINE_KEYS and key not in OPERATIONAL_KEYS:
            row(key)
    # A project's own metrics (rubric/…, scorer/…: evalkit run --rubric/--scorer), after the registry's.
    for name, entry in sorted(custom_definitions(metrics).items()):
        scale = entry.get("scale") if isinstance(entry.get("scale"), int | float) else 1
        rows.append((custom_label(name, entry), f"{_fmt(entry.get('mean'))} of {scale:g}", str(entry.get("n", "—"))))

    lat = agg.get("latency") or {}
    rows.append(("Latency p50 / p95", f"{_ms(lat.get('p50_ms'))} / {_ms(lat.get('p95_ms'))}", str(lat.get("n", "—"))))
    for phase, block in (lat.get("phases") or {}).items():
        if block and block.get("n"):
            rows.append(
                (f"  {phase} p50 / p95", f"{_ms(block.get('p50_ms'))} / {_ms(block.get('p95_ms'))}", str(block["n"]))
            )
        budget = (block or {}).get("budget")
        if budget:
            rows.append((
                f"  {phase} within {_ms(budget.get('budget_ms'))} / budget score",
                f"{_fmt(budget.get('within_rate'))} / {_fmt(budget.get('score_avg'))}", str(budget.get("n", "—")),
            ))
    # Two times a user mixed up: the suite's wall time, and the sum of the cases' times
    # (larger than the suite's under concurrency).
    rows.append(("Suite wall time", _ms(lat.get("total_ms")), ""))
    rows.append(("Sum of case times", _ms(lat.get("sum_case_ms")), str(lat.get("n", "—"))))
    kinds = ops.get("error_kinds") or {}
    detail = f" ({', '.join(f'{k_}: {v}' for k_, v in kinds.items())})" if kinds else ""
    for key in OPERATIONAL_KEYS:
        if key in keys:
            row(key, detail if key == "error_rate" else "")
    rows += coverage_rows(agg.get(Rec.INDEXING_COVERAGE))
    cost = agg.get("cost") or {}
    rows.append(
        (
            "Judge cost",
            f"${cost.get('judge_total_usd') or 0:.4f} ({cost.get('judge_total_tokens') or 0:,} tokens)",
            str(agg.get("n_cases", "—")),
        )
    )
    if agg.get("n_judge_errors"):
        rows.append(("Judge errors (excluded)", str(agg["n_judge_errors"]), str(agg.get("n_cases", "—"))))
    return rows


def coverage_rows(cov: Any) -> list[tuple[str, str, str]]:
    """The index's coverage (seed 000's indexing coverage, from the target's index stats:
    metrics.json `aggregate_metrics.indexing_coverage`) as summary rows; none when the
    target served no index stats.

    - Notes with no chunks (index): no_chunks_generated_rate (docs_with_0_chunks of docs_processed), n = notes
    - Chunks skipped (index): chunks_skipped_rate (chunks_skipped of chunks_attempted), n = chunks,
      with the share skipped for the context window when some were skipped
    """
    if not isinstance(cov, Mapping):
        return []
    docs, attempted, skipped = cov.get("docs_processed"), cov.get("chunks_attempted"), cov.get("chunks_skipped")
    context = cov.get("chunks_skipped_due_to_context_rate")
    why = f"; context {_fmt(context)}" if skipped and context is not None else ""
    return [
        ("Notes with no chunks (index)", f"{_fmt(cov.get('no_chunks_generated_rate'))} ({_fmt(cov.get('docs_with_0_chunks'))} of "
         f"{_fmt(docs)})", _fmt(docs)),
        ("Chunks skipped (index)", f"{_fmt(cov.get('chunks_skipped_rate'))} ({_fmt(skipped)} of {_fmt(attempted)}{why})",
         _fmt(attempted)),
    ]


def print_run_summary(
    metrics: Mapping[str, Any],
    run_dir: Path,
    *,
    judge: Mapping[str, Any] | None = None,
    gate: Mapping[str, Any] | None = None,
    console: Console | None = None,
) -> None:
    """The end-of-run table: headline metrics with n, latency, error rates, judge cost,
    then the gate verdict and the run folder."""
    from rich.markup import escape

    console = console or Console()
    # Run ids, paths and values come from the user or the run: text, never rich markup.
    trials = metrics.get("trials")
    count = (f"{metrics.get(Met.TOTAL_TESTS, 0)} answers ({trials.get('n_cases')} cases × {trials.get('n_trials')} trials, "
             "pooled)" if isinstance(trials, Mapping) else f"{metrics.get(Met.TOTAL_TESTS, 0)} cases")
    title = f"run {escape(str(metrics.get('run_id', run_dir.name)))} — {count}"
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("n", justify="right", style="dim")
    for label, value, n in summary_rows(metrics, judge):
        table.add_row(escape(label), escape(value), escape(n))
    console.print(table)
    if judge is not None:
        if judge.get("provider") is None:
            console.print("[dim]retrieval-only: no judge ran[/dim]")
        elif judge.get("heuristic"):
            console.print(
                "[yellow]judge: offline heuristic (no LLM judge configured); scores are rough, "
                "see docs/judges.md[/yellow]"
            )
    if gate is not None:
        print_gate(gate, console)
    if isinstance(metrics.get("thresholds"), Mapping):
        print_thresholds(metrics["thresholds"], console)
    if isinstance(metrics.get("trials"), Mapping):
        print_trials(metrics["trials"], console, k=(metrics.get(Met.AGGREGATE) or {}).get("k"))
    if isinstance(metrics.get("suite"), Mapping):
        print_suite(metrics["suite"], console)
    for line in conversation_lines(metrics):
        console.print(escape(line))
    console.print(f"run folder: [bold]{escape(str(run_dir))}[/bold]")


def conversation_lines(metrics: Mapping[str, Any]) -> list[str]:
    """A run of conversations in a few lines (DESIGN.md §10): Recall@K on first turns and on
    follow-ups, per conversation, and where conversations first fail. Empty otherwise."""
    conv = metrics.get(Met.CONVERSATIONS)
    if not isinstance(conv, Mapping):
        return []
    k = conv.get("k")
    by_turn = metrics.get(Met.BY_TURN) if isinstance(metrics.get(Met.BY_TURN), Mapping) else {}

    def recall(cell: Any) -> str:
        if not isinstance(cell, Mapping) or cell.get("recall_at_k_avg") is None:
            return "—"
        return f"{cell['recall_at_k_avg']:.3f} ({(cell.get('n') or {}).get('recall_at_k_avg', cell.get('n_cases'))})"

    first = conv.get("first_failure_by_turn") or {}
    failing = ", ".join(f"turn {t} ×{n}" for t, n in first.items() if t != "none") or "none"
    stages = ", ".join(f"{stage} ×{n}" for stage, n in (conv.get("first_failure_stage") or {}).items())
    per_conv = conv.get("recall_at_k_avg")
    invariants = metrics.get(Met.INVARIANTS) if isinstance(metrics.get(Met.INVARIANTS), Mapping) else {}
    checked = (conv.get("n") or {}).get("pass_rate") or 0
    rate = conv.get("pass_rate")
    passing = "—" if rate is None else f"{round(rate * checked)} of {checked} conversations"
    # One line each, so that none outgrows 80 columns (the terminal wraps them mid-phrase).
    return [
        f"conversations: {conv.get('n_conversations')}, {conv.get('n_turns')} turns, --history "
        f"{invariants.get('history', '?')}",
        f"  Recall@{k}: first turns {recall(by_turn.get('first'))}, follow-ups {recall(by_turn.get('follow-up'))}, "
        f"per conversation {'—' if per_conv is None else f'{per_conv:.3f}'}",
        f"  every checked turn passes: {passing}",
        f"  first failing turn: {failing}" + (f" ({stages})" if stages else ""),
    ]


def print_gate(gate: Mapping[str, Any], console: Console) -> None:
    """The gate's verdict: what was compared, what regressed, what could not be compared."""
    from rich.markup import escape

    base = escape(str(gate.get("baseline_run_id")))
    compared = gate.get("compared")
    if gate.get("nothing_compared"):
        reasons = "; ".join(f"{s['metric']}: {s['reason']}" for s in gate.get("skipped") or [])
        verdict = "allowed" if gate.get("allowed") else "failed"
        console.print(f"[red]gate: nothing comparable[/red] against {base} ({verdict}) — {escape(reasons)}")
        return
    slices = gate.get("slices") if isinstance(gate.get("slices"), Mapping) else None
    if gate.get("headline"):  # the merge decision (issue 36): its one sentence, as compare_runs says it
        colour = {"pass": "green", "fail": "red", "inconclusive": "yellow"}.get(str(gate.get("outcome")), "red")
        console.print(f"[{colour}]gate against {base}: {escape(str(gate['headline']))}[/{colour}]")
        for line in [*(gate.get("failures") or []), *(gate.get("inconclusive") or [])]:
            console.print(f"  - {escape(str(line))}")
    elif gate.get("passed"):
        what = f" ({len(compared)} metrics: {', '.join(compared)})" if compared else ""
        if slices is not None:  # --gate-by
            what += f", and within {len(slices.get('compared') or {})} slice(s) of {', '.join(slices.get('by') or [])}"
        console.print(f"[green]gate passed[/green] against {base}{escape(what)}")
    else:
        head = "[yellow]gate failed, allowed[/yellow]" if gate.get("allowed") else "[red]gate failed[/red]"
        console.print(f"{head} against {base}:")
        for line in gate.get("failures") or [r.get("message", r) for r in gate.get("regressions") or []]:
            console.print(f"  - {escape(str(line))}")
    by_slice: dict[tuple[str, str], list[str]] = {}  # --gate-by: one line per slice and reason
    for s in gate.get("skipped") or []:
        if s.get("scope"):
            by_slice.setdefault((s["scope"], s["reason"]), []).append("every metric" if s["metric"] == "*" else s["metric"])
        else:
            console.print(f"  [dim]not compared: {escape(s['metric'])} ({escape(s['reason'])})[/dim]")
    for (scope, reason), names in by_slice.items():
        console.print(f"  [dim]not compared in {escape(scope)}: {escape(', '.join(names))} ({escape(reason)})[/dim]")
    invariants = gate.get(Met.INVARIANTS) if isinstance(gate.get(Met.INVARIANTS), Mapping) else {}
    for w in invariants.get("warnings") or []:
        console.print(f"  [yellow]warning: {escape(str(w))}[/yellow]")


def print_trials(block: Mapping[str, Any], console: Console, *, k: int | None = None) -> None:
    """--trials N: each headline metric's mean ± std over trials, per trial, and how many
    cases changed outcome between trials (metrics labelled at the primary K `k`)."""
    from rich.markup import escape

    from evalkit.compare.trials import headline_rows

    title = f"{block.get('n_trials')} trials of {block.get('n_cases')} cases"
    table = Table(title=title, title_justify="left")
    for name, justify in (("metric", "left"), ("mean ± std", "right"), ("per trial", "right"), ("flaky cases", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in headline_rows(block, k):
        table.add_row(*(escape(x) for x in row))
    console.print(table)
    flaky = block.get("n_flaky_cases") or 0
    if flaky:
        ids = ", ".join(block.get("flaky_case_ids") or [])
        more = " …" if flaky > len(block.get("flaky_case_ids") or []) else ""
        console.print(f"[yellow]{flaky} case(s) changed outcome between trials[/yellow]: {escape(ids)}{more}")
    if not block.get("complete"):
        console.print("[yellow]not every case has every trial: per-trial values are over different cases[/yellow]")


def print_suite(block: Mapping[str, Any], console: Console) -> None:
    """--suite: each scenario's primary score and weight, then the weighted global score."""
    from rich.markup import escape

    name = f" ({block['name']})" if block.get("name") else ""
    table = Table(title=f"scenarios{escape(name)}", title_justify="left")
    for col, justify in (("scenario", "left"), ("primary metric", "left"), ("weight", "right"), ("cases", "right"),
                         ("score", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for scen, row in (block.get("scenarios") or {}).items():
        table.add_row(escape(str(scen)), escape(str(row.get("metric"))), f"{row.get('weight', 0):g}",
                      str(row.get("n_cases", 0)), _fmt(row.get("score")))
    console.print(table)
    score = block.get("global_score")
    if score is not None:
        console.print(f"global score: [bold]{_fmt(score)}[/bold] (weighted mean over {len(block.get('scenarios') or {})} "
                      "scenarios)")
    else:
        console.print("[yellow]global score: not computed[/yellow] — " + escape("; ".join(block.get("problems") or [])))
    extra = block.get("unweighted_scenarios") or {}
    if extra:
        console.print("[dim]not in the suite: " + escape(", ".join(f"{k} ({v} cases)" for k, v in extra.items())) + "[/dim]")


def print_thresholds(check: Mapping[str, Any], console: Console) -> None:
    """The --threshold verdict (metrics.json `thresholds`): each metric checked, what failed,
    what the bare threshold found unmeasured."""
    from rich.markup import escape

    checked = check.get("checked") or []
    if check.get("passed"):
        what = ", ".join(f"{c['metric']} {_fmt(c.get('value'))} ≥ {c['threshold']:g}" if c.get("direction") != "max"
                         else f"{c['metric']} {_fmt(c.get('value'))} ≤ {c['threshold']:g}" for c in checked)
        console.print(f"[green]thresholds passed[/green] ({escape(what)})")
    else:
        console.print("[red]threshold check failed[/red]:")
        for line in check.get("failures") or []:
            console.print(f"  - {escape(str(line))}")
    named = set((check.get("thresholds") or {}).keys())
    for s in check.get("not_measured") or []:
        if s.get("metric") not in named:  # a named one is in the failures already
            console.print(f"  [dim]not measured: {escape(str(s['metric']))} ({escape(str(s.get('reason')))})[/dim]")
