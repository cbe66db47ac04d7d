"""The HTML report of one run: a view model read from the run folder, rendered by run.html.j2.

Numbers come from metrics.json as the scoring scripts wrote them; results.jsonl is streamed
once for the per-case table (at most `MAX_CASES` rows, the lowest case indexes, kept in a
bounded heap) and nothing else is recomputed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.metrics.registry import HEADLINE_KEYS, by_key, label_of, short_label_of
from evalkit.report.html.charts import bar, bar_chart
from evalkit.report.run import metric_value, summary_keys
from evalkit.store.runs import RunDir

__all__ = ["MAX_CASES", "RunView", "build_run_view", "render_run_report", "write_run_report"]

MAX_CASES = 5000
REPORT_FILE = "report.html"

# (metrics.json key, column label, full-bar value): rates run to 1, judge scores to 5.
# Headers are the registry's short labels (summary.md's by-category table uses the same).
METRIC_COLUMNS: tuple[tuple[str, str, float], ...] = tuple(
    (key, short_label_of(key), by_key(key).scale)  # type: ignore[union-attr]
    for key in (
        "recall_at_k_avg", "recall_all_avg", "recall_frac_avg", "mrr_avg", "ndcg_at_k_avg", "attribution_hit_rate",
        "recency_pass_rate", "groundedness_avg", "correctness_avg", "abstention_accuracy",
        "hallucination_rate_unanswerable", "false_abstention_rate", "error_rate",
    )
)
# The per-K table: (@K metric name, column label), the headline @K metrics in the summaries'
# order, labelled by the registry at K "K" (each row says its K).
AT_K_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (by_key(key).at_k, label_of(key)) for key in HEADLINE_KEYS  # type: ignore[union-attr,misc]
)
# The per-case table's metric columns (CaseView's recall, mrr, ndcg, groundedness and
# correctness, in run.html.j2's order), headed by their metrics' short labels at the run's K.
CASE_COLUMNS = ("recall_at_k_avg", "mrr_avg", "ndcg_at_k_avg", "groundedness_avg", "correctness_avg")
GROUPS = (("category", "Category"), ("tag", "Tag"), ("difficulty", "Difficulty"), ("domain", "Domain"), ("answerable", "Answerable"), ("language", "Language"), ("scenario", "Scenario"))
OUTCOMES = ("hit", "miss", "unanswerable", "unlabeled", "error")


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


@dataclass(slots=True)
class ChunkView:
    rank: int | None
    rel_path: str
    heading_path: str
    text: str
    text_truncated: bool
    score: float | None
    first_gold: bool


@dataclass(slots=True)
class CaseView:
    index: int
    id: str
    question: str
    category: str
    difficulty: str
    domain: str
    tags: list[str]
    answerable: bool | None
    outcome: str
    first_rank: int | None
    recall: float | None
    mrr: float | None
    ndcg: float | None
    groundedness: float | None
    correctness: float | None
    abstained: bool | None
    error: str | None
    latency_ms: float | None
    answer: str
    answer_truncated: bool
    chunks: list[ChunkView]
    references: list[str]
    gold: list[str]
    judge_notes: list[str]


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
    case_columns: list[str]  # the per-case table's metric headers (CASE_COLUMNS' labels)
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
    cases: list[CaseView]
    cases_total: int
    cases_capped: bool
    categories: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    metrics_missing: bool = False


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _text(v: Any) -> str:
    return "" if v is None else str(v)


# The headline rows shown big at the top, as cards.
_CARD_KEYS = {
    "recall_at_k_avg", "mrr_avg", "ndcg_at_k_avg", "groundedness_avg", "correctness_avg", "abstention_accuracy",
    "hallucination_rate_unanswerable", "error_rate",
}


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
    return rows


def _headline(agg: Mapping[str, Any], judge_heuristic: bool) -> list[tuple[str, Cell, str]]:
    return [row for _, row in _headline_rows(agg, judge_heuristic)]


def _at_k(agg: Mapping[str, Any]) -> list[tuple[int, dict[str, Cell]]]:
    out = []
    for k, cell in (agg.get("at_k") or {}).items():
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


def _config_rows(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    target = config.get("target") or {}
    rows.append(("target", " ".join(f"{k}={v}" for k, v in target.items() if v not in (None, {}, []))))
    es = config.get("eval_set") or {}
    paths = es.get("paths") or []
    if paths:
        rows.append(("eval set", ", ".join(map(str, paths)) + f" ({es.get('n_selected', '?')} of {es.get('n_cases', '?')} cases)"))
    if config.get("dataset_version"):
        rows.append(("dataset version", str(config["dataset_version"])[:16]))
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


def _anchor(item: Mapping[str, Any]) -> str:
    path, heading = _text(item.get("rel_path")), _text(item.get("heading_path"))
    return f"{path} › {heading}" if heading else path or _text(item.get("chunk_id"))


def _case_view(record: Mapping[str, Any]) -> CaseView:
    case = record.get("case") or {}
    rm = record.get("retrieval_metrics") or {}
    error = record.get("error")
    status = rm.get("status")
    recall = _num(rm.get("recall_at_k"))
    if error:
        outcome = "error"
    elif status in ("unanswerable", "unlabeled"):
        outcome = status
    elif recall is None:
        outcome = "unlabeled"
    else:
        outcome = "hit" if recall > 0 else "miss"
    first = _int(rm.get("first_match_rank"))
    chunks = [
        ChunkView(
            rank=_int(c.get("rank")), rel_path=_text(c.get("rel_path")), heading_path=_text(c.get("heading_path")),
            text=_text(c.get("text")), text_truncated=bool(c.get("text_truncated")), score=_num(c.get("score_final")),
            first_gold=first is not None and _int(c.get("rank")) == first,
        )
        for c in record.get("retrieved_chunks") or []
        if isinstance(c, Mapping)
    ]
    g, c = record.get("groundedness") or {}, record.get("correctness") or {}
    notes = [f"{j.get('kind', 'judge')}: {j.get('reason') or j.get('detail') or ''}".strip() for j in record.get("judge_errors") or [] if isinstance(j, Mapping)]
    err_text = None
    if error:
        err_text = _text(error.get("kind")) if isinstance(error, Mapping) else _text(error)
        detail = error.get("detail") if isinstance(error, Mapping) else None
        if detail:
            err_text = f"{err_text}: {detail}"
    return CaseView(
        index=_int(record.get("case_index")) or 0,
        # A --trials run has one row per answer: the trial tells them apart.
        id=_text(record.get("test_case_id") or case.get("id"))
        + (f" (trial {record['trial']})" if type(record.get("trial")) is int else ""),
        question=_text(record.get("question") or case.get("question")),
        category=_text(case.get("category")),
        difficulty=_text(case.get("difficulty")),
        domain=_text(case.get("domain")),
        tags=[str(t) for t in case.get("tags") or []],
        answerable=case.get("answerable") if isinstance(case.get("answerable"), bool) else None,
        outcome=outcome,
        first_rank=first,
        recall=recall,
        mrr=_num(rm.get("mrr")),
        ndcg=_num(rm.get("ndcg_at_k")),
        groundedness=_num(g.get("score")) if isinstance(g, Mapping) else None,
        correctness=_num(c.get("score")) if isinstance(c, Mapping) else None,
        abstained=(record.get("abstention") or {}).get("abstained"),
        error=err_text,
        latency_ms=_num((record.get("latency") or {}).get("total_ms")),
        answer=_text(record.get("answer")),
        answer_truncated=bool(record.get("answer_truncated")),
        chunks=chunks,
        references=[_anchor(r) for r in record.get("references") or [] if isinstance(r, Mapping)],
        gold=[_anchor(s) for s in case.get("gold_supports") or [] if isinstance(s, Mapping)],
        judge_notes=notes,
    )


def _read_cases(run: RunDir, max_cases: int) -> tuple[list[CaseView], int]:
    """The `max_cases` records of lowest case_index, in that order, and the record count.
    Streams results.jsonl; only the kept records are turned into views."""
    heap: list[tuple[int, int, CaseView]] = []  # (-case_index, seq, view): the root is the largest index kept
    total = 0
    for seq, record in enumerate(run.iter_results()):
        total += 1
        index = _int(record.get("case_index"))
        index = seq if index is None else index
        if len(heap) < max_cases:
            heapq.heappush(heap, (-index, seq, _case_view(record)))
        elif max_cases and -heap[0][0] > index:
            heapq.heapreplace(heap, (-index, seq, _case_view(record)))
    views = [view for _, _, view in sorted(heap, key=lambda t: (-t[0], t[1]))]
    return views, total


def build_run_view(run: RunDir, *, max_cases: int = MAX_CASES) -> RunView:
    """Read a run folder into the report's view model.

    A run without metrics.json (still running, or killed before the end) gets a report
    of its cases and a note instead of the aggregate sections.
    """
    config = run.read_config()
    metrics = run.read_metrics()
    missing = metrics is None
    metrics = metrics or {}
    agg = metrics.get("aggregate_metrics") or {}
    judge_cfg = config.get("judge") or {}
    judge_agg = agg.get("judge") or {}
    k = agg.get("k") if agg.get("k") is not None else ((config.get("settings") or {}).get("k") or [None])[0]
    lat_rows, lat_chart, lat_totals = _latency(agg)
    headline = _headline_rows(agg, bool(judge_cfg.get("heuristic"))) if agg else []
    cases, total = _read_cases(run, max_cases)
    cost = dict(agg.get("cost") or {})
    for key in ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "cache_misses", "unpriced_models"):
        if key in judge_agg:
            cost[key] = judge_agg[key]
    warnings = [str(w.get("message") if isinstance(w, Mapping) else w) for w in metrics.get("warnings") or []]
    return RunView(
        run_id=run.run_id,
        created_at=config.get("created_at"),
        k=k,
        n_cases=int(agg.get("n_cases") or total),
        headline=[row for _, row in headline],
        cards=[row for key, row in headline if key in _CARD_KEYS],
        at_k=_at_k(agg),
        at_k_columns=list(AT_K_COLUMNS),
        case_columns=[short_label_of(key, k) for key in CASE_COLUMNS],
        breakdowns=_breakdowns(metrics, k),
        latency_rows=lat_rows if agg.get("latency") else [],
        latency_chart=lat_chart,
        latency_totals=lat_totals,
        cost=cost,
        judge={**{k_: judge_cfg.get(k_) for k_ in ("provider", "model", "heuristic", "note", "pinned", "temperature", "prompt_version")}, **judge_agg},
        reliability=agg.get("judge_reliability"),
        agreement=agg.get("judge_agreement"),
        config_rows=_config_rows(config),
        warnings=warnings,
        cases=cases,
        cases_total=total,
        cases_capped=total > len(cases),
        categories=sorted({c.category for c in cases if c.category}),
        outcomes=[o for o in OUTCOMES if any(c.outcome == o for c in cases)],
        metrics_missing=missing,
    )


NAV = (
    ("headline", "Headline"), ("at-k", "Per K"), ("breakdowns", "Breakdowns"), ("latency", "Latency"),
    ("cost", "Cost"), ("judge", "Judge"), ("cases", "Cases"), ("config", "Config"),
)


def render_run_report(run: RunDir, *, max_cases: int = MAX_CASES) -> str:
    """The report page of `run` as an HTML string."""
    from evalkit.report.html import page_context, render_page

    view = build_run_view(run, max_cases=max_cases)
    page = page_context(f"Run {view.run_id}", run_ids=[view.run_id], created_at=view.created_at, nav=NAV,
                        subtitle=f"{view.n_cases:,} cases · K = {view.k}")
    return render_page("run.html.j2", page=page, run=view)


def write_run_report(
    run: str | RunDir, *, results_dir: str | Path = "results", output: str | Path | None = None, max_cases: int | None = None
) -> Path:
    """Write the report of `run` (an id under `results_dir`, or a RunDir) to `output`
    (default `<run folder>/report.html`). Returns the path written."""
    from evalkit.report.html import write_page

    run_dir = run if isinstance(run, RunDir) else RunDir.open(Path(results_dir), run)
    html = render_run_report(run_dir, max_cases=MAX_CASES if max_cases is None else max_cases)
    return write_page(Path(output) if output is not None else run_dir.path / REPORT_FILE, html)
