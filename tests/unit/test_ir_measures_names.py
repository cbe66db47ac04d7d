"""ir_measures' metric names beside ours (issue 15 item 3): the mapping, both directions,
and the places that read a metric name (thresholds, the matrix's --expect-order)."""

from __future__ import annotations

import pytest

from evalkit.gate.floors import parse_thresholds
from evalkit.metrics.keys import canonical_key, ir_measure_name, ir_measures_values
from evalkit.run.matrix import resolve_metric


@pytest.mark.parametrize(
    "ours, k, theirs",
    [("recall_frac", 10, "R@10"), ("recall_any", 10, "Success@10"), ("precision", 5, "P@5"), ("mrr", 10, "RR@10"),
     ("ndcg", 10, "nDCG@10")],
)
def test_each_at_k_metric_has_its_ir_measures_name(ours: str, k: int, theirs: str) -> None:
    assert ir_measure_name(ours, k) == theirs
    assert canonical_key(theirs) == f"{ours}@{k}"
    assert canonical_key(theirs.lower()) == f"{ours}@{k}"  # "ndcg@10" is ours already


def test_names_without_a_counterpart() -> None:
    assert ir_measure_name("recall_all", 10) is None  # no ir_measures measure requires every support
    assert ir_measure_name("groundedness_avg", None) is None
    for key in ("mrr_avg", "recall_all@5", "R", "nDCG@ten", "groundedness_avg"):
        assert canonical_key(key) == key


def test_json_view_of_a_cell() -> None:
    at_k = {"10": {"recall_frac": 0.5, "ndcg": 0.25, "recall_all": 0.0}, "5": {"mrr": 1.0}}
    assert ir_measures_values(at_k) == {"RR@5": 1.0, "R@10": 0.5, "nDCG@10": 0.25}
    assert ir_measures_values(None) == {}


def test_thresholds_and_expect_order_read_either_name() -> None:
    assert parse_thresholds(["nDCG@10=0.5", "RR@5=30%"], ks=[5, 10]) == {"ndcg@10": 0.5, "mrr@5": 0.3}
    assert resolve_metric("nDCG@10", [5, 10]) == ("ndcg", 10)
    assert resolve_metric("Success@5", [5]) == ("recall_any", 5)
