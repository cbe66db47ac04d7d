"""A metric compare_runs reports is accepted everywhere a metric is named (issue 25, the drift
it lists: `--expect-order …:must_include_recall` was refused though compare reports it;
`answer_relevance_avg` had no place in compare's order, hence no direction; the HTML said
"Recency pass" where the terminal says "Recency pass rate").

The lists are read off evalkit.metrics.registry; the last test walks each entry through the
consumers that accept metric names; tests/unit/test_registry_walk.py walks the labels through
every report.
"""

from __future__ import annotations

import pytest

from evalkit.compare.compute import _HIGHER_IS_BETTER, _LOWER_IS_BETTER
from evalkit.gate.floors import parse_thresholds, threshold_metric_names
from evalkit.metrics.aggregate import MEAN_METRICS
from evalkit.metrics.keys import PLAIN_METRIC_ORDER
from evalkit.metrics.retrieval import AT_K_METRICS
from evalkit.run.matrix import resolve_metric


@pytest.mark.parametrize("name", PLAIN_METRIC_ORDER)
def test_every_plain_row_of_compare_is_accepted_by_expect_order_and_has_a_direction(name: str) -> None:
    assert resolve_metric(name, [5, 10]) == (name, None)
    assert (name in _HIGHER_IS_BETTER) != (name in _LOWER_IS_BETTER)


@pytest.mark.parametrize("name", AT_K_METRICS)
def test_every_at_k_metric_is_accepted_at_a_k_the_runs_measured(name: str) -> None:
    assert resolve_metric(f"{name}@10", [5, 10]) == (name, 10)


def test_every_mean_metric_is_a_compare_row_and_a_threshold() -> None:
    # the headline @K means are compare's @K rows; every other mean has its own row
    headline = {
        "recall_at_k_avg", "mrr_avg", "precision_at_k_avg", "ndcg_at_k_avg", "recall_all_avg", "recall_frac_avg", "map_avg",
        "rprec_avg",
    }
    assert [m for m in MEAN_METRICS if m not in headline and m not in PLAIN_METRIC_ORDER] == []
    names = threshold_metric_names()
    assert [m for m in MEAN_METRICS if m not in names] == []
    for name in PLAIN_METRIC_ORDER:
        if name in names:
            assert parse_thresholds([f"{name}=0.5"], [5]) == {name: 0.5}


def test_the_html_case_table_names_recency_as_the_summaries_do() -> None:
    from evalkit.metrics.registry import label_of
    from evalkit.report.html.run import METRIC_COLUMNS

    assert dict((key, label) for key, label, _ in METRIC_COLUMNS)["recency_pass_rate"] == label_of("recency_pass_rate")


@pytest.mark.parametrize("metric", __import__("evalkit.metrics.registry", fromlist=["METRICS"]).METRICS, ids=lambda m: m.key)
def test_the_registry_walks_through_every_consumer(metric) -> None:
    # Each flag of the registry entry shows up in the consumer that reads it: what the
    # matrix, --threshold, the gate, compare's direction and paired tests accept.
    from evalkit.compare.cases import PER_CASE_METRICS
    from evalkit.gate.thresholds import gated_metrics
    from evalkit.metrics.aggregate import SLICE_METRICS

    key = metric.key
    assert (key in MEAN_METRICS) is metric.mean
    assert (key in SLICE_METRICS) is metric.sliced
    assert (key in gated_metrics()) is (metric.gated is not None)
    if metric.threshold:
        assert parse_thresholds([f"{key}={metric.scale / 2:g}"], [5]) == {key: metric.scale / 2}
    if metric.compared:
        name = metric.at_k or key
        assert resolve_metric(key, [5]) == (name, 5 if metric.at_k else None)
        assert (name in _LOWER_IS_BETTER) is (metric.direction == "lower")
        assert (name in _HIGHER_IS_BETTER) is (metric.direction == "higher")
    if metric.per_case is not None:
        assert key in PER_CASE_METRICS


def test_the_terminal_and_the_html_summaries_use_the_registrys_labels() -> None:
    # One label per metric (issue 25): the run summary in the terminal and in the HTML report
    # read evalkit.metrics.registry.label_of; every key both show has the same label in both.
    from evalkit.metrics.registry import METRICS, label_of
    from evalkit.report.html.run import _headline
    from evalkit.report.run import summary_rows

    agg = {m.key: 0.5 for m in METRICS}
    agg.update(k=5, n={m.key: 3 for m in METRICS}, operational_metrics={"n": 3, "error_rate": 0.0})
    metrics = {"aggregate_metrics": agg}
    terminal = [label for label, _, _ in summary_rows(metrics, {"heuristic": True})]
    html = [label for label, _, _ in _headline(agg, True)]
    expected = {label_of(m.key, 5, heuristic=True) for m in METRICS}
    shown_by_both = set(html) & set(terminal)
    assert set(html) <= expected and set(html) == shown_by_both  # the HTML shows nothing the terminal words otherwise
    assert "Recall@5 (any)" in shown_by_both and "Groundedness (0-5) (heuristic)" in shown_by_both
    assert "Recency pass rate" in shown_by_both and "Empty response rate" in shown_by_both


def test_slice_tables_in_summary_md_and_html_share_their_headers() -> None:
    from evalkit.metrics.registry import short_label_of
    from evalkit.report.html.run import METRIC_COLUMNS
    from evalkit.report.summary_md import _CATEGORY_COLUMNS  # noqa: PLC2701 - the table's own columns

    html = {key: label for key, label, _ in METRIC_COLUMNS}
    md = {key: label.replace("{k}", "K") for label, key in _CATEGORY_COLUMNS}
    shared = set(html) & set(md)
    assert len(shared) >= 6
    assert all(html[key] == md[key] == short_label_of(key) for key in shared)
