"""The trend page (`evalkit report --trend`): every run under results/ over time.

Reads each run's config.json and metrics.json only (never results.jsonl), so it stays fast
over hundreds of runs: from the results database (`store.resultsdb.fresh_runs`) for each
run it holds in step with its folder, else from the folder. Runs are ordered by config.json's
`created_at` (`store.list_runs`' order, oldest first). Runs on different eval set versions (metrics.json `dataset_version`:
the labels scored, which a re-scoring with other labels changes) go on separate series:
their numbers measure different questions or labels. Between consecutive runs of one series, the flattened configs are diffed (`compare.config_diff`, which already
drops run ids and timestamps) and also without the keys of `TREND_CONFIG_IGNORED`, with the
index stats as `index.*` keys as compare_runs shows them (`gate.invariants.corpus_of`:
an edited or added note changes the index version and counts); a run whose config or
index differs from its predecessor's gets a marker labelled with the changed keys. The
index's coverage (seed 000: `no_chunks_generated_rate`, tracked over runs, "trending toward
~0") is charted with the metrics.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from evalkit.compare.conditions import CONFIG_DIFF_IGNORED, config_diff
from evalkit.errors import InputError
from evalkit.gate.invariants import corpus_of, relabelled_from
from evalkit.metrics.registry import label_of, shown_in
from evalkit.store.resultsdb import fresh_runs
from evalkit.store.runlog import Cell, Met, Rec
from evalkit.store.runs import CONFIG_FILE, METRICS_FILE, RunDir, list_runs

__all__ = [
    "TREND_CONFIG_IGNORED", "TREND_METRICS", "TREND_NAV", "condense_keys", "marker_label", "trend_charts", "trend_markers",
    "trend_view", "write_trend_report",
]

# Keys left out of the trend's config diff on top of CONFIG_DIFF_IGNORED (run id,
# created_at, config_hash, session timings): they differ between runs of one system.
TREND_CONFIG_IGNORED = (
    "git", "git.*",                      # the evalkit checkout's commit and dirty flag
    "eval_set", "eval_set.*", Met.EVAL_SET_COMMIT_HASH, "settings.eval_set",  # the series says which eval set
    "sessions.*",                        # resume bookkeeping: start, wall time, probe, pending cases
)
# (key, title, path in aggregate_metrics, unit) of each chart, in page order: the registry's
# `trend` metrics by their names (`recall_any`), each titled by its registry label (at "K":
# runs differ in K; the table has a K column), then what the registry does not hold.
TREND_METRICS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    *((m.name, label_of(m.key), (m.key,), "rate" if m.scale == 1.0 else "score") for m in shown_in("trend")),
    ("latency_p95", "Latency p95", ("latency", "p95_ms"), "ms"),
    ("cost", "Judge cost", ("cost", "judge_total_usd"), "usd"),
    ("no_chunks", "Notes with no chunks (index)", (Rec.INDEXING_COVERAGE, "no_chunks_generated_rate"), "rate"),
)
# Section anchors of the page (base.html.j2's nav).
TREND_NAV = (("charts", "Charts"), ("runs", "Runs"), ("series", "Eval set versions"), ("about", "How to read"))
# A marker's label: at most this many changed keys, then "+N".
MARKER_KEYS = 2
_KEY_CHARS = 32
# Sections that repeat the same option (`hashed.k`, `settings.k`, `target.params.x`).
_SECTIONS = ("hashed.", "settings.", "target.")


def condense_keys(keys: list[str]) -> list[str]:
    """Changed keys for a label: `hashed.`/`settings.`/`target.` prefixes dropped, duplicates
    merged, first-seen order (`hashed.params.x`, `settings.params.x` -> `params.x`)."""
    out: list[str] = []
    for key in keys:
        short = next((key[len(p):] for p in _SECTIONS if key.startswith(p)), key)
        if short not in out:
            out.append(short)
    return out


def marker_label(keys: list[str]) -> str:
    """The marker's text: the first MARKER_KEYS condensed keys (each cut at 32 characters),
    then "+N" for the rest: `params.abstain_threshold, k +3`."""
    short = condense_keys(keys)
    shown = [k if len(k) <= _KEY_CHARS else k[: _KEY_CHARS - 1] + "…" for k in short[:MARKER_KEYS]]
    rest = len(short) - len(shown)
    return ", ".join(shown) + (f" +{rest}" if rest > 0 else "")


def _trend_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, list[Any]]:
    return {
        key: pair for key, pair in config_diff(a, b).items()
        if not any(fnmatch.fnmatchcase(key, p) for p in TREND_CONFIG_IGNORED)
    }


def _dig(obj: Any, path: tuple[str, ...]) -> float | None:
    for part in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return float(obj) if isinstance(obj, int | float) and not isinstance(obj, bool) else None


def _eval_set_version(config: Mapping[str, Any], metrics: Mapping[str, Any]) -> str:
    # metrics.json's first: the labels the numbers were scored with (a re-scoring with other
    # labels changes it, and its run then measures something else than its series).
    eval_set = config.get("eval_set") if isinstance(config.get("eval_set"), Mapping) else {}
    version = metrics.get("dataset_version") or config.get("dataset_version") or eval_set.get("version")
    return str(version) if version else "unknown"


def _eval_set_label(version: str, config: Mapping[str, Any], metrics: Mapping[str, Any]) -> str:
    eval_set = config.get("eval_set") if isinstance(config.get("eval_set"), Mapping) else {}
    paths = relabelled_from(metrics) or eval_set.get("paths") or []
    names = [os.path.basename(str(p)) for p in paths]
    n = eval_set.get("n_cases")
    detail = ", ".join(x for x in (f"{n} cases" if isinstance(n, int) else "", " + ".join(names)) if x)
    short = version[:12] if version != "unknown" else "unknown version"
    return f"eval set {short}" + (f" ({detail})" if detail else "")


def _created_at(config: Mapping[str, Any], folder: Path) -> str:
    created = config.get("created_at")
    if isinstance(created, str) and created:
        return created
    return datetime.fromtimestamp(folder.stat().st_mtime, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _commit(config: Mapping[str, Any]) -> str | None:
    git = config.get("git")
    if isinstance(git, Mapping) and git.get("commit"):
        return str(git["commit"])[:10] + ("-dirty" if git.get("dirty") else "")
    return None


def _run_status(config: Mapping[str, Any], metrics: Mapping[str, Any], agg: Mapping[str, Any]) -> tuple[str, str | None]:
    """("ok" | "partial" | "failed", why). Failed: the target failed every case, or no charted
    metric has a value; partial: fewer cases than the eval set (--limit, a selection). Both
    are drawn apart from the lines: their numbers are not the system's on the eval set."""
    ops = agg.get(Cell.OPERATIONAL) if isinstance(agg.get(Cell.OPERATIONAL), Mapping) else {}
    total = metrics.get(Met.TOTAL_TESTS) if isinstance(metrics.get(Met.TOTAL_TESTS), int) else agg.get("n_cases")
    n_errors = ops.get("n_errors")
    if isinstance(total, int) and isinstance(n_errors, int) and total > 0 and n_errors >= total:
        return "failed", f"the target failed every case ({n_errors} of {total})"
    if all(_dig(agg, path) is None for _, _, path, _ in TREND_METRICS):
        return "failed", "no metric has a value"
    eval_set = config.get("eval_set") if isinstance(config.get("eval_set"), Mapping) else {}
    size = eval_set.get("n_cases")
    if isinstance(total, int) and isinstance(size, int) and total < size:
        limit = (config.get("settings") or {}).get("limit") if isinstance(config.get("settings"), Mapping) else None
        return "partial", f"{total} of {size} cases" + (f" (--limit {limit})" if isinstance(limit, int) else "")
    return "ok", None


