"""The HTML report of one run: a view model read from the run folder, rendered by run.html.j2.

Numbers come from metrics.json as the scoring scripts wrote them; results.jsonl is streamed
once for the per-case table (`cases.read_case_table`: every case, as packed data the page's
script draws) and nothing else is recomputed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markupsafe import Markup

from evalkit.metrics.custom import custom_definitions, custom_label
from evalkit.metrics.registry import (
    HEADLINE_KEYS,
    by_key,
    label_of,
    short_label_of,
    shown_in,
)
from evalkit.report.html.cases import CASE_FIELDS, CaseRow, CaseTable, read_case_table
from evalkit.report.html.charts import bar, bar_chart
from evalkit.report.run import metric_value, summary_keys
from evalkit.report.summary_md import dataset_version_text
from evalkit.store.runlog import Cell as MetricsCell
from evalkit.store.runlog import Met
from evalkit.store.runs import EMBEDDINGS_FILE, REPORT_FILE, RunDir

__all__ = ["RunView", "build_run_view", "render_run_report", "write_run_report"]

# Where the detail blocks go in the rendered page. Run text cannot produce it: autoescaping
# turns every "<" from a run into "&lt;".
_DETAILS_SLOT = Markup("<!--evalkit:case-details-->")

# (metrics.json key, column label, full-bar value): rates run to 1, judge scores to 5.
# Headers are the registry's short labels (summary.md's by-category table uses the same).
METRIC_COLUMNS: tuple[tuple[str, str, float], ...] = tuple(
    (m.key, short_label_of(m.key), m.scale) for m in shown_in("slice_columns")
)
# The per-K table: (@K metric name, column label), the headline @K metrics in the summaries'
# order, labelled by the registry at K "K" (each row says its K).
AT_K_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (by_key(key).at_k, label_of(key)) for key in HEADLINE_KEYS  # type: ignore[union-attr,misc]
)
# The per-case table's metric columns: (the case table's column, its metric), headed by the
# metric's short label at the run's K.
CASE_COLUMNS = tuple((CASE_FIELDS[m.key], m.key) for m in shown_in("case_columns"))
GROUPS = (("category", "Category"), ("tag", "Tag"), ("difficulty", "Difficulty"), ("domain", "Domain"), ("answerable", "Answerable"), ("language", "Language"), ("scenario", "Scenario"))


@dataclass(slots=True)
class Cell:
    """One value of a table: shown text comes from the template's filters; `scale` is the
    value of a full bar (None: no bar)."""

    value: float | None
    n: int | None = None
    scale: float | None = None
    bar_width: int = 90

    @property
    def bar(self) -> Any:
        return bar(self.value, hi=self.scale or 1.0, width=self.bar_width) if self.scale else ""


@dataclass(slots=True)
class Table:
    id: str
    title: str
    key_label: str
    columns: list[tuple[str, str]]  # (key, label)
    rows: list[tuple[str, int | None, dict[str, Cell]]]  # (group value, n_cases, cells)


@dataclass
class RunView:
    """Everything run.html.j2 shows, read from one run folder."""

    run_id: str
    created_at: str | None
    k: int | None
    n_cases: int
    headline: list[tuple[str, Cell, str]]  # (label, cell, kind: "rate" | "score")
    cards: list[tuple[str, Cell, str]]  # the headline rows shown big at the top
    at_k: list[tuple[int, dict[str, Cell]]]
    at_k_columns: list[tuple[str, str]]  # (@K metric name, label) of the per-K table
    case_columns: list[tuple[str, str]]  # the per-case table's metric columns: (column, label)
    breakdowns: list[Table]
    latency_rows: list[tuple[str, dict[str, float | None], int | None]]
    latency_chart: Any
    latency_totals: dict[str, float | None]
    cost: dict[str, Any]
    judge: dict[str, Any]
    reliability: dict[str, Any] | None
    agreement: dict[str, Any] | None
    config_rows: list[tuple[str, str]]
    warnings: list[str]
    cases: list[CaseRow]  # the first rows, drawn by the template (the script draws them all)
    cases_total: int  # records in results.jsonl
    cases_shown: int  # rows of the case table: all of them unless a cap was asked for
    cases_capped: bool
    case_rows: str = ""  # every row, packed (cases.pack); the script reads it
    categories: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    metrics_missing: bool = False
    # embeddings.json (`evalkit embed`), cut for the page (`_embeddings`); None: none.
    embeddings: dict[str, Any] | None = None


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# The headline rows shown big at the top, as cards.
_CARD_KEYS = frozenset(m.key for m in shown_in("cards"))


def _headline_rows(agg: Mapping[str, Any], judge_heuristic: bool) -> list[tuple[str, tuple[str, Cell, str]]]:
    """(key, (label, cell, kind)) of the headline table: the rows and labels of the terminal's
    summary (`report.run.summary_keys`, the registry's labels); bars run to each metric's scale."""
    k = agg.get("k")
    rows = []
    for key in summary_keys(agg):
        value, n = metric_value(agg, key)
        scale = by_key(key).scale  # type: ignore[union-attr]
        kind = "score" if scale != 1.0 else "rate"
        rows.append((key, (label_of(key, k, heuristic=judge_heuristic), Cell(_num(value), _int(n), scale), kind)))
    # A project's own metrics (rubric/…, scorer/…) after the registry's, on their own scales,
    # marked "(heuristic)" as a built-in judge score is when the offline heuristic gave them.
    for name, entry in sorted(custom_definitions({Met.AGGREGATE: agg}).items()):
        scale = _num(entry.get("scale")) or 1.0
        rows.append((name, (custom_label(name, entry), Cell(_num(entry.get("mean")), _int(entry.get("n")), scale),
                            "score" if scale != 1.0 else "rate")))
    return rows


def _headline(agg: Mapping[str, Any], judge_heuristic: bool) -> list[tuple[str, Cell, str]]:
    return [row for _, row in _headline_rows(agg, judge_heuristic)]


def _at_k(agg: Mapping[str, Any]) -> list[tuple[int, dict[str, Cell]]]:
    out = []
    for k, cell in (agg.get(MetricsCell.AT_K) or {}).items():
        n_by = (cell or {}).get("n_by_metric") or {}
        cells = {key: Cell(_num(cell.get(key)), _int(n_by.get(key)), 1.0) for key, _ in AT_K_COLUMNS}
        out.append((int(k), cells))
    return sorted(out)


def _breakdowns(metrics: Mapping[str, Any], k: Any) -> list[Table]:
    tables = []
    for group, title in GROUPS:
        by = metrics.get(f"by_{group}") or {}
        if not by:
            continue
        keys = [(key, short_label_of(key, k)) for key, _, _ in METRIC_COLUMNS if any((c or {}).get(key) is not None for c in by.values())]
        scale = {key: s for key, _, s in METRIC_COLUMNS}
        rows = []
        for value, cell in by.items():
            cell = cell or {}
            n = cell.get("n") or {}
            rows.append((str(value), _int(cell.get("n_cases")), {key: Cell(_num(cell.get(key)), _int(n.get(key)), scale[key], 48) for key, _ in keys}))
        tables.append(Table(id=f"by-{group}", title=title, key_label=group, columns=keys, rows=rows))
    return tables


def _latency(agg: Mapping[str, Any]) -> tuple[list[tuple[str, dict[str, float | None], int | None]], Any, dict[str, float | None]]:
    lat = agg.get("latency") or {}
    rows = [("total (per case)", {s: _num(lat.get(f"{s}_ms")) for s in ("p50", "p95", "mean")}, _int(lat.get("n")))]
    for phase, block in (lat.get("phases") or {}).items():
        block = block or {}
        rows.append((str(phase), {s: _num(block.get(f"{s}_ms")) for s in ("p50", "p95", "mean")}, _int(block.get("n"))))
    chart = bar_chart(
        [label for label, _, _ in rows],
        {"p50": [v["p50"] for _, v, _ in rows], "p95": [v["p95"] for _, v, _ in rows]},
        title="Latency p50 and p95 per phase (ms)", unit=" ms",
    )
    totals = {"suite_wall_ms": _num(lat.get("total_ms")), "sum_case_ms": _num(lat.get("sum_case_ms"))}
    return rows, chart, totals


def _config_rows(config: Mapping[str, Any], metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    target = config.get("target") or {}
    rows.append(("target", " ".join(f"{k}={v}" for k, v in target.items() if v not in (None, {}, []))))
    es = config.get("eval_set") or {}
    paths = es.get("paths") or []
    if paths:
        rows.append(("eval set", ", ".join(map(str, paths)) + f" ({es.get('n_selected', '?')} of {es.get('n_cases', '?')} cases)"))
    version = dataset_version_text(metrics, config, 16)  # the labels scored: a re-scoring's, not the run's
    if version:
        rows.append(("dataset version", version))
    settings = config.get("settings") or {}
    if settings.get("k"):
        rows.append(("K", ", ".join(map(str, settings["k"]))))
    for key, value in (config.get("versions") or {}).items():
        if value is not None and key != "dataset_version":
            rows.append((key, str(value)))
    judge = config.get("judge") or {}
    if judge:
        rows.append(("judge", " ".join(str(judge.get(k)) for k in ("provider", "model") if judge.get(k)) or "none"))
    git = config.get("git") or {}
    if git.get("commit"):
        rows.append(("git", f"{str(git['commit'])[:12]}{' (dirty)' if git.get('dirty') else ''}"))
    if config.get("config_hash"):
        rows.append(("config hash", str(config["config_hash"])[:16]))
    hw = config.get("hardware") or {}
    if hw:
        rows.append(("hardware", f"{hw.get('cpu_model', '?')}, {hw.get('logical_cores', '?')} cores, {hw.get('memory_total_gb', '?')} GB"))
    return rows


# Rows of the embedding section's tables: the farthest gold cases and the clusters.
EMBEDDING_ROWS = 20


def _embeddings(run: RunDir) -> dict[str, Any] | None:
    """embeddings.json cut for the page (the farthest cases and the clusters, EMBEDDING_ROWS
    each), or None when the run has none. A file that cannot be read is said, not fatal."""
    from evalkit.errors import InputError
    from evalkit.jsonio import read_json

    path = run.path / EMBEDDINGS_FILE
    if not path.is_file():
        return None
    try:
        body = read_json(path, what=EMBEDDINGS_FILE)
    except InputError as e:
        return {"error": {"message": f"{EMBEDDINGS_FILE} could not be read: {e}"}}
    if not isinstance(body, Mapping):
        return {"error": {"message": f"{EMBEDDINGS_FILE} is not a JSON object"}}
    far = dict(body.get("far_gold") or {})
    far["shown"] = list(far.get("cases") or [])[:EMBEDDING_ROWS]
    clusters = dict(body.get("clusters") or {})
    clusters["shown"] = [{**c, "failing_ids": list(c.get("failing_ids") or [])[:10]}
                         for c in list(clusters.get("clusters") or [])[:EMBEDDING_ROWS] if isinstance(c, Mapping)]
    dist = body.get("distribution") or {}
    rows = [("question ↔ best gold support", dist.get("q_gold_best")),
            ("question ↔ best retrieved chunk (top K)", dist.get("q_retrieved_best")),
            ("gap (gold − retrieved)", dist.get("gap")),
            ("question ↔ gold, failing cases", dist.get("q_gold_best_failing")),
            ("question ↔ gold, passing cases", dist.get("q_gold_best_passing"))]
    return {
        "error": body.get("error"), "embedder": body.get("embedder") or {}, "k": body.get("k"),
        "computed_at": body.get("computed_at"), "n_cases": body.get("n_cases"),
        "gold_unresolved": body.get("gold_unresolved"), "gold_from_retrieved": body.get("gold_from_retrieved"),
        "retrieved_text_cut": body.get("retrieved_text_cut"),
        "distribution": [(label, d) for label, d in rows if isinstance(d, Mapping)],
        "gold_closer": dist.get("gold_closer"), "retrieved_closer": dist.get("retrieved_closer"),
        "far": far, "clusters": clusters,
    }


def build_run_view(run: RunDir, table: CaseTable) -> RunView:
    """Read a run folder into the report's view model; `table` is its case table
    (`cases.read_case_table`).

    A run without metrics.json (still running, or killed before the end) gets a report
    of its cases and a note instead of the aggregate sections.
    """
    config = run.read_config()
    metrics = run.read_metrics()
    missing = metrics is None
    metrics = metrics or {}
    agg = metrics.get(Met.AGGREGATE) or {}
    judge_cfg = config.get("judge") or {}
    judge_agg = agg.get("judge") or {}
    k = agg.get("k") if agg.get("k") is not None else ((config.get("settings") or {}).get("k") or [None])[0]
    lat_rows, lat_chart, lat_totals = _latency(agg)
    headline = _headline_rows(agg, bool(judge_cfg.get("heuristic"))) if agg else []
    cost = dict(agg.get("cost") or {})
    for key in ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "cache_misses", "unpriced_models"):
        if key in judge_agg:
            cost[key] = judge_agg[key]
    warnings = [str(w.get("message") if isinstance(w, Mapping) else w) for w in metrics.get("warnings") or []]
    return RunView(
        run_id=run.run_id,
        created_at=config.get("created_at"),
        k=k,
        n_cases=int(agg.get("n_cases") or table.total),
        headline=[row for _, row in headline],
        cards=[row for key, row in headline if key in _CARD_KEYS],
        at_k=_at_k(agg),
        at_k_columns=list(AT_K_COLUMNS),
        case_columns=[(col, short_label_of(key, k)) for col, key in CASE_COLUMNS],
        breakdowns=_breakdowns(metrics, k),
        latency_rows=lat_rows if agg.get("latency") else [],
        latency_chart=lat_chart,
        latency_totals=lat_totals,
        cost=cost,
        judge={**{k_: judge_cfg.get(k_) for k_ in ("provider", "model", "heuristic", "note", "pinned", "temperature", "prompt_version")}, **judge_agg},
        reliability=agg.get(MetricsCell.JUDGE_RELIABILITY),
        agreement=agg.get(MetricsCell.JUDGE_AGREEMENT),
        config_rows=_config_rows(config, metrics),
        warnings=warnings,
        cases=table.first,
        cases_total=table.total,
        cases_shown=table.shown,
        cases_capped=table.capped,
        case_rows=table.rows,
        categories=table.categories,
        outcomes=table.outcomes,
        metrics_missing=missing,
        embeddings=_embeddings(run),
    )


NAV = (
    ("headline", "Headline"), ("at-k", "Per K"), ("breakdowns", "Breakdowns"), ("latency", "Latency"),
    ("cost", "Cost"), ("judge", "Judge"), ("cases", "Cases"), ("config", "Config"),
)
# Shown after "Judge" when the run has embeddings.json.
EMBEDDINGS_NAV = ("embeddings", "Embeddings")


def _page(run: RunDir, table: CaseTable) -> tuple[str, str]:
    """The page around its detail blocks: (before, after)."""
    from evalkit.report.html.page import page_context, render_page

    view = build_run_view(run, table)
    nav = NAV if view.embeddings is None else (*NAV[:6], EMBEDDINGS_NAV, *NAV[6:])
    page = page_context(f"Run {view.run_id}", run_ids=[view.run_id], created_at=view.created_at, nav=nav,
                        subtitle=f"{view.n_cases:,} cases · K = {view.k}")
    html = render_page("run.html.j2", page=page, run=view, case_details=_DETAILS_SLOT)
    before, slot, after = html.partition(_DETAILS_SLOT)
    if not slot or _DETAILS_SLOT in after:
        raise RuntimeError("run.html.j2 must place `case_details` exactly once")
    return before, after


def render_run_report(run: RunDir, *, max_cases: int | None = None) -> str:
    """The report page of `run` as an HTML string (`max_cases`: cap the case table at the
    lowest case indexes; None shows every case)."""
    with read_case_table(run, max_cases=max_cases) as table:
        before, after = _page(run, table)
        return before + b"".join(table.detail_pieces()).decode("ascii") + after


def write_run_report(
    run: str | RunDir, *, results_dir: str | Path = "results", output: str | Path | None = None, max_cases: int | None = None
) -> Path:
    """Write the HTML report of one run, streaming the case details from a temp file. The run
    folder's own copy is written as its other files are (`RunDir.write_file`), and kept in
    step with metrics.json by the derive step.

    Args:
        run: a run id under `results_dir`, or an opened RunDir.
        results_dir: the folder holding run folders (ignored when `run` is a RunDir).
        output: the file to write (default: report.html in the run folder).
        max_cases: keep only this many cases in the per-case table, the lowest case indexes
            (default: every case; the page stays fast at 100,000).

    Returns:
        The path written.

    Raises:
        evalkit.errors.RunNotFound: no such run; InputError: unreadable config or metrics.
    """
    from evalkit.store.atomic import write_atomic

    run_dir = run if isinstance(run, RunDir) else RunDir.open(Path(results_dir), run)
    with read_case_table(run_dir, max_cases=max_cases) as table:
        before, after = _page(run_dir, table)

        def pieces() -> Iterator[bytes]:
            yield before.encode("utf-8")
            yield from table.detail_pieces()
            yield after.encode("utf-8")

        if output is None:
            return run_dir.write_file(REPORT_FILE, pieces())
        return write_atomic(Path(output), pieces())
