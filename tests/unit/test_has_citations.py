"""has_citations_rate (issue 13, item 7a): answered, answerable cases whose answer cites a
source (references, or a [n] marker); seed 002's "Has Citations" (citations.length > 0)."""

from __future__ import annotations

import pytest

from evalkit.metrics.aggregate import aggregate_records, has_citations


def r(answer="Harbor is led by Ravi.", *, refs=0, answerable=True, abstained=None, error=None, dropped=0) -> dict:
    return {
        "case": {"answerable": answerable},
        "answer": answer,
        "references": [{"rel_path": f"r{i}.md"} for i in range(refs)],
        "references_dropped": dropped,
        "abstention": {"abstained": abstained},
        "error": error,
    }


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (r(refs=1), True),  # the response names a reference (the seed's citations list)
        (r("Ravi leads Harbor [1]."), True),  # a marker without references
        (r("Ravi leads Harbor [1, 3]."), True),
        (r("Ravi leads Harbor."), False),
        (r("See [the notes]."), False),  # not a passage number
        (r(dropped=2), True),  # references beyond the stored ones still cite
        (r(abstained=True, refs=1), None),  # abstained: not answered
        (r(answerable=False, refs=1), None),  # unanswerable: citing is not the question
        (r(error={"kind": "timeout"}, answer=None), None),  # the target failed
        (r("", error={"kind": "empty_answer"}), None),  # empty: counted in empty_response_rate
        (r(abstained=False), False),
    ],
)
def test_has_citations(record, expected) -> None:
    assert has_citations(record) is expected


def test_rate_by_hand() -> None:
    records = [
        r(refs=2),  # counts, cites
        r("Ravi [2]."),  # counts, cites
        r("Ravi."),  # counts, does not
        r("I cannot tell.", abstained=True),  # excluded
        r(answerable=False),  # excluded
        r(answer=None, error={"kind": "http_error"}),  # excluded
    ]
    agg = aggregate_records(records, ks=[5])["aggregate_metrics"]
    assert agg["has_citations_rate"] == pytest.approx(2 / 3)
    assert agg["n"]["has_citations_rate"] == 3
    empty = aggregate_records([r(answerable=False)], ks=[5])["aggregate_metrics"]
    assert empty["has_citations_rate"] is None and empty["n"]["has_citations_rate"] == 0


def test_summary_table_rows() -> None:
    from evalkit.report.run import summary_rows

    metrics = aggregate_records([r(refs=1), r("Ravi.")], ks=[5])
    rows = {label: (value, n) for label, value, n in summary_rows(metrics)}
    assert rows["Has citations rate (answered)"] == ("0.500", "2")
    assert "Response valid rate (schema)" not in rows  # no schema, no row
    metrics = aggregate_records([{**r(), "response_validity": {"valid": True, "errors": []}}], ks=[5])
    rows = {label: (value, n) for label, value, n in summary_rows(metrics)}
    assert rows["Response valid rate (schema)"] == ("1.000", "1")
