"""report.summary_md: summary.md's text from a metrics.json body and case records (pure)."""

from __future__ import annotations

from evalkit.report.summary_md import cell, render_summary, worst_cases

METRICS = {
    "run_id": "r1",
    "ks": [5],
    "total_tests": 3,
    "answerable_tests": 2,
    "unanswerable_tests": 1,
    "aggregate_metrics": {
        "k": 5, "recall_at_k_avg": 0.5, "mrr_avg": 1 / 3, "groundedness_avg": None,
        "n": {"recall_at_k_avg": 2, "mrr_avg": 2, "groundedness_avg": 0},
    },
    "by_category": {
        "factual": {"n_cases": 2, "recall_at_k_avg": 0.5, "mrr_avg": 1 / 3, "n": {"recall_at_k_avg": 2, "mrr_avg": 1}},
        "a|b": {"n_cases": 1, "error_rate": 1.0, "n": {"error_rate": 1}},
    },
    "warnings": [{"kind": "target_errors", "message": "1 of 3 cases failed"}],
}


def _record(i: int, cid: str, *, recall=None, error=None, answerable=True, question="q?") -> dict:
    return {
        "test_case_id": cid, "case_index": i,
        "case": {"id": cid, "answerable": answerable, "category": "factual", "question": question,
                 "gold_supports": [{"rel_path": "a.md"}] if answerable else []},
        "question": question, "error": error,
        "retrieval_metrics": None if recall is None else {"at_k": {"5": {"recall_any": recall, "mrr": recall}}},
    }


def test_headline_rows_carry_the_value_and_n() -> None:
    text = render_summary(METRICS, {"judge": {"provider": None}}, [])
    assert "| Recall@5 (any) | 0.500 | 2 |" in text
    assert "| MRR@5 | 0.333 | 2 |" in text
    assert "| Groundedness (0-5) | — | 0 |" in text
    assert "- **judge**: none (retrieval only)" in text
    assert "No case had an error" in text
    assert "- 1 of 3 cases failed" in text


def test_category_cells_show_n_only_where_it_differs() -> None:
    text = render_summary(METRICS)
    assert "| factual | 2 | 0.500 | 0.333 (n=1) |" in text
    assert "| a\\|b | 1 |" in text  # a pipe cannot break the row
    assert "## Worst cases" not in text  # no records given


def test_worst_cases_order_and_cut() -> None:
    long_q = "word " * 40
    records = [
        _record(0, "ok", recall=1.0),
        _record(1, "miss", recall=0.0, question=long_q),
        _record(2, "err", error={"kind": "timeout"}),
        _record(3, "half", recall=0.5),
    ]
    rows = worst_cases(records, 5, n=3)
    assert [r["id"] for r in rows] == ["err", "miss", "half"]  # errors, then missed gold, then low scores
    assert rows[0]["problems"] == ["error: timeout"] and rows[1]["problems"] == ["missed gold"]
    assert len(rows[1]["question"]) == 80 and rows[1]["question"].endswith("…")
    assert worst_cases(records, 5, n=1)[0]["id"] == "err"


def test_cell_is_one_safe_line() -> None:
    assert cell("a|b\n<script>`x`") == "a\\|b &lt;script&gt;\\`x\\`"


def test_worst_cases_of_parts_merge_into_the_whole() -> None:
    """score_retrieval's workers each keep the worst of their part; merged in file order
    (ties: the earlier case is worse), they give the worst of all records."""
    import pickle

    from evalkit.report.summary_md import WorstCases

    # Many ties on purpose: recall 0.5 everywhere except a few misses and errors.
    records = [_record(i, f"c{i}", recall=0.0 if i % 7 == 3 else 0.5, error={"kind": "x"} if i == 11 else None)
               for i in range(30)]
    whole = worst_cases(records, 5, n=6)
    assert [r["id"] for r in whole] == ["c11", "c3", "c10", "c17", "c24", "c0"]  # error, then misses, then ties by order
    for cut in (0, 4, 11, 12, 29, 30):
        first, second = WorstCases(5, 6), WorstCases(5, 6)
        for r in records[:cut]:
            first.add(r)
        for r in records[cut:]:
            second.add(r)
        merged = pickle.loads(pickle.dumps(first))
        merged.merge(pickle.loads(pickle.dumps(second)))
        assert merged.rows() == whole, cut
