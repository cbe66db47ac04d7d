"""The metric registry walked through every consumer (issue 25 item 1, "a test walks the
registry through every consumer").

For each entry of `evalkit.metrics.registry.METRICS`: a threshold-able metric is accepted by
`--threshold` (and found by the threshold check), a compared one by `--expect-order` and by
compare's `--metric`, a gated one by the gate; and every compared metric is shown with
`label_of(key, K)` by a comparison and by a run summary, each rendered to the terminal, to
markdown and to HTML. A planted unknown name is refused by every parser, so the walk can fail.

The drift issue 25 lists, each now a case of the walk: `--expect-order …:must_include_recall`
refused though compare reports it; `answer_relevance_avg` missing from compare's order; the
HTML's "Recency pass" against the terminal's "Recency pass rate"; one number under five names
(`recall_any`, `recall_at_k`, `recall_at_k_avg`, `Success@5`, "Recall@5").
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console
from typer.testing import CliRunner

from evalkit.compare import compare_runs
from evalkit.compare.compute import _METRIC_ORDER, select_metrics  # noqa: PLC2701 - compare's row order
from evalkit.errors import BadConfig, InputError
from evalkit.gate.floors import parse_thresholds, threshold_check
from evalkit.gate.regressions import check_regressions, gate_result
from evalkit.gate.thresholds import Thresholds
from evalkit.metrics.registry import METRICS, SUMMARY_KEYS, Metric, label_of, short_label_of
from evalkit.run.matrix import parse_order_spec, resolve_metric

K = 5
UNKNOWN = "recall_at_k_avgg"  # planted: one letter off a real key, so close-match hints do not accept it
ALL = pytest.mark.parametrize("metric", METRICS, ids=lambda m: m.key)
COMPARED = [m for m in METRICS if m.compared]


def _value(metric: Metric, side: str) -> float:
    # On the metric's own scale; run b differs from run a on every metric.
    return metric.scale * (0.6 if side == "a" else 0.4)


def _metrics_json(side: str, run_id: str, values: dict[str, float] | None = None) -> dict[str, Any]:
    """A metrics.json whose overall cell holds every registry metric (n = 4), where it lives."""
    agg: dict[str, Any] = {"k": K, "n": {}, "at_k": {str(K): {"n": 4, "n_by_metric": {}}},
                           "operational_metrics": {"n": 4}, "n_cases": 4}
    for m in METRICS:
        v = (values or {}).get(m.key, _value(m, side))
        if m.block == "operational_metrics":
            agg["operational_metrics"][m.key] = v
            continue
        agg[m.key] = v
        agg["n"][m.key] = 4
        if m.at_k is not None:
            agg["at_k"][str(K)][m.at_k] = v
            agg["at_k"][str(K)]["n_by_metric"][m.at_k] = 4
    return {"run_id": run_id, "ks": [K], "total_tests": 4, "answerable_tests": 4, "unanswerable_tests": 0,
            "aggregate_metrics": agg}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two bare metrics.json files (compare's `metrics` sources): a baseline and a new run."""
    root = tmp_path_factory.mktemp("walk")
    paths = []
    for side, run_id in (("a", "base"), ("b", "new")):
        path = root / f"{run_id}.json"
        path.write_bytes(orjson.dumps(_metrics_json(side, run_id)))
        paths.append(path)
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def comparison(pair):
    return compare_runs(*pair, resamples=200)


# ---------------------------------------------------------------- the names each door accepts


@ALL
def test_threshold_accepts_every_threshold_able_metric(metric: Metric) -> None:
    # `threshold` is what --threshold accepts, both ways (the parser has no list of its own).
    if not metric.threshold:
        with pytest.raises(ValueError, match="unknown metric"):
            parse_thresholds([f"{metric.key}=0.5"], [K])
        return
    t = metric.scale / 2
    assert parse_thresholds([f"{metric.key}={t:g}"], [K]) == {metric.key: t}
    # and the check finds it where the metric lives (a cell's operational block included)
    check = threshold_check(_metrics_json("a", "r"), {metric.key: t})
    assert [c["metric"] for c in check["checked"]] == [metric.key] and not check["not_measured"]
    if metric.at_k is not None:  # the @K forms, in our vocabulary and in ir_measures'
        assert parse_thresholds([f"{metric.at_k}@{K}=0.5"], [K]) == {f"{metric.at_k}@{K}": 0.5}
        if metric.ir_measure is not None:
            assert parse_thresholds([f"{metric.ir_measure}@{K}=0.5"], [K]) == {f"{metric.at_k}@{K}": 0.5}