def _href(folder: Path, out_dir: Path | None) -> str | None:
    page = folder / "report.html"
    if not page.is_file():
        return None
    rel = os.path.relpath(page, out_dir) if out_dir is not None else f"{folder.name}/report.html"
    return "/".join(quote(part) for part in Path(rel).parts)


def trend_view(results_dir: str | Path, *, output_dir: str | Path | None = None) -> dict[str, Any]:
    """The template context of the trend page over every run under `results_dir`.

    Args:
        results_dir: the folder of run folders.
        output_dir: where the page is written, for relative links to each run's
            `report.html` (default: `results_dir`, so links read `<run_id>/report.html`).

    Returns:
        {"runs": [...] oldest first, "series": [...] in order of first run, "metrics": the
        chart list, "skipped": [{run_id, reason}], "results_dir"}. Each run has its values,
        its series, its `status` ("ok", "partial" or "failed", see `_run_status`) and
        `status_note`, the config keys that changed since the previous run of its series and
        the marker label, and `href` (None when the run has no report.html).
    """
    root = Path(results_dir)
    out_dir = Path(output_dir) if output_dir is not None else root
    runs: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    series: dict[str, dict[str, Any]] = {}
    last_config: dict[str, Mapping[str, Any]] = {}
    stored = fresh_runs(root)  # the results database's copy of each run it holds in step, if there is one
    for run_id in reversed(list_runs(root)):
        folder = root / run_id
        if run_id in stored:
            config, metrics = stored[run_id]
        else:
            if not (folder / CONFIG_FILE).exists():
                skipped.append({"run_id": run_id, "reason": f"no {CONFIG_FILE} (not a run folder)"})
                continue
            if not (folder / METRICS_FILE).exists():
                skipped.append({"run_id": run_id, "reason": f"no {METRICS_FILE} yet (unfinished or interrupted run; resume it with run_eval.py --resume)"})
                continue
            try:
                run = RunDir(folder)  # the run folder's one reader: bounded in size and depth
                config, metrics = run.read_config(), run.read_metrics()
            except InputError as e:  # unreadable, not JSON, not UTF-8 or too deep: the file and the line say which
                skipped.append({"run_id": run_id, "reason": f"unreadable config.json or metrics.json: {e}"})
                continue
        if not isinstance(config, Mapping) or not isinstance(metrics, Mapping):
            skipped.append({"run_id": run_id, "reason": "config.json or metrics.json is not a JSON object"})
            continue
        version = _eval_set_version(config, metrics)
        if version not in series:
            series[version] = {
                "index": len(series), "version": version, "label": _eval_set_label(version, config, metrics),
                "short_label": f"{len(series) + 1}: eval set {version[:8]}", "run_ids": [],
            }
        s = series[version]
        agg = metrics.get(Met.AGGREGATE) if isinstance(metrics.get(Met.AGGREGATE), Mapping) else {}
        prev = s["run_ids"][-1] if s["run_ids"] else None
        seen = {**config, "index": corpus_of(metrics)}  # the config and the index it searched
        diff = _trend_diff(last_config[version], seen) if prev is not None else {}
        keys = list(diff)
        status, status_note = _run_status(config, metrics, agg)
        runs.append({
            "run_id": run_id,
            "x": len(runs),
            "created_at": _created_at(config, folder),
            "series": s["index"],
            "eval_set": version,
            "k": agg.get("k") if isinstance(agg.get("k"), int) else metrics.get("k"),
            "n_cases": metrics.get(Met.TOTAL_TESTS),
            "commit": _commit(config),
            "values": {key: _dig(agg, path) for key, _, path, _ in TREND_METRICS},
            "href": _href(folder, out_dir),
            "status": status,  # "ok" runs are on the lines; "partial" and "failed" are drawn apart
            "status_note": status_note,
            "previous": prev,
            "changes": [{"key": k, "a": v[0], "b": v[1]} for k, v in diff.items()],
            "changed_keys": condense_keys(keys),
            "marker": marker_label(keys) if keys else None,
            # the first run of a series that is not the first series: the eval set changed
            "new_eval_set": prev is None and len(runs) > 0,
        })
        s["run_ids"].append(run_id)
        last_config[version] = seen
    return {
        "results_dir": str(root),
        "runs": runs,
        "series": list(series.values()),
        "metrics": [{"key": key, "title": title, "unit": unit} for key, title, _, unit in TREND_METRICS],
        "skipped": skipped,
        "ignored_keys": [*CONFIG_DIFF_IGNORED, *TREND_CONFIG_IGNORED],
    }


