"""Abstention outcomes and rates (EVAL.md "Abstention"); expected values by hand."""

from __future__ import annotations

import pytest

from evalkit.metrics.abstention import AbstentionTally, aggregate_abstention, score_case_abstention


@pytest.mark.parametrize(
    ("answerable", "abstained", "expected"),
    [
        pytest.param(False, True, {"abstained": True, "hallucinated": False, "false_abstention": None},
                     id="unanswerable-abstained"),
        pytest.param(False, False, {"abstained": False, "hallucinated": True, "false_abstention": None},
                     id="unanswerable-answered"),
        pytest.param(True, True, {"abstained": True, "hallucinated": None, "false_abstention": True},
                     id="answerable-abstained"),
        pytest.param(True, False, {"abstained": False, "hallucinated": None, "false_abstention": False},
                     id="answerable-answered"),
        pytest.param(False, None, {"abstained": None, "hallucinated": None, "false_abstention": None},
                     id="unknown"),
    ],
)
def test_score_case_abstention(answerable, abstained, expected):
    assert score_case_abstention(answerable, abstained) == expected


def test_aggregate_by_hand():
    items = [
        (False, True), (False, True), (False, False),   # unanswerable: 2 abstained, 1 answered
        (True, False), (True, False), (True, False), (True, True),  # answerable: 3 answered, 1 abstained
        (True, None), (False, None),                    # unknown: excluded, counted
    ]
    out = aggregate_abstention(items)
    assert out["abstention_confusion"] == {
        "answerable": {"answered": 3, "abstained": 1},
        "unanswerable": {"answered": 1, "abstained": 2},
    }
    assert out["abstention_accuracy"] == 2 / 3  # by hand: UA / (UA + UN) = 2 / (2 + 1)
    assert out["hallucination_rate_unanswerable"] == 1 / 3  # by hand: UN / (UA + UN)
    assert out["false_abstention_rate"] == 1 / 4  # by hand: AA / (AA + AN) = 1 / (1 + 3)
    assert out["abstention_precision"] == 2 / 3  # by hand: UA / (UA + AA) = 2 / (2 + 1)
    assert out["abstention_recall"] == 2 / 3  # by hand: UA / (UA + UN)
    assert out["abstention_f1"] == pytest.approx(2 * (2 / 3) * (2 / 3) / (2 / 3 + 2 / 3), abs=1e-12)
    assert out["abstention_decision_accuracy"] == (2 + 3) / 7  # by hand: (UA + AN) / known
    assert out["n"] == {
        "abstention_accuracy": 3,
        "hallucination_rate_unanswerable": 3,
        "false_abstention_rate": 4,
        "abstention_precision": 3,
        "abstention_recall": 3,
        "abstention_f1": 4,
        "abstention_decision_accuracy": 7,
    }
    assert out["n_abstention_unknown"] == 2


def test_empty_rates_are_null():
    out = aggregate_abstention([])
    for name in ("abstention_accuracy", "hallucination_rate_unanswerable", "false_abstention_rate",
                 "abstention_precision", "abstention_recall", "abstention_f1", "abstention_decision_accuracy"):
        assert out[name] is None, name
        assert out["n"][name] == 0


def test_only_answerable_cases():
    out = aggregate_abstention([(True, False), (True, True)])
    assert out["abstention_accuracy"] is None  # no unanswerable case
    assert out["false_abstention_rate"] == 1 / 2  # by hand
    assert out["abstention_precision"] == 0 / 1  # by hand: the one abstention was on an answerable case
    assert out["abstention_f1"] is None


def test_tally_streams():
    tally = AbstentionTally()
    tally.add(False, True)
    assert tally.result()["abstention_accuracy"] == 1 / 1  # by hand