@ALL
def test_expect_order_accepts_every_compared_metric(metric: Metric) -> None:
    if not metric.compared:  # compare has no row for it, so no order can be checked
        with pytest.raises(BadConfig, match="unknown metric"):
            resolve_metric(metric.key, [K])
        return
    spec = parse_order_spec(f"fast<=thorough:{metric.key}")
    row = (metric.at_k, K) if metric.at_k is not None else (metric.key, None)
    assert resolve_metric(spec.metric, [K]) == row
    if metric.at_k is not None:
        assert resolve_metric(f"{metric.at_k}@{K}", [K]) == row
        if metric.ir_measure is not None:
            assert resolve_metric(f"{metric.ir_measure}@{K}", [K]) == row


@ALL
def test_compare_reports_and_selects_every_compared_metric(metric: Metric, comparison) -> None:
    if not metric.compared:
        assert all(r.metric != metric.key for r in comparison.deltas)
        return
    name = metric.at_k or metric.key
    assert name in _METRIC_ORDER  # a place in compare's order, so a direction and a rank
    (row,) = [r for r in comparison.deltas if r.scope == "overall" and r.metric == name]
    assert row.direction == f"{metric.direction}_is_better"
    names = [metric.key, name] + ([f"{name}@{K}"] if metric.at_k else [])
    names += [f"{metric.ir_measure}@{K}"] if metric.ir_measure else []
    for given in names:
        picked = select_metrics(comparison, [given])
        assert {(r.metric, r.k) for r in picked.deltas} == {(row.metric, row.k)}, given


@ALL
def test_the_gate_watches_every_gated_metric(metric: Metric) -> None:
    if metric.gated is None:
        assert metric.key not in gate_result(_metrics_json("a", "a"), _metrics_json("a", "b"))["compared"]
        return
    limit = getattr(Thresholds(), metric.gated)
    worse = (-1 if metric.direction == "higher" else 1) * 2 * limit
    base = _metrics_json("a", "base")
    new = _metrics_json("a", "new", {metric.key: _value(metric, "a") + worse})
    assert [r.metric for r in check_regressions(base, new)] == [metric.key]
    assert metric.key in gate_result(base, new)["compared"]
    # within its threshold: no regression
    assert check_regressions(base, _metrics_json("a", "new", {metric.key: _value(metric, "a") + worse / 4})) == []


def test_every_door_refuses_a_planted_unknown_name(comparison) -> None:
    with pytest.raises(ValueError, match=f"unknown metric {UNKNOWN!r}"):
        parse_thresholds([f"{UNKNOWN}=0.5"], [K])
    with pytest.raises(BadConfig, match="unknown metric"):
        resolve_metric(parse_order_spec(f"a<=b:{UNKNOWN}").metric, [K])
    with pytest.raises(InputError, match=f"no row for {UNKNOWN!r}"):
        select_metrics(comparison, [UNKNOWN])
    with pytest.raises(TypeError):
        Thresholds(**{UNKNOWN: 0.1})


