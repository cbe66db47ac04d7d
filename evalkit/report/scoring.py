"""Terminal tables for score_retrieval.py and score_abstention.py, read from metrics.json.

Renderers only: every number comes from the metrics.json the library just wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evalkit.metrics.registry import (
    HEADLINE_KEYS,
    METRICS,
    by_key,
    label_of,
    short_label_of,
)
from evalkit.store.runlog import Cell, Met

# Every table reads its metrics and their labels off the registry: the per-K table has the
# headline @K metrics (a row per K, so labelled at "K"); the by-slice tables what a slice
# holds of a stage, under the short labels summary.md and the HTML report use.
_AT_K = tuple((by_key(key).at_k, label_of(key)) for key in HEADLINE_KEYS)  # type: ignore[union-attr]
_SLICE_RETRIEVAL = tuple(key for key in HEADLINE_KEYS if by_key(key).sliced)  # type: ignore[union-attr]
_SLICE_ABSTENTION = tuple(m.key for m in METRICS if m.stage == "abstention" and m.sliced)
_RETRIEVAL_EXTRAS = tuple(m.key for m in METRICS if m.stage == "retrieval" and m.at_k is None)
_ABSTENTION = tuple(m.key for m in METRICS if m.stage == "abstention")


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def _with_n(cell: Mapping[str, Any], key: str) -> str:
    n = (cell.get("n") or {}).get(key)
    if not n:
        return "—"
    return f"{_fmt(cell.get(key))} [dim](n={n})[/dim]"


def retrieval_headline(metrics: Mapping[str, Any]) -> Table:
    """One row per K (primary K first): every retrieval metric with its n."""
    agg = metrics.get(Met.AGGREGATE) or {}
    table = Table(title=f"retrieval — run {escape(str(metrics.get('run_id', '')))}", title_justify="left")
    table.add_column("K", justify="right")
    for _, label in _AT_K:
        table.add_column(escape(label), justify="right")
    table.add_column("n", justify="right", style="dim")
    for k, cell in (agg.get(Cell.AT_K) or {}).items():
        by_metric = cell.get("n_by_metric") or {}
        row = [escape(str(k))]
        for name, _ in _AT_K:
            n = by_metric.get(name, cell.get("n"))
            row.append(_fmt(cell.get(name)) + (f" [dim](n={n})[/dim]" if n != cell.get("n") else ""))
        table.add_row(*row, str(cell.get("n", "—")))
    return table


def retrieval_extras(metrics: Mapping[str, Any]) -> Table:
    agg = metrics.get(Met.AGGREGATE) or {}
    table = Table(show_header=False, box=None)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in _RETRIEVAL_EXTRAS:
        table.add_row(label_of(key), _with_n(agg, key))
    table.add_row("Unlabeled answerable cases", str(agg.get("n_unlabeled", "—")))
    return table


def by_group(metrics: Mapping[str, Any], grouping: str, columns: tuple[str, ...], k: Any) -> Table:
    """One row per group of `grouping` (by_category ...): the slice's metrics (registry keys,
    headed by their short labels at K `k`) with their n."""
    name = grouping.removeprefix("by_")
    table = Table(title=f"by {name} (K={escape(str(k))})", title_justify="left")
    table.add_column(name)
    table.add_column("cases", justify="right")
    for key in columns:
        table.add_column(escape(short_label_of(key, k)), justify="right")
    for group, cell in (metrics.get(grouping) or {}).items():
        table.add_row(escape(str(group)), str(cell.get("n_cases", 0)), *(_with_n(cell, key) for key in columns))
    return table


def _warnings(console: Console, warnings: list[str]) -> None:
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")


def primary_k_line(result: Any) -> str:
    """Which K is primary (the headline names, slices, gate, compare_runs) and whether it moved."""
    primary, others = result.ks[0], ", ".join(str(k) for k in result.ks[1:])
    was = getattr(result, "previous_primary_k", None)
    if getattr(result, "primary_k_chosen", False):
        why = f"changed from {was} by --primary-k" if was is not None and was != primary else "set by --primary-k"
    elif was is not None and was != primary:
        why = f"the run's; metrics.json had {was}, from the first --k of an older score_retrieval"
    else:
        why = "the run's, kept; --primary-k K makes another K primary"
    return f"primary K: [bold]{primary}[/bold] ({why})" + (f"; other K: {others}" if others else "")


def print_retrieval_scoring(result: Any, console: Console | None = None) -> None:
    """Headline table (every K), scope/attribution/recency, the table by category, and where
    the labels came from."""
    console = console or Console()
    m = result.metrics
    console.print(retrieval_headline(m))
    console.print(retrieval_extras(m))
    k = (m.get(Met.AGGREGATE) or {}).get("k")
    if m.get(Met.BY_CATEGORY):
        console.print(by_group(m, Met.BY_CATEGORY, _SLICE_RETRIEVAL, k))
    src = result.eval_set
    label = f"labels: {escape(', '.join(src.paths))} ({escape(src.origin)}, dataset_version {escape(src.version[:12])}…"
    label += ", changed since the run)" if src.changed else ", as run)"
    snippets = "snippets required" + (" (on cut text: upper bounds)" if result.snippets_on_cut_text else "")
    procs = f" by {result.processes} processes" if result.processes > 1 else ""
    console.print(
        f"[dim]{label}; {result.n_records} cases{procs}; {snippets if result.require_snippets else 'snippets not required'}[/dim]"
    )
    console.print(primary_k_line(result))
    _warnings(console, result.warnings)
    if getattr(result, "results_rewritten", False):
        console.print(
            f"metrics.json and the per-case values in results.jsonl updated together: "
            f"[bold]{escape(str(result.run_dir))}[/bold]"
        )
    else:
        console.print(f"metrics.json updated: [bold]{escape(str(result.run_dir / 'metrics.json'))}[/bold]")


def abstention_tables(metrics: Mapping[str, Any]) -> tuple[Table, Table]:
    """The rates with their n, and the confusion matrix with per-row / per-column totals."""
    agg = metrics.get(Met.AGGREGATE) or {}
    rates = Table(title=f"abstention — run {escape(str(metrics.get('run_id', '')))}", title_justify="left")
    rates.add_column("metric")
    rates.add_column("value", justify="right")
    rates.add_column("n", justify="right", style="dim")
    n = agg.get("n") or {}
    for key in _ABSTENTION:
        rates.add_row(label_of(key), _fmt(agg.get(key)), str(n.get(key, "—")))
    rates.add_row("Unknown (no abstained, excluded)", str(agg.get("n_abstention_unknown", "—")), "")
    conf = agg.get("abstention_confusion") or {}
    matrix = Table(title="confusion (rows: label; columns: what the system did)", title_justify="left")
    matrix.add_column("")
    matrix.add_column("answered", justify="right")
    matrix.add_column("abstained", justify="right")
    matrix.add_column("total", justify="right", style="dim")
    for row in ("answerable", "unanswerable"):
        cells = conf.get(row) or {}
        an, ab = cells.get("answered", 0), cells.get("abstained", 0)
        matrix.add_row(row, str(an), str(ab), str(an + ab))
    return rates, matrix


def print_abstention_scoring(result: Any, console: Console | None = None) -> None:
    console = console or Console()
    m = result.metrics
    rates, matrix = abstention_tables(m)
    console.print(rates)
    console.print(matrix)
    if m.get(Met.BY_CATEGORY):
        console.print(by_group(m, Met.BY_CATEGORY, _SLICE_ABSTENTION, (m.get(Met.AGGREGATE) or {}).get("k")))
    src = result.eval_set
    how = f"re-classified by {result.classifier} ({result.n_classified} answers, {result.n_changed} changed)" if result.classifier else "abstained as stored"
    console.print(
        f"[dim]labels: {escape(', '.join(src.paths))} ({escape(src.origin)}{', changed since the run' if src.changed else ''}); "
        f"{result.n_records} cases; {escape(how)}[/dim]"
    )
    _warnings(console, result.warnings)
    console.print(f"metrics.json updated: [bold]{escape(str(result.run_dir / 'metrics.json'))}[/bold]")
