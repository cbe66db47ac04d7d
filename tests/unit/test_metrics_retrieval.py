"""Retrieval kernels and score_case_retrieval: hand-computed cases and the edge-case matrix.

Every expected value is written as the arithmetic of EVAL.md's formula (`# by hand:`).
"""

from __future__ import annotations

import math

import pytest

from evalkit.errors import InputError
from evalkit.evalset.anchors import MatchTable
from evalkit.metrics.retrieval import (
    attribution_hit,
    mrr,
    ndcg,
    precision,
    recall_all,
    recall_any,
    recall_frac,
    recency_check,
    scope_miss,
    score_case_retrieval,
    validate_ks,
)

E = frozenset()


def table(matches, relevance=None, n=None):
    n = len(relevance) if relevance is not None else n
    relevance = relevance if relevance is not None else [1.0] * n
    return MatchTable(matches=[frozenset(m) for m in matches], relevance=[float(r) for r in relevance], n_supports=n)


# Three binary gold supports; position 2 hits gold 0, position 4 hits golds 0 and 1, position 5 hits gold 2.
T = table([E, {0}, E, {0, 1}, {2}], n=3)


def test_recall_any():
    assert recall_any(T, 1) == 0.0  # by hand: position 1 matches nothing
    assert recall_any(T, 2) == 1.0  # by hand: position 2 matches gold 0


def test_recall_frac():
    assert recall_frac(T, 3) == 1 / 3  # by hand: {0} hit of 3 golds
    assert recall_frac(T, 4) == 2 / 3  # by hand: {0, 1}
    assert recall_frac(T, 5) == 3 / 3  # by hand: {0, 1, 2}


def test_precision():
    assert precision(T, 3) == 1 / 3  # by hand: 1 matching position of 3
    assert precision(T, 5) == 3 / 5  # by hand: positions 2, 4, 5
    # by hand: K larger than the list keeps K as denominator: 3 matching positions / 10
    assert precision(T, 10) == 3 / 10


def test_precision_counts_every_chunk_matching_the_same_support():
    t = table([{0}, {0}, E], n=1)
    assert precision(t, 3) == 2 / 3  # by hand: two distinct chunks of the same gold section


def test_mrr():
    assert mrr(T, 5) == 1 / 2  # by hand: first match at position 2
    assert mrr(table([E, E, E, {0}], n=1), 3) == 0.0  # by hand: the only match is below K=3
    assert mrr(table([E, E, E, {0}], n=1), 4) == 1 / 4  # by hand


def test_ndcg_binary():
    # by hand: DCG@3 = (2^1-1)/log2(2+1); IDCG@3 = 1/log2 2 + 1/log2 3 + 1/log2 4
    assert ndcg(T, 3) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3) + 1 / 2), abs=1e-12)
    # by hand: positions 2, 4 (gold 1, since gold 0 is credited), 5 (gold 2)
    dcg = 1 / math.log2(3) + 1 / math.log2(5) + 1 / math.log2(6)
    assert ndcg(T, 5) == pytest.approx(dcg / (1 + 1 / math.log2(3) + 1 / 2), abs=1e-12)


def test_ndcg_graded_gain_is_2_pow_rel_minus_1():
    # rel = [3, 1]; position 1 matches gold 1 (gain 2^1-1 = 1), position 2 matches golds 0 and 1 -> gold 0 (gain 7)
    t = table([{1}, {0, 1}], relevance=[3, 1])
    # by hand: DCG = 1/log2 2 + 7/log2 3 ; IDCG = 7/log2 2 + 1/log2 3
    assert ndcg(t, 2) == pytest.approx((1 + 7 / math.log2(3)) / (7 + 1 / math.log2(3)), abs=1e-12)


def test_ndcg_credits_highest_relevance_first():
    t = table([{0, 1}, {1}], relevance=[3, 1])
    # by hand: position 1 credits gold 0 (7), position 2 gold 1 (1/log2 3) = the ideal order
    assert ndcg(t, 2) == 1.0


