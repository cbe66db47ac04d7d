"""aggregate_records on a hand-built run of 7 records (EVAL.md "Aggregation").

Records (primary K = 3, also K = 5):
  r1 answerable, work+code, factual/easy, domain cdc: hit at 1, judged 4/5, 100 ms
  r2 answerable, work, multi_hop/hard: miss @3, hit @5, scope miss, groundedness judge failed
  r3 answerable, personal, factual/easy: target timeout (scored 0 by the runner)
  r4 unanswerable, general, general/easy: abstained (the judge scored it anyway: excluded)
  r5 unanswerable, general+work, general/medium: answered anyway (hallucination)
  r6 answerable but unlabeled, factual/medium: abstained (false abstention), correctness judge failed,
     groundedness scored anyway (excluded: not an answered case)
  r7 answerable, code, reasoning (no difficulty): empty answer error, retrieval hit at 2
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.metrics.aggregate import (
    SLICE_METRICS,
    aggregate_records,
    flatten_cell,
    percentile,
    recorded_suite_ms,
    summarize_indexing_coverage,
)

GOLD = [{"rel_path": "a.md", "heading_path": "# A"}]
NONE_AT_K = dict.fromkeys(("recall_any", "recall_all", "recall_frac", "precision", "mrr", "ndcg"))
COVERAGE = {
    "docs_processed": 200,
    "docs_with_0_chunks": 2,
    "chunks_attempted": 1000,
    "chunks_embedded": 990,
    "chunks_skipped": 10,
    "chunks_skipped_reasons": {"too_small": 4, "context_limit_exceeded": 6},
    "chunk_token_stats": {"min": 10, "max": 500, "mean": 200, "p95": 450},
    "chunker_version": "v1",
    "index_version": "i1",
    "coverage_by_doc_type": {"pdf": {"processed": 50, "with_0_chunks": 2, "chunks_skipped": 8},
                             "markdown": {"processed": 150, "with_0_chunks": 0, "chunks_skipped": 2}},
}


def rec(case, at3, at5, *, scope_miss=None, attribution_hit=None, g=None, c=None, abstained=None, error=None,
        judge_errors=(), latency=None, cost=(0, 0.0), answer="an answer", coverage=None):
    return {
        "case": case,
        "answer": answer,
        "retrieval_metrics": {"k": 3, "at_k": {"3": at3, "5": at5}, "scope_miss": scope_miss,
                              "attribution_hit": attribution_hit},
        "groundedness": None if g is None else {"score": g},
        "correctness": None if c is None else {"score": c},
        "abstention": {"abstained": abstained},
        "error": error,
        "judge_errors": list(judge_errors),
        "latency": latency or {},
        "cost": {"judge_tokens": cost[0], "judge_cost_usd": cost[1]},
        "indexing_coverage": coverage,
    }


def at(ra, rall, rf, p, m, n):
    return {"recall_any": ra, "recall_all": rall, "recall_frac": rf, "precision": p, "mrr": m, "ndcg": n}


def records():
    return [
        rec({"answerable": True, "tags": ["work", "code"], "category": "factual", "difficulty": "easy",
             "domain": "cdc", "gold_supports": GOLD},
            at(1, None, 0.5, 1 / 3, 1, 0.8), at(1, None, 1, 2 / 5, 1, 0.9), scope_miss=False, attribution_hit=True,
            g=4, c=5, abstained=False,
            latency={"total_ms": 100, "folder_selection_ms": 10, "retrieval_ms": 20, "generation_ms": 70},
            cost=(100, 0.01)),
        rec({"answerable": True, "tags": ["work"], "category": "multi_hop", "difficulty": "hard",
             "gold_supports": GOLD * 2, "required_support_groups": [[0, 1]]},
            at(0, 0, 0, 0, 0, 0), at(1, 1, 1, 2 / 5, 1 / 4, 0.5), scope_miss=True, attribution_hit=False,
            g=None, c=3, abstained=False, judge_errors=[{"judge": "groundedness", "reason": "parse_failure"}],
            latency={"total_ms": 300}, cost=(50, 0.005), coverage=COVERAGE),
        rec({"answerable": True, "tags": ["personal"], "category": "factual", "difficulty": "easy",
             "gold_supports": GOLD},
            at(0, None, 0, 0, 0, 0), at(0, None, 0, 0, 0, 0), attribution_hit=False,
            error={"kind": "timeout", "status": None, "detail": "30s"}, answer=None, latency={"total_ms": 5000}),
        rec({"answerable": False, "tags": ["general"], "category": "general", "difficulty": "easy"},
            NONE_AT_K, NONE_AT_K, g=5, c=5, abstained=True, latency={"total_ms": 200},
            answer="I could not find that."),
        rec({"answerable": False, "tags": ["general", "work"], "category": "general", "difficulty": "medium"},
            NONE_AT_K, NONE_AT_K, g=1, c=0, abstained=False, latency={"total_ms": 400}),
        rec({"answerable": True, "tags": [], "category": "factual", "difficulty": "medium", "gold_supports": []},
            NONE_AT_K, NONE_AT_K, g=5, c=2, abstained=True,
            judge_errors=[{"judge": "correctness", "reason": "timeout"}],
            latency={"total_ms": 150}),
        rec({"answerable": True, "tags": ["code"], "category": "reasoning", "gold_supports": GOLD},
            at(1, None, 1, 1 / 3, 1 / 2, 0.6), at(1, None, 1, 1 / 5, 1 / 2, 0.6), attribution_hit=False,
            error={"kind": "empty_answer"}, answer="", latency={"total_ms": 250},
            coverage=dict(COVERAGE, docs_processed=999)),
    ]


@pytest.fixture(scope="module")
def out():
    return aggregate_records(iter(records()), ks=[3, 5])


def test_counts(out):
    assert out["total_tests"] == 7
    assert out["answerable_tests"] == 5  # r1 r2 r3 r6 r7
    assert out["unanswerable_tests"] == 2
    assert out["aggregate_metrics"]["n_cases"] == 7
    assert out["aggregate_metrics"]["k"] == 3


def test_overall_retrieval(out):
    a = out["aggregate_metrics"]
    # by hand: answerable records with values: r1, r2, r3 (error -> 0), r7; r6 unlabeled
    assert a["recall_at_k_avg"] == (1 + 0 + 0 + 1) / 4
    assert a["mrr_avg"] == (1 + 0 + 0 + 1 / 2) / 4
    assert a["precision_at_k_avg"] == pytest.approx((1 / 3 + 0 + 0 + 1 / 3) / 4, abs=1e-12)
    assert a["ndcg_at_k_avg"] == pytest.approx((0.8 + 0 + 0 + 0.6) / 4, abs=1e-12)
    assert a["recall_all_avg"] == 0 / 1  # by hand: only r2 has groups
    assert a["recall_frac_avg"] == (0.5 + 0 + 0 + 1) / 4
    assert a["scope_miss_rate"] == 1 / 2  # by hand: r1 False, r2 True
    assert a["attribution_hit_rate"] == 1 / 4  # by hand: r1 only, of r1 r2 r3 r7
    assert a["n_unlabeled"] == 1
    assert a["n"]["recall_at_k_avg"] == 4
    assert a["n"]["recall_all_avg"] == 1
    assert a["n"]["scope_miss_rate"] == 2
    assert a["recency_pass_rate"] is None and a["n"]["recency_pass_rate"] == 0


def test_overall_at_k(out):
    at5 = out["aggregate_metrics"]["at_k"]["5"]
    assert at5["recall_any"] == (1 + 1 + 0 + 1) / 4  # by hand
    assert at5["recall_all"] == 1 / 1
    assert at5["precision"] == pytest.approx((2 / 5 + 2 / 5 + 0 + 1 / 5) / 4, abs=1e-12)
    assert at5["mrr"] == (1 + 1 / 4 + 0 + 1 / 2) / 4
    assert at5["ndcg"] == pytest.approx((0.9 + 0.5 + 0 + 0.6) / 4, abs=1e-12)
    assert at5["n"] == 4
    assert at5["n_by_metric"]["recall_all"] == 1
    at3 = out["aggregate_metrics"]["at_k"]["3"]
    assert at3["recall_any"] == out["aggregate_metrics"]["recall_at_k_avg"]
    assert list(out["aggregate_metrics"]["at_k"]) == ["3", "5"]


def test_judges_exclude_failures(out):
    a = out["aggregate_metrics"]
    # by hand: r1, r5; r2's judge failed; r4 and r6 abstained (means are over answered cases)
    assert a["groundedness_avg"] == (4 + 1) / 2
    # by hand: r1 r2 r5; r4 abstained correctly; r6 has a score but its judge failed
    assert a["correctness_avg"] == (5 + 3 + 0) / 3
    assert a["n"]["groundedness_avg"] == 2
    assert a["n"]["correctness_avg"] == 3
    assert a["n_judge_errors"] == 2
    assert a["judge_errors_by_judge"] == {"correctness": 1, "groundedness": 1}


def test_abstention(out):
    a = out["aggregate_metrics"]
    # by hand: errors r3, r7 excluded; answerable r1 r2 answered, r6 abstained; unanswerable r4 abstained, r5 answered
    assert a["abstention_confusion"] == {"answerable": {"answered": 2, "abstained": 1},
                                         "unanswerable": {"answered": 1, "abstained": 1}}
    assert a["abstention_accuracy"] == 1 / 2
    assert a["hallucination_rate_unanswerable"] == 1 / 2
    assert a["false_abstention_rate"] == 1 / 3
    assert a["abstention_precision"] == 1 / (1 + 1)
    assert a["n"]["abstention_accuracy"] == 2
    assert a["n"]["false_abstention_rate"] == 3


def test_latency_cost_operational(out):
    a = out["aggregate_metrics"]
    lat = a["latency"]
    # by hand: sorted totals [100, 150, 200, 250, 300, 400, 5000]
    assert lat["p50_ms"] == 250  # h = 6 * 0.5 = 3 -> x3
    assert lat["p95_ms"] == pytest.approx(400 + 0.7 * (5000 - 400), abs=1e-9)  # h = 6 * 0.95 = 5.7
    assert lat["mean_ms"] == 6400 / 7
    assert lat["sum_case_ms"] == 100 + 150 + 200 + 250 + 300 + 400 + 5000
    assert lat["total_ms"] is None  # no suite time given: unknown, not the sum over cases
    assert lat["n"] == 7
    assert lat["phases"]["retrieval"] == {"p50_ms": 20, "p95_ms": 20, "mean_ms": 20, "sum_case_ms": 20, "n": 1}
    assert lat["phases"]["judge"]["p50_ms"] is None and lat["phases"]["judge"]["n"] == 0
    assert a["cost"] == {"judge_total_usd": pytest.approx(0.01 + 0.005, abs=1e-15), "judge_total_tokens": 150}
    op = a["operational_metrics"]
    assert op["error_rate"] == 2 / 7  # by hand: r3 timeout, r7 empty answer
    assert op["timeout_rate"] == 1 / 7
    assert op["empty_response_rate"] == 1 / 7
    assert op["n_errors"] == 2
    assert op["error_kinds"] == {"empty_answer": 1, "timeout": 1}
    assert op["n"] == 7
    assert op["coverage_by_doc_type"] == {"markdown": COVERAGE["coverage_by_doc_type"]["markdown"],
                                          "pdf": COVERAGE["coverage_by_doc_type"]["pdf"]}
    assert list(op["coverage_by_doc_type"]) == ["markdown", "pdf"]


def test_total_ms_is_the_suite_wall_time_not_the_sum_over_cases():
    # regression: issue "small things a user tripped on" (8): total_ms was the sum of the
    # cases' times; the seed's total_ms beside p50/p95 is the suite's time.
    lat = aggregate_records(records(), ks=[3, 5], suite_ms=1234.5)["aggregate_metrics"]["latency"]
    assert lat["total_ms"] == 1234.5
    assert lat["sum_case_ms"] == 6400  # by hand: 100 + 150 + 200 + 250 + 300 + 400 + 5000
    assert "total_ms" not in lat["phases"]["retrieval"]  # phases overlap: only sums over cases


def test_recorded_suite_ms():
    assert recorded_suite_ms({"aggregate_metrics": {"latency": {"total_ms": 900.0, "sum_case_ms": 6400}}}) == 900.0
    assert recorded_suite_ms({"aggregate_metrics": {"latency": {"total_ms": None, "sum_case_ms": 6400}}}) is None
    # a metrics.json from before sum_case_ms: its total_ms was a sum over cases, not a wall time
    assert recorded_suite_ms({"aggregate_metrics": {"latency": {"total_ms": 6400}}}) is None
    assert recorded_suite_ms(None) is None and recorded_suite_ms({}) is None


def test_indexing_coverage_from_first_record(out):
    cov = out["aggregate_metrics"]["indexing_coverage"]
    assert cov["docs_processed"] == 200  # r2's, not r7's
    assert cov["no_chunks_generated_rate"] == 2 / 200
    assert cov["chunks_skipped_due_to_context_rate"] == 6 / 1000
    assert cov["chunks_skipped_rate"] == 10 / 1000
    assert cov["chunk_token_stats"] == COVERAGE["chunk_token_stats"]
    assert list(cov["chunks_skipped_reasons"]) == ["context_limit_exceeded", "too_small"]


def test_groups(out):
    assert list(out["by_tag"]) == ["code", "general", "personal", "work"]
    work = out["by_tag"]["work"]  # r1 r2 r5
    assert work["n_cases"] == 3
    assert work["recall_at_k_avg"] == (1 + 0) / 2
    assert work["groundedness_avg"] == (4 + 1) / 2
    assert work["correctness_avg"] == (5 + 3 + 0) / 3
    assert work["abstention_accuracy"] == 0 / 1  # r5 answered an unanswerable case
    assert work["false_abstention_rate"] == 0 / 2
    # r4 r5, both unanswerable: no retrieval, scope or false-abstention value, so none is listed
    # by hand: groundedness r5 only (r4 abstained); correctness r5 only (r4 abstained, unanswerable)
    assert out["by_tag"]["general"] == {
        "n_cases": 2,
        "groundedness_avg": 1 / 1,
        "correctness_avg": 0 / 1,
        "abstention_accuracy": 1 / 2,
        "hallucination_rate_unanswerable": 1 / 2,
        "error_rate": 0 / 2,
        "n": {"groundedness_avg": 1, "correctness_avg": 1, "abstention_accuracy": 2,
              "hallucination_rate_unanswerable": 2, "error_rate": 2},
    }
    personal = out["by_tag"]["personal"]  # r3 timeout
    assert personal["recall_at_k_avg"] == 0 / 1
    assert personal["error_rate"] == 1 / 1
    assert "groundedness_avg" not in personal and "groundedness_avg" not in personal["n"]
    assert out["by_tag"]["code"]["recall_at_k_avg"] == (1 + 1) / 2  # r1 r7

    assert list(out["by_category"]) == ["factual", "general", "multi_hop", "reasoning"]
    factual = out["by_category"]["factual"]  # r1 r3 r6
    assert factual["n_cases"] == 3
    assert factual["recall_at_k_avg"] == (1 + 0) / 2
    assert factual["n"]["recall_at_k_avg"] == 2  # r6 is unlabeled
    assert out["by_category"]["multi_hop"]["recall_all_avg"] == 0 / 1

    assert list(out["by_difficulty"]) == ["easy", "hard", "medium"]  # r7 has none
    assert sum(cell["n_cases"] for cell in out["by_difficulty"].values()) == 6
    assert list(out["by_domain"]) == ["cdc"]
    assert out["by_domain"]["cdc"]["n_cases"] == 1

    ans, unans = out["by_answerable"]["answerable"], out["by_answerable"]["unanswerable"]
    assert ans["n_cases"] == 5 and unans["n_cases"] == 2
    assert "recall_at_k_avg" not in unans  # no unanswerable case has a retrieval value
    assert unans["hallucination_rate_unanswerable"] == 1 / 2
    assert "abstention_accuracy" not in ans
    assert ans["false_abstention_rate"] == 1 / 3


def test_slices_hold_headline_metrics_with_their_n(out):
    # regression: issue 8, metrics.json was 206 KB for 59 cases: every slice held every K,
    # latency percentiles and the rest of the overall cell.
    for grouping in ("by_tag", "by_category", "by_difficulty", "by_domain", "by_answerable"):
        for cell in out[grouping].values():
            metrics = [key for key in cell if key not in ("n_cases", "n")]
            assert metrics == [m for m in SLICE_METRICS if m in cell]  # in SLICE_METRICS order
            assert list(cell["n"]) == metrics
            assert all(cell["n"][m] >= 1 for m in metrics)
            assert not {"at_k", "latency", "cost", "operational_metrics"} & set(cell)


def test_full_slices_keep_the_overall_layout():
    out = aggregate_records(records(), ks=[3, 5], suite_ms=99.0, full_slices=True)
    keys = set(out["aggregate_metrics"]) - {"k", "indexing_coverage"}
    for grouping in ("by_tag", "by_category", "by_difficulty", "by_domain", "by_answerable"):
        for cell in out[grouping].values():
            assert set(cell) == keys
            assert "total_ms" not in cell["latency"]  # the suite's time is the overall cell's only
    assert out["by_category"]["multi_hop"]["at_k"]["5"]["recall_all"] == 1 / 1
    assert out["by_difficulty"]["easy"]["latency"]["p50_ms"] == 200  # by hand: [100, 200, 5000]
    general = out["by_tag"]["general"]  # r4 r5: empty retrieval cells are null with n 0
    assert general["recall_at_k_avg"] is None and general["n"]["recall_at_k_avg"] == 0
    assert general["at_k"]["5"]["ndcg"] is None and general["at_k"]["5"]["n"] == 0


def test_order_independent():
    forward = aggregate_records(records(), ks=[3, 5])
    backward = aggregate_records(list(reversed(records())), ks=[3, 5])
    # r7 comes first backwards, so its indexing coverage wins there: compare the rest
    forward["aggregate_metrics"].pop("indexing_coverage")
    backward["aggregate_metrics"].pop("indexing_coverage")
    assert forward == backward


def test_empty_run_is_null_not_zero():
    out = aggregate_records([], ks=[5])
    a = out["aggregate_metrics"]
    assert out["total_tests"] == 0
    for name in ("recall_at_k_avg", "mrr_avg", "groundedness_avg", "abstention_accuracy", "scope_miss_rate"):
        assert a[name] is None, name
    assert a["latency"]["p50_ms"] is None and a["latency"]["total_ms"] is None
    assert a["latency"]["sum_case_ms"] is None
    assert a["operational_metrics"]["error_rate"] is None
    assert a["at_k"]["5"]["recall_any"] is None and a["at_k"]["5"]["n"] == 0
    assert a["indexing_coverage"] is None
    assert out["by_tag"] == {}


def test_seed_shaped_record_without_at_k():
    # The seed's example record: retrieval_metrics {recall_at_k, mrr, scope_miss, attribution_hit}
    r = {"case": {"answerable": True, "gold_supports": GOLD},
         "retrieval_metrics": {"recall_at_k": 1.0, "mrr": 0.5, "scope_miss": False, "attribution_hit": True}}
    a = aggregate_records([r], ks=[5])["aggregate_metrics"]
    assert a["recall_at_k_avg"] == 1.0 and a["mrr_avg"] == 0.5
    assert a["precision_at_k_avg"] is None
    assert a["attribution_hit_rate"] == 1.0


def test_unanswerable_record_values_are_ignored_for_retrieval():
    r = {"case": {"answerable": False}, "retrieval_metrics": {"at_k": {"5": at(1, 1, 1, 1, 1, 1)}}}
    assert aggregate_records([r], ks=[5])["aggregate_metrics"]["recall_at_k_avg"] is None


@pytest.mark.parametrize("q", [0, 5, 25, 50, 90, 95, 99, 100])
@pytest.mark.parametrize("values", [[3.0], [5.0, 1.0], [1.0, 2.0, 3.0, 4.0, 10.0], list(np.linspace(0, 7, 13) ** 2)])
def test_percentile_matches_numpy(values, q):
    # reference: numpy.percentile(values, q), default method "linear"
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-9)


def test_percentile_empty():
    assert percentile([], 50) is None


def test_summarize_indexing_coverage_edges():
    assert summarize_indexing_coverage(None) is None
    s = summarize_indexing_coverage({"docs_processed": 0, "chunks_attempted": 0})
    assert s["no_chunks_generated_rate"] is None and s["chunks_skipped_due_to_context_rate"] is None
    # skipped chunks without reasons: the context share is unknown
    s = summarize_indexing_coverage({"docs_processed": 3, "chunks_attempted": 10, "chunks_skipped": 2})
    assert s["chunks_skipped_due_to_context_rate"] is None
    assert s["chunks_skipped_rate"] == 2 / 10
    # nothing skipped: 0, not unknown
    s = summarize_indexing_coverage({"docs_processed": 3, "chunks_attempted": 10, "chunks_skipped": 0})
    assert s["chunks_skipped_due_to_context_rate"] == 0 / 10
    # the seed's two spellings of the reason both count
    s = summarize_indexing_coverage({"chunks_attempted": 100, "chunks_skipped": 5,
                                     "chunks_skipped_reasons": {"skipped_due_to_context_limit": 2,
                                                                "context_limit_exceeded": 1, "too_small": 2}})
    assert s["chunks_skipped_due_to_context_rate"] == (2 + 1) / 100
    assert math.isclose(s["chunks_skipped_rate"], 5 / 100)


def test_false_abstention_counts_in_correctness_not_groundedness():
    r = {"case": {"answerable": True}, "abstention": {"abstained": True},
         "groundedness": {"score": 5}, "correctness": {"score": 0}}
    a = aggregate_records([r], ks=[5])["aggregate_metrics"]
    assert a["correctness_avg"] == 0 / 1  # by hand: the judge's failure score for a false abstention counts
    assert a["groundedness_avg"] is None and a["n"]["groundedness_avg"] == 0


def test_flatten_cell(out):
    flat = flatten_cell(out["aggregate_metrics"])
    assert flat["recall_at_k_avg"] == ((1 + 0 + 0 + 1) / 4, 4)  # by hand, as test_overall_retrieval
    assert flat["recall_all@5"] == (1 / 1, 1)
    assert flat["ndcg@3"][1] == 4
    assert flat["latency_p50_ms"] == (250, 7)
    assert flat["error_rate"] == (2 / 7, 7)
    assert flat["abstention_accuracy"] == (1 / 2, 2)
    assert list(flat) == sorted(flat)
    assert "latency" not in flat
    work = flatten_cell(out["by_tag"]["work"])  # r1 r2 r5
    assert work["recall_at_k_avg"] == ((1 + 0) / 2, 2)
    assert work["error_rate"] == (0 / 3, 3)
    assert "recall_any@5" not in work and "latency_p50_ms" not in work


@pytest.mark.parametrize("cut", [0, 1, 3, 6])
def test_tables_of_parts_merge_into_the_whole(cut):
    """score_retrieval's workers each fill a RecordTable with a part of the records; merged
    in order (after a pickle round trip, as between processes), they give exactly the
    aggregate of all records in one table, slices included."""
    import pickle

    from evalkit.metrics.aggregate import RecordTable

    recs = records()
    whole = aggregate_records(recs, ks=[3, 5], suite_ms=7.0, full_slices=True)
    first, second = RecordTable([3, 5]), RecordTable([3, 5])
    for r in recs[:cut]:
        first.add_record(r)
    for r in recs[cut:]:
        second.add_record(r)
    merged = pickle.loads(pickle.dumps(first))
    merged.merge(pickle.loads(pickle.dumps(second)))
    assert merged.result(suite_ms=7.0, full_slices=True) == whole
    with pytest.raises(ValueError, match="cannot merge"):
        merged.merge(RecordTable([5]))
