"""The config matrix table (run_eval.py --matrix): one row per preset, one verdict line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from evalkit.metrics.keys import canonical_key, parse_metric_key
from evalkit.metrics.registry import label_of, short_label_of

if TYPE_CHECKING:  # the type only: report/ does not import the stages it renders
    from evalkit.run.matrix import MatrixResult


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


def print_matrix(result: MatrixResult, console: Console | None = None) -> None:
    """Print the matrix table and the expect-order verdict."""
    console = console or Console()
    k = result.k
    ordered_by = metric_label(result.metric, k)
    table = Table(title=f"config matrix {result.matrix_id}", title_justify="left")
    heads = [short_label_of(key, k) for key in ("recall_at_k_avg", "mrr_avg", "ndcg_at_k_avg")]  # MatrixRow's three
    for name in ("preset", "run id", "n", *heads, "p50 ms", "p95 ms", "cost $", f"{ordered_by} vs prev."):
        table.add_column(name, justify="right" if name not in ("preset", "run id", f"{ordered_by} vs prev.") else "left")
    for row in result.rows:
        table.add_row(
            row.preset, row.run_id, str(row.n), _f(row.recall_at_k), _f(row.mrr), _f(row.ndcg_at_k),
            _f(row.latency_p50_ms, "{:.1f}"), _f(row.latency_p95_ms, "{:.1f}"), _f(row.cost_usd, "{:.4f}"), mark(row.vs_previous),
        )
    console.print(table)
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