def test_ndcg_each_support_credited_once():
    t = table([{0}, {0}, {0}], relevance=[1, 1])
    # by hand: DCG = 1 (only position 1 earns); IDCG@3 = 1 + 1/log2 3 (two golds)
    assert ndcg(t, 3) == pytest.approx(1 / (1 + 1 / math.log2(3)), abs=1e-12)


def test_ndcg_one_chunk_matching_two_supports_earns_once():
    t = table([{0, 1}], relevance=[1, 1])
    assert ndcg(t, 1) == 1.0  # by hand: DCG@1 = 1 = IDCG@1
    assert ndcg(t, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)), abs=1e-12)  # by hand: IDCG@2 = 1 + 1/log2 3


def test_ndcg_all_zero_relevance_is_none():
    assert ndcg(table([{0}], relevance=[0]), 5) is None  # by hand: IDCG = 2^0 - 1 = 0


def test_recall_all_groups_or_of_and():
    groups = [[0, 1], [2]]
    assert recall_all(T, 2, groups) == 0.0  # by hand: hit {0}; neither {0,1} nor {2} complete
    assert recall_all(T, 4, groups) == 1.0  # by hand: hit {0,1} completes group 0
    assert recall_all(table([{2}], n=3), 1, groups) == 1.0  # by hand: group [2] alone suffices
    assert recall_all(T, 5, None) is None
    assert recall_all(T, 5, []) is None
    assert recall_all(T, 5, [[]]) is None  # an empty group would be vacuously true


def test_recall_all_bad_index():
    with pytest.raises(InputError, match="out of range"):
        recall_all(T, 5, [[0, 7]])


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_k(k):
    with pytest.raises(InputError):
        recall_any(T, k)


def test_validate_ks():
    assert validate_ks([10, 5, 10]) == [10, 5]
    with pytest.raises(InputError):
        validate_ks([])


# ---------------------------------------------------------------- scope miss

NOTES = [{"rel_path": "notes/a.md", "heading_path": "# A"}]


@pytest.mark.parametrize(
    ("supports", "selection", "mode", "expected"),
    [
        pytest.param(NOTES, {"selected_folders": ["projects"]}, "off", None, id="mode-off"),
        pytest.param(NOTES, None, "on", None, id="no-selection"),
        pytest.param([], {"selected_folders": ["projects"]}, "on", None, id="no-gold"),
        pytest.param([{"chunk_id": "c"}], {"selected_folders": ["projects"]}, "on", None, id="chunk-id-only-gold"),
        pytest.param(NOTES, {"selected_folders": ["projects"]}, "on", True, id="excluded"),
        pytest.param(NOTES, {"selected_folders": ["projects"]}, "on_with_fallback", True, id="excluded-fallback-mode"),
        pytest.param(NOTES, {"selected_folders": ["notes"]}, "on", False, id="included"),
        pytest.param(NOTES, {"selected_folders": ["./notes/"]}, "on", False, id="selected-normalized"),
        pytest.param(NOTES, {"selected_folders": ["note"]}, "on", True, id="folder-boundary-note-vs-notes"),
        pytest.param([{"rel_path": "notes/sub/a.md"}], {"selected_folders": ["notes"]}, "on", False, id="nested"),
        pytest.param([{"rel_path": "a.md"}], {"selected_folders": ["notes"]}, "on", False,
                     id="root-note-always-in-scope"),
        pytest.param([{"rel_path": "a.md"}], {"selected_folders": []}, "on", False, id="root-note-empty-selection"),
        pytest.param(NOTES, {"selected_folders": ["/"]}, "on", False, id="root-selected"),
        pytest.param(NOTES, {"selected_folders": []}, "on", True, id="empty-selection-selects-nothing"),
        pytest.param(NOTES + [{"rel_path": "projects/p.md"}], {"selected_folders": ["projects"]}, "on", False,
                     id="one-of-two-inside-is-no-miss"),
        pytest.param(NOTES, {"selected_folders": ["projects"], "fallback_used": True}, "on_with_fallback", True,
                     id="fallback-not-consulted"),
        pytest.param(NOTES, {"selected_folders": ["Notes"]}, "on", True, id="folder-case-sensitive"),
    ],
)
def test_scope_miss(supports, selection, mode, expected):
    assert scope_miss(supports, selection, mode) is expected


