"""Property tests (hypothesis) for the retrieval kernels and abstention rates. # property"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.evalset.anchors import MatchTable, match_ranking, match_support
from evalkit.metrics.abstention import aggregate_abstention
from evalkit.metrics.retrieval import mrr, ndcg, precision, recall_all, recall_any, recall_frac

EPS = 1e-12


@st.composite
def tables(draw):
    n = draw(st.integers(0, 5))
    positions = draw(st.integers(0, 12))
    matches = [frozenset(draw(st.sets(st.integers(0, n - 1)))) if n else frozenset() for _ in range(positions)]
    relevance = draw(st.lists(st.floats(0, 4, allow_nan=False), min_size=n, max_size=n))
    groups = None
    if n and draw(st.booleans()):
        groups = draw(st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=n), min_size=1, max_size=3))
    k = draw(st.integers(1, 15))
    return MatchTable(matches=matches, relevance=relevance, n_supports=n), groups, k


@settings(max_examples=300, deadline=None)
@given(tables())
def test_kernel_properties(args):
    # property
    t, groups, k = args
    values = {
        "recall_any": recall_any(t, k),
        "recall_all": recall_all(t, k, groups),
        "recall_frac": recall_frac(t, k),
        "precision": precision(t, k),
        "mrr": mrr(t, k),
        "ndcg": ndcg(t, k),
    }
    if t.n_supports == 0:
        assert all(v is None for v in values.values())
        return
    for name, v in values.items():
        if v is not None:
            assert 0.0 <= v <= 1.0, name
    ra = values["recall_any"]
    if values["recall_all"] is not None:
        assert values["recall_all"] <= ra
    assert values["mrr"] <= ra
    assert values["recall_frac"] <= ra
    n_matching = sum(1 for m in t.matches if m)
    assert values["precision"] * k <= n_matching + EPS
    # monotone in K: recall never drops when K grows
    assert recall_frac(t, k + 1) >= values["recall_frac"]
    assert recall_any(t, k + 1) >= ra
    # a hit exists exactly when mrr > 0
    assert (values["mrr"] > 0) == (ra == 1.0)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["a.md|# A", "a.md|# A > ## B", "a.md|# AB", "b.md|# B", "c.md|"]), max_size=10),
    st.lists(st.sampled_from(["a.md|# A", "a.md|# A > ## B", "b.md|# B", "c.md|"]), min_size=1, max_size=4),
    st.integers(1, 12),
)
def test_properties_through_anchor_matching(retrieved, gold, k):
    # property: the same invariants hold on tables built by match_ranking, duplicates included
    chunks = [{"rel_path": r.split("|")[0], "heading_path": r.split("|")[1], "text": ""} for r in retrieved]
    supports = [{"rel_path": g.split("|")[0], "heading_path": g.split("|")[1]} for g in gold]
    t = match_ranking(chunks, supports)
    distinct_matching = {
        (c["rel_path"], c["heading_path"]) for c in chunks if any(match_support(s, c) for s in supports)
    }
    assert precision(t, k) * k <= len(distinct_matching) + EPS
    assert mrr(t, k) <= recall_any(t, k)
    assert 0.0 <= ndcg(t, k) <= 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.one_of(st.none(), st.booleans())), max_size=40))
def test_abstention_rates_in_unit_interval(items):
    # property
    out = aggregate_abstention(items)
    rates = [name for name, v in out.items() if not isinstance(v, dict) and name != "n_abstention_unknown"]
    assert len(rates) == 7
    for name in rates:
        assert out[name] is None or 0.0 <= out[name] <= 1.0, name
    acc, hal = out["abstention_accuracy"], out["hallucination_rate_unanswerable"]
    assert (acc is None) == (hal is None)
    if acc is not None:
        assert abs(acc + hal - 1.0) < EPS
    confusion = out["abstention_confusion"]
    known = sum(v for row in confusion.values() for v in row.values())
    assert known + out["n_abstention_unknown"] == len(items)