def test_the_cli_doors_take_every_compared_metric_and_every_gate_flag(pair) -> None:
    # compare's --metric with every compared metrics.json key, and every --regression-threshold-*
    # flag of the gated metrics, on the real command line.
    from evalkit.cli.main import app

    args = ["compare", str(pair[0]), str(pair[1]), "--format", "json", "--allow-regressions"]
    for m in COMPARED:
        args += ["--metric", m.key]
    for m in METRICS:
        if m.gated is not None:
            args += [f"--regression-threshold-{m.gated.replace('_', '-')}", "1"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    shown = {r["metric"] for r in json.loads(res.stdout)["deltas"]}
    assert shown == {m.at_k or m.key for m in COMPARED}
    bad = CliRunner().invoke(app, ["compare", str(pair[0]), str(pair[1]), "--format", "json", "--metric", UNKNOWN])
    assert bad.exit_code == 2


def test_run_settings_have_a_gate_threshold_for_every_gated_metric() -> None:
    from evalkit.config import RunSettings

    gated = {m.gated for m in METRICS if m.gated is not None}
    # Thresholds' float fields are the nine; `metrics`, `by`, `min_slice_n` and `preset` say
    # which other metrics are gated and where (issue 30).
    assert gated == {name for name, f in Thresholds.__dataclass_fields__.items() if f.type == "float"}
    assert {f"regression_threshold_{g}" for g in gated} <= set(RunSettings.model_fields)


# ---------------------------------------------------------------- one label, every renderer


def _terminal(render) -> str:
    out = io.StringIO()
    render(Console(file=out, width=400, color_system=None, force_terminal=False))
    return out.getvalue()


def test_a_comparison_shows_every_compared_metric_with_its_label_in_every_format(pair, comparison, tmp_path) -> None:
    from evalkit.report.compare import print_comparison, render_markdown
    from evalkit.report.html.compare import write_compare_report

    terminal = _terminal(lambda console: print_comparison(comparison, console))
    markdown = render_markdown(comparison)
    page = write_compare_report(*pair, output=tmp_path / "compare.html", resamples=200).read_text(encoding="utf-8")
    for m in COMPARED:
        label = label_of(m.key, K)
        assert label == label_of(m.at_k or m.key, K if m.at_k else None)  # the row's name gives the same label
        assert f"\n{label} " in terminal, label  # the Overall table's first column
        assert f"\n| {label} | " in markdown, label  # "All overall deltas"
        assert f"<td>{html.escape(label)}</td><td>overall</td>" in page, label  # "All deltas"


def test_a_run_summary_shows_every_compared_metric_with_its_label_in_every_format(tmp_path) -> None:
    from evalkit.report.html.run import render_run_report
    from evalkit.report.run import print_run_summary
    from evalkit.report.summary_md import render_summary
    from evalkit.store.runs import RunDir

    metrics = _metrics_json("a", "r1")
    config = {"run_id": "r1", "judge": {"provider": None}, "settings": {"k": [K]}}
    folder = tmp_path / "r1"
    folder.mkdir()
    (folder / "metrics.json").write_bytes(orjson.dumps(metrics))
    (folder / "config.json").write_bytes(orjson.dumps(config))
    (folder / "results.jsonl").write_bytes(b"")
    terminal = _terminal(lambda console: print_run_summary(metrics, folder, judge=config["judge"], console=console))
    markdown = render_summary(metrics, config)
    page = render_run_report(RunDir.open(tmp_path, "r1"))
    assert set(SUMMARY_KEYS) == {m.key for m in COMPARED}
    for m in COMPARED:
        label = label_of(m.key, K)
        assert f"│ {label} " in terminal, label
        assert f"\n| {label} | " in markdown, label
        assert f"<tr><td>{html.escape(label)}</td>" in page, label


def test_the_per_k_and_slice_tables_name_metrics_by_the_registry() -> None:
    # The per-K tables (HTML, score_retrieval's terminal table) label the @K metrics at "K";
    # the by-slice tables (summary.md, HTML, score_* terminal, compare's per-domain) by their
    # short labels; none keeps a label of its own.
    from evalkit.report.html.run import AT_K_COLUMNS, METRIC_COLUMNS
    from evalkit.report.scoring import _AT_K, _SLICE_ABSTENTION, _SLICE_RETRIEVAL  # noqa: PLC2701
    from evalkit.report.summary_md import _CATEGORY_COLUMNS  # noqa: PLC2701

    at_k = {m.at_k: label_of(m.key) for m in METRICS if m.at_k is not None}
    assert dict(AT_K_COLUMNS) == dict(_AT_K) == at_k
    assert all(label == short_label_of(key) for key, label, _ in METRIC_COLUMNS)
    assert all(label.replace("{k}", "K") == short_label_of(key) for label, key in _CATEGORY_COLUMNS)
    for key in (*_SLICE_RETRIEVAL, *_SLICE_ABSTENTION):
        assert key in SUMMARY_KEYS


def test_label_of_never_hides_a_name_it_does_not_know() -> None:
    # A number the registry cannot name (latency, cost) keeps its key, with its K.
    assert label_of("latency_p50_ms") == "latency_p50_ms" and label_of(UNKNOWN, 5) == f"{UNKNOWN}@5"
    # One label for the number that carried five names.
    assert label_of("recall_at_k_avg", 5) == label_of("recall_any", 5) == "Recall@5 (any)"
