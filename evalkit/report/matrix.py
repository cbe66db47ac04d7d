"""The config matrix table (run_eval.py --matrix): one row per preset, one verdict line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from evalkit.metrics.keys import canonical_key, parse_metric_key
from evalkit.metrics.registry import label_of, short_label_of, shown_in
from evalkit.report.stacked import fits

if TYPE_CHECKING:  # the type only: report/ does not import the stages it renders
    from evalkit.run.matrix import MatrixResult, MatrixRow


def _f(x: float | None, fmt: str = "{:.3f}") -> str:
    return "–" if x is None else fmt.format(x)


def mark(vs: dict | None) -> str:
    """The significance mark of a preset against the previous one: ▲/▼ significant, ≈, –."""
    if not vs or vs.get("delta") is None:
        return "–"
    delta = vs["delta"]
    tail = f" {delta:+.3f}"
    if vs.get("significant"):
        return ("▲ significant" if delta > 0 else "▼ significant") + tail
    return "≈" + tail


def metric_label(metric: str, k: int | None) -> str:
    """The registry's label of a metric as `--expect-order` names it (a metrics.json key, at the
    primary K `k`, or `name@K` in either vocabulary); the name itself when it is not a metric."""
    try:
        name, at = parse_metric_key(canonical_key(metric))
    except ValueError:
        return metric
    return label_of(name, at if at is not None else k)


def short_mark(vs: dict | None) -> str:
    """`mark` in a few characters: ▲/▼ significant, ≈ not distinguishable, then the delta."""
    if not vs or vs.get("delta") is None:
        return "–"
    delta = vs["delta"]
    sign = ("▲" if delta > 0 else "▼") if vs.get("significant") else "≈"
    return f"{sign} {delta:+.3f}"


def _heads(k: int) -> list[str]:
    return [short_label_of(m.key, k) for m in shown_in("compact")]  # MatrixRow.values


def _values(row: MatrixRow) -> list[str]:
    return [_f(row.values.get(m.name)) for m in shown_in("compact")]


def _full_table(result: MatrixResult, ordered_by: str) -> Table:
    """Every column: what a wide terminal shows."""
    table = Table(title=f"config matrix {result.matrix_id}", title_justify="left")
    for name in ("preset", "run id", "n", *_heads(result.k), "p50 ms", "p95 ms", "cost $", f"{ordered_by} vs prev."):
        table.add_column(name, justify="right" if name not in ("preset", "run id", f"{ordered_by} vs prev.") else "left")
    for row in result.rows:
        table.add_row(
            row.preset, row.run_id, str(row.n), *_values(row),
            _f(row.latency_p50_ms, "{:.1f}"), _f(row.latency_p95_ms, "{:.1f}"), _f(row.cost_usd, "{:.4f}"), mark(row.vs_previous),
        )
    return table


def _has_cost(result: MatrixResult) -> bool:
    return any(row.cost_usd for row in result.rows)


def _compact_table(result: MatrixResult) -> Table:
    """The same numbers in about 70 columns: no run id column (said above the table), one
    latency column, the cost only when a run cost something, the mark as ▲/▼/≈ and Δ."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    table.add_column("preset", overflow="fold", max_width=16)  # a longer name wraps
    names = ["n", *_heads(result.k), "p50/p95 ms", *(["cost $"] if _has_cost(result) else [])]
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("vs prev.", no_wrap=True)
    for row in result.rows:
        cost = [_f(row.cost_usd, "{:.4f}")] if _has_cost(result) else []
        table.add_row(
            row.preset, str(row.n), *_values(row),
            f"{_f(row.latency_p50_ms, '{:.1f}')}/{_f(row.latency_p95_ms, '{:.1f}')}", *cost, short_mark(row.vs_previous),
        )
    return table


def _blocks(result: MatrixResult, console: Console, ordered_by: str) -> None:
    """One block per preset, for a console too narrow for any table."""
    heads = _heads(result.k)
    for row in result.rows:
        console.print(f"{row.preset}: n {row.n}")
        console.print("  " + ", ".join(f"{h} {v}" for h, v in zip(heads, _values(row), strict=True)))
        cost = f", cost ${_f(row.cost_usd, '{:.4f}')}" if _has_cost(result) else ""
        console.print(f"  p50 {_f(row.latency_p50_ms, '{:.1f}')} ms, p95 {_f(row.latency_p95_ms, '{:.1f}')} ms{cost}")
        if row.vs_previous:
            console.print(f"  {ordered_by} vs prev.: {mark(row.vs_previous)}")


def print_matrix(result: MatrixResult, console: Console | None = None) -> None:
    """Print the matrix table and the expect-order verdict.

    The table fits the console: every column when it is wide enough; else (80 columns, or
    output piped, where rich assumes 80) a compact table with the run ids said once above
    it; else one block per preset. No number is cut to `…` in any of them.
    """
    console = console or Console()
    ordered_by = metric_label(result.metric, result.k)
    full = _full_table(result, ordered_by)
    if fits(full, console):
        console.print(full)
    else:
        console.print(f"config matrix {result.matrix_id}: runs {result.matrix_id}-<preset>", highlight=False)
        compact = _compact_table(result)
        if fits(compact, console):
            console.print(compact)
            console.print(f"vs prev.: {ordered_by} minus the row above; ▲/▼ significant, ≈ not distinguishable")
        else:
            _blocks(result, console, ordered_by)
    if result.order is not None:
        order = result.order
        head = "holds" if order["passed"] else "VIOLATED"
        console.print(f"expect-order {order['spec']}: {head}")
        for p in order["pairs"]:
            va, vb = _f(p["value_a"]), _f(p["value_b"])
            p_adj = "" if p["p_adjusted"] is None else f", p adj. {p['p_adjusted']:.3g}"
            console.print(f"  {p['a']} {p['op']} {p['b']}: {p['verdict']} ({ordered_by} {va} vs {vb}{p_adj})")
    for w in result.warnings:
        console.print(f"warning: {w}")
    console.print(f"matrix: {result.path}")