def _unit_fmt(unit: str):
    if unit == "ms":
        return lambda v: f"{v:,.1f} ms" if abs(v) < 100 else f"{v:,.0f} ms"
    if unit == "usd":
        return lambda v: f"${v:,.4f}"
    return lambda v: f"{v:.2f}"


def trend_markers(view: dict[str, Any]) -> list[tuple[int, str]]:
    """(x, label) of every vertical marker: a config change within a series ("Δ keys") or
    the first run on another eval set version ("eval set <version>")."""
    out: list[tuple[int, str]] = []
    for run in view["runs"]:
        if run["new_eval_set"]:
            out.append((run["x"], f"eval set {run['eval_set'][:8]}"))
        elif run["marker"]:
            out.append((run["x"], f"Δ {run['marker']}"))
    return out


def trend_charts(view: dict[str, Any]) -> dict[str, Any]:
    """One inline SVG line chart per metric of `TREND_METRICS`, from a `trend_view`: one
    series per eval set version (its line joins its own runs, skipping runs on other
    versions) and the markers of `trend_markers`. Partial and failed runs are not on the
    lines: they sit in a strip under the plot, their value in the tooltip. None for a
    metric no run has."""
    from evalkit.report.html.charts import line_chart

    runs = view["runs"]
    x_labels = [r["run_id"] for r in runs]
    markers = trend_markers(view)
    ranges = {"rate": (0.0, 1.0), "score": (0.0, 5.0), "ms": (0.0, None), "usd": (0.0, None)}
    charts: dict[str, Any] = {}
    for metric in view["metrics"]:
        key, unit = metric["key"], metric["unit"]
        series = {
            s["short_label"]: [r["values"][key] if r["series"] == s["index"] else None for r in runs]
            for s in view["series"]
        }
        if not any(v is not None for values in series.values() for v in values):
            charts[key] = None
            continue
        lo, hi = ranges[unit]
        fmt = _unit_fmt(unit)
        apart = [
            (r["x"], r["status"], f"{r['status']} run, {r['status_note']}; {metric['title']}: "
             + (fmt(r["values"][key]) if r["values"][key] is not None else "—"))
            for r in runs if r["status"] != "ok"
        ]
        charts[key] = line_chart(x_labels, series, title=metric["title"], markers=markers, set_apart=apart, y_min=lo, y_max=hi,
                                 width=640, fmt=fmt, join_gaps=True)
    return charts


def write_trend_report(results_dir: str | Path = "results", output: str | Path | None = None) -> Path:
    """Write the trend page of every run under `results_dir`.

    Args:
        results_dir: the folder of run folders.
        output: the file to write; default `<results_dir>/index.html`.

    Returns:
        The path written.

    Raises:
        InputError: `results_dir` is not a folder.
    """
    from evalkit.errors import Problem
    from evalkit.report.html.page import page_context, render_page, write_page

    root = Path(results_dir)
    if not root.is_dir():
        raise InputError(Problem(f"{root}: results folder not found", field="--results-dir"))
    path = Path(output) if output is not None else root / "index.html"
    view = trend_view(root, output_dir=path.resolve().parent)
    charts = trend_charts(view)
    page = page_context(
        f"evalkit runs in {root.name or root}", run_ids=[], nav=TREND_NAV,
        subtitle=f"{len(view['runs'])} run(s) on {len(view['series'])} eval set version(s)",
    )
    return write_page(path, render_page("trend.html.j2", page=page, charts=charts, **view))