# ---------------------------------------------------------------- attribution

def test_attribution_hit():
    golds = [{"rel_path": "notes/a.md", "heading_path": "# A", "snippets": ["never in a reference"]}]
    assert attribution_hit(golds, [{"rel_path": "notes/a.md", "heading_path": "# A > ## B"}]) is True
    assert attribution_hit(golds, [{"rel_path": "notes/b.md", "heading_path": "# A"}]) is False
    assert attribution_hit(golds, []) is False
    assert attribution_hit([], [{"rel_path": "x.md"}]) is None


# ---------------------------------------------------------------- recency

NEW = {"rel_path": "docs/v2.md", "heading_path": "# Overview", "date": "2024-06-01"}
OLD = {"rel_path": "docs/v1.md", "heading_path": "# Overview", "date": "2023-01-10"}
REF_NEW = {"rel_path": "docs/v2.md", "heading_path": "# Overview"}
REF_OLD = {"rel_path": "docs/v1.md", "heading_path": "# Overview"}


@pytest.mark.parametrize(
    ("rule", "refs", "retrieved", "expected"),
    [
        pytest.param("cite_newer", [REF_NEW], [], True, id="newer-cited"),
        pytest.param("cite_newer", [REF_OLD], [], False, id="only-older-cited"),
        pytest.param("cite_newer", [REF_NEW, REF_OLD], [], False, id="newer-and-older-cited"),
        pytest.param("cite_newer", [], [], False, id="nothing-cited"),
        pytest.param("cite_both", [REF_NEW, REF_OLD], [], True, id="both-cited"),
        pytest.param("cite_both", [REF_NEW], [], False, id="one-cited"),
        # acknowledge_both: retrieval AND the conflict judge's verdict (issue 30 item 5)
        pytest.param("acknowledge_both", [], [{0}, {1}], True, id="both-retrieved-acknowledged"),
        pytest.param("acknowledge_both", [REF_NEW, REF_OLD], [{0}], False, id="one-retrieved-acknowledged"),
    ],
)
def test_recency_rules(rule, refs, retrieved, expected):
    supports = [NEW, OLD]
    out = recency_check(rule, supports, table(retrieved, n=2), 5, refs, acknowledged=True)
    assert out["pass"] is expected
    assert out["rule"] == rule


@pytest.mark.parametrize(
    ("retrieved", "acknowledged", "expected"),
    [
        pytest.param([{0}, {1}], None, None, id="both-retrieved-not-judged"),  # regression: issue 30 item 5 (was True)
        pytest.param([{0}, {1}], False, False, id="both-retrieved-not-acknowledged"),
        pytest.param([{0}], None, None, id="one-retrieved-not-judged"),
        pytest.param([{0}], False, False, id="one-retrieved-not-acknowledged"),
    ],
)
def test_acknowledge_both_needs_the_conflict_judge(retrieved, acknowledged, expected):
    out = recency_check("acknowledge_both", [NEW, OLD], table(retrieved, n=2), 5, [], acknowledged=acknowledged)
    assert out["pass"] is expected and out["acknowledged"] is acknowledged
    assert out["all_retrieved"] is (len(retrieved) == 2)


def test_recency_dates_compare_as_dates_not_strings():
    new = dict(NEW, date="2024-06-01T09:00:00+02:00")
    old = dict(OLD, date="2024-06-01")
    out = recency_check("cite_newer", [new, old], table([], n=2), 5, [REF_NEW])
    assert out["pass"] is True and out["newest_cited"] is True


