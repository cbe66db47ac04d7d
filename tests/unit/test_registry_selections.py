"""Every selection of metrics a report or comparison shows is read off the metric registry
(issue 37 item 5, "every metric selection list derived from the registry"): each is a subset of
`METRICS` and lists its metrics in `REPORT_ORDER`, so no table keeps its own list of keys and
no two tables list the same metrics in different orders.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from evalkit.metrics.registry import HEADLINE_KEYS, METRICS, REPORT_ORDER, shown_in

# A metric's registry key by either of its registry names (`recall_at_k_avg` or `recall_any`).
_KEY = {**{m.key: m.key for m in METRICS}, **{m.name: m.key for m in METRICS}}
_NOT_IN_REGISTRY = {"latency_p50_ms", "latency_p95_ms"}  # the trials table's percentiles


def _selections() -> Iterable[tuple[str, list[str]]]:
    from evalkit.compare.cases import _FLIP_METRICS, _READ_RESPONSE
    from evalkit.compare.trials import HEADLINE
    from evalkit.report.html.compare import _DOMAIN_METRICS
    from evalkit.report.html.run import (
        _CARD_KEYS,
        AT_K_COLUMNS,
        CASE_COLUMNS,
        METRIC_COLUMNS,
    )
    from evalkit.report.html.trend import TREND_METRICS
    from evalkit.report.summary_md import _CATEGORY_COLUMNS

    yield "report/html/run.py METRIC_COLUMNS", [key for key, _, _ in METRIC_COLUMNS]
    yield "report/html/run.py AT_K_COLUMNS", [name for name, _ in AT_K_COLUMNS]
    yield "report/html/run.py CASE_COLUMNS", [key for _, key in CASE_COLUMNS]
    yield "report/html/run.py _CARD_KEYS", [key for key in REPORT_ORDER if key in _CARD_KEYS]
    yield "report/html/trend.py TREND_METRICS", [path[0] for _, _, path, _ in TREND_METRICS if path[0] in _KEY]
    yield "report/summary_md.py _CATEGORY_COLUMNS", [key for _, key in _CATEGORY_COLUMNS]
    yield "report/html/compare.py _DOMAIN_METRICS", list(_DOMAIN_METRICS)
    yield "compare/trials.py HEADLINE", [key for key in HEADLINE if key not in _NOT_IN_REGISTRY]
    yield "compare/cases.py _FLIP_METRICS", [key for key, _, _ in _FLIP_METRICS]
    yield "compare/cases.py _READ_RESPONSE", list(_READ_RESPONSE)
    yield "registry HEADLINE_KEYS", list(HEADLINE_KEYS)


@pytest.mark.parametrize(("where", "names"), list(_selections()), ids=lambda v: v if isinstance(v, str) else "")
def test_each_selection_is_a_subset_of_the_registry_in_registry_order(where: str, names: list[str]) -> None:
    assert names, where
    unknown = [n for n in names if n not in _KEY]
    assert unknown == [], f"{where}: not in the registry: {unknown}"
    keys = [_KEY[n] for n in names]
    assert len(set(keys)) == len(keys), f"{where}: a metric twice"
    assert keys == sorted(keys, key=REPORT_ORDER.index), f"{where}: not in REPORT_ORDER"


def test_the_tables_show_what_the_registry_says() -> None:
    # The views are the tables: a metric added to a view appears in that table.
    from evalkit.compare.trials import HEADLINE
    from evalkit.report.html.cases import CASE_FIELDS
    from evalkit.report.html.run import CASE_COLUMNS, METRIC_COLUMNS
    from evalkit.report.summary_md import _CATEGORY_COLUMNS

    assert [key for key, _, _ in METRIC_COLUMNS] == [m.key for m in shown_in("slice_columns")]
    assert [key for _, key in _CATEGORY_COLUMNS] == [m.key for m in shown_in("category_columns")]
    # every case-table metric has a CaseRow field (the template, cases.js and report.css draw it)
    assert set(CASE_FIELDS) == {m.key for m in shown_in("case_columns")} == {key for _, key in CASE_COLUMNS}
    assert {*HEADLINE} - _NOT_IN_REGISTRY == {m.key for m in shown_in("trials")}
    # recall_frac is seed 001's recall, whose per-domain drift the compare page shows (issue 30)
    assert "recall_frac" in [m.name for m in shown_in("domain_drift")]


def test_report_order_lists_every_metric_once_with_the_headline_means_first() -> None:
    assert sorted(REPORT_ORDER) == sorted(m.key for m in METRICS)
    assert REPORT_ORDER[: len(HEADLINE_KEYS)] == HEADLINE_KEYS


def test_the_worst_cases_and_the_matrix_carry_every_metric_their_view_names() -> None:
    from evalkit.report.summary_md import WorstCases

    record = {
        "test_case_id": "q1", "question": "?", "case": {"answerable": True, "gold_supports": [{"rel_path": "a.md"}]},
        "retrieval_metrics": {"k": 5, "recall_at_k": 0.0, "mrr": 0.0, "at_k": {"5": {"recall_any": 0.0, "mrr": 0.0}}},
        "groundedness": {"score": 2.0}, "correctness": {"score": 3.0},
    }
    worst = WorstCases(5)
    worst.add(record)
    (row,) = worst.rows()
    assert {m.name for m in shown_in("worst_columns")} <= set(row)
    # by hand: the missed case's own values, by the registry's names
    assert (row["recall_any"], row["mrr"], row["groundedness_avg"], row["correctness_avg"]) == (0.0, 0.0, 2.0, 3.0)
