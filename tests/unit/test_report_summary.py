"""run_eval's summary table names the suite's wall time and the sum of the cases' times apart."""

from __future__ import annotations

from evalkit.report.run import summary_rows


def test_summary_shows_suite_time_and_sum_of_case_times() -> None:
    # regression: issue 8, total_ms (a sum over cases) read as the suite's time
    metrics = {"aggregate_metrics": {"k": 5, "latency": {"p50_ms": 10.0, "p95_ms": 30.0, "n": 4,
                                                         "sum_case_ms": 4000.0, "total_ms": 1500.0}}}
    rows = {label: (value, n) for label, value, n in summary_rows(metrics)}
    assert rows["Suite wall time"] == ("1,500 ms", "")
    assert rows["Sum of case times"] == ("4,000 ms", "4")
    unknown = {"aggregate_metrics": {"latency": {"sum_case_ms": 4000.0, "total_ms": None, "n": 4}}}
    assert dict((label, value) for label, value, _ in summary_rows(unknown))["Suite wall time"] == "—"