def test_recency_without_dates():
    undated = [{k: v for k, v in s.items() if k != "date"} for s in (NEW, OLD)]
    assert recency_check("cite_newer", undated, table([], n=2), 5, [REF_NEW])["pass"] is None
    assert recency_check("cite_both", undated, table([], n=2), 5, [REF_NEW, REF_OLD])["pass"] is True
    assert recency_check(None, [NEW], table([], n=1), 5, []) is None


def test_recency_bad_date():
    with pytest.raises(InputError, match="gold_supports\\[0\\].date"):
        recency_check("cite_newer", [dict(NEW, date="June")], table([], n=1), 5, [])


# ---------------------------------------------------------------- score_case_retrieval


def c(rel_path, heading_path, **kw):
    return {"rel_path": rel_path, "heading_path": heading_path, "text": kw.pop("text", ""), **kw}


CASE = {
    "answerable": True,
    "gold_supports": [
        {"rel_path": "notes/a.md", "heading_path": "# A"},
        {"rel_path": "notes/b.md", "heading_path": "# B", "relevance": 2},
    ],
    "required_support_groups": [[0, 1]],
}


def test_score_case_primary_and_at_k():
    chunks = [
        c("x.md", "# X", rank=1),
        c("notes/b.md", "# B > ## Sub", rank=2),
        c("y.md", "# Y", rank=3),
        c("notes/a.md", "#A", rank=4),
    ]
    out = score_case_retrieval(CASE, chunks, [c("notes/b.md", "# B")], {"selected_folders": ["notes"]}, "on", [3, 5])
    assert out["k"] == 3
    # by hand @3: gold 1 hit at position 2
    assert out["recall_at_k"] == 1.0
    assert out["recall_frac"] == 1 / 2
    assert out["recall_all"] == 0.0
    assert out["precision_at_k"] == 1 / 3
    assert out["mrr"] == 1 / 2
    idcg = (2**2 - 1) / math.log2(2) + (2**1 - 1) / math.log2(3)
    assert out["ndcg_at_k"] == pytest.approx(((2**2 - 1) / math.log2(3)) / idcg, abs=1e-12)
    # by hand @5: both golds, positions 2 and 4; precision over K=5
    at5 = out["at_k"]["5"]
    assert at5["recall_all"] == 1.0 and at5["recall_frac"] == 2 / 2
    assert at5["precision"] == 2 / 5
    assert at5["ndcg"] == pytest.approx((3 / math.log2(3) + 1 / math.log2(5)) / idcg, abs=1e-12)
    assert out["at_k"]["3"]["precision"] == out["precision_at_k"]
    assert out["scope_miss"] is False
    assert out["attribution_hit"] is True
    assert out["status"] == "scored"
    assert out["gold_hit"] == [1] and out["first_match_rank"] == 2


def test_score_case_require_snippets_on_chunks_not_references():
    case = {"answerable": True, "gold_supports": [{"rel_path": "a.md", "heading_path": "# A", "snippets": ["magic"]}]}
    chunks = [c("a.md", "# A", text="no such word")]
    refs = [c("a.md", "# A")]
    loose = score_case_retrieval(case, chunks, refs, None, "off", [5])
    strict = score_case_retrieval(case, chunks, refs, None, "off", [5], require_snippets=True)
    assert loose["recall_at_k"] == 1.0
    assert strict["recall_at_k"] == 0.0
    assert strict["attribution_hit"] is True  # references carry no text: snippets never required there


def test_score_case_accepts_models():
    from evalkit.schema import EvalCase, RetrievedChunk

    case = EvalCase(id="q", question="?", answerable=True, gold_supports=[{"rel_path": "a.md", "heading_path": "# A"}])
    out = score_case_retrieval(case, [RetrievedChunk(rel_path="a.md", heading_path="# A")], [], None, "off", [1])
    assert out["recall_at_k"] == 1.0 and out["attribution_hit"] is False


# ---------------------------------------------------------------- edge-case matrix (ir_measures test_empty style)

GOLD1 = {
    "answerable": True,
    "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}],
    "required_support_groups": [[0]],
}
HIT = c("a.md", "# A", chunk_id="h")
MISS = c("z.md", "# Z", chunk_id="m")
ALL = ("recall_at_k", "recall_all", "recall_frac", "precision_at_k", "mrr", "ndcg_at_k", "attribution_hit")
NONE_ROW = dict.fromkeys(ALL)
ZERO_ROW = {**dict.fromkeys(ALL, 0.0), "attribution_hit": False}


@pytest.mark.parametrize(
    ("case", "chunks", "refs", "k", "expected"),
    [
        pytest.param({"answerable": True, "gold_supports": []}, [HIT], [HIT], 3, NONE_ROW, id="no-gold-supports"),
        pytest.param({"answerable": False, "gold_supports": []}, [HIT], [], 3, NONE_ROW, id="unanswerable"),
        pytest.param(GOLD1, [], [HIT], 3, {**ZERO_ROW, "attribution_hit": True}, id="empty-retrieval"),
        # by hand: one hit at position 1 of a 1-chunk list, K=10: precision 1/10, everything else 1
        pytest.param(GOLD1, [HIT], [HIT], 10,
                     {"recall_at_k": 1.0, "recall_all": 1.0, "recall_frac": 1.0, "precision_at_k": 1 / 10,
                      "mrr": 1.0, "ndcg_at_k": 1.0, "attribution_hit": True}, id="k-larger-than-list"),
        # by hand: HIT, HIT (duplicate: earns nothing), MISS; K=3
        pytest.param(GOLD1, [HIT, HIT, MISS], [HIT], 3,
                     {"recall_at_k": 1.0, "recall_all": 1.0, "recall_frac": 1.0, "precision_at_k": 1 / 3,
                      "mrr": 1.0, "ndcg_at_k": 1.0, "attribution_hit": True}, id="duplicate-chunks"),
        # by hand: MISS then a duplicate of HIT only after HIT at 2: the copy at 3 earns nothing
        pytest.param(GOLD1, [MISS, HIT, HIT], [], 3,
                     {"recall_at_k": 1.0, "recall_all": 1.0, "recall_frac": 1.0, "precision_at_k": 1 / 3,
                      "mrr": 1 / 2, "ndcg_at_k": 1 / math.log2(3), "attribution_hit": False}, id="duplicate-after-hit"),
        # the caller scores a target error by passing no chunks and no references
        pytest.param(GOLD1, [], [], 3, ZERO_ROW, id="target-error"),
    ],
)
def test_edge_matrix(case, chunks, refs, k, expected):
    out = score_case_retrieval(case, chunks, refs, {"selected_folders": []}, "on", [k])
    for name in ALL:
        if expected[name] is None or isinstance(expected[name], bool):
            assert out[name] is expected[name], name
        else:
            assert out[name] == pytest.approx(expected[name], abs=1e-12), name
    assert out["at_k"][str(k)]["recall_any"] == expected["recall_at_k"]
    if None in expected.values():
        assert out["scope_miss"] is None and out["recency"] is None
        assert all(v is None for v in out["at_k"][str(k)].values())
    else:
        assert out["scope_miss"] is False


def test_edge_status():
    assert score_case_retrieval({"answerable": False}, [], [], None, "off", [5])["status"] == "unanswerable"
    assert score_case_retrieval({"answerable": True}, [], [], None, "off", [5])["status"] == "unlabeled"
    assert score_case_retrieval(GOLD1, [], [], None, "off", [5])["status"] == "scored"
    dup = score_case_retrieval(GOLD1, [HIT, HIT], [], None, "off", [5])
    assert dup["n_duplicates"] == 1 and dup["n_retrieved"] == 2
