"""Run health warnings (evalkit/derive/health.py) on hand-made records."""

from __future__ import annotations

from typing import Any

from evalkit.derive.health import run_warnings


def _rec(cid: str, *, label_source: str | None = None, chunks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    case: dict[str, Any] = {
        "id": cid,
        "question": "q",
        "answerable": True,
        "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}],
    }
    if label_source is not None:
        case["label_source"] = label_source
    chunk = {"chunk_id": "c1", "rel_path": "a.md", "heading_path": "# A", "rank": 1}
    return {"test_case_id": cid, "case": case, "retrieved_chunks": [chunk] if chunks is None else chunks}


def _kinds(warnings: list[dict[str, Any]]) -> list[str]:
    return [w["kind"] for w in warnings]


def test_a_healthy_run_has_no_warning() -> None:
    assert run_warnings([_rec("a"), _rec("b")]) == []


def test_unreviewed_labels_are_named_once_each() -> None:
    recs = [_rec("a"), _rec("g1", label_source="generated"), _rec("x1", label_source="auto"), _rec("g1", label_source="generated")]
    w = [w for w in run_warnings(recs) if w["kind"] == "unreviewed_labels"]
    assert len(w) == 1
    # g1 twice (a --trials run asks each case N times) is one case; "of" counts the 4 records.
    assert w[0]["ids"] == ["g1", "x1"] and w[0]["n"] == 2 and w[0]["of"] == 4
    assert w[0]["severity"] == "warning" and "--review-auto" in w[0]["message"]


def test_a_reviewed_label_source_is_not_flagged() -> None:
    # label_eval removes label_source when a person accepts or edits a case; any other
    # value (a user's own provenance note) is not a review mark.
    assert _kinds(run_warnings([_rec("a", label_source="human")])) == []


def test_gold_the_target_did_retrieve_means_the_rest_are_misses_not_a_disagreement() -> None:
    # Issue 43: a LangChain run at --k 1 over the adapters' eval set missed 4 of 10 cases' gold
    # (BM25 misses; the other 6 matched at rank 1) and was told the anchors and the target
    # probably disagree. Here 4 of 10 miss (> 1/3) while 6 match (>= 1/3): misses, an info.
    def miss(i: int) -> dict[str, Any]:  # gold in a note no question retrieved
        rec = _rec(f"miss{i}", chunks=[{"chunk_id": "c9", "rel_path": "b.md", "heading_path": "# B", "rank": 1}])
        rec["case"]["gold_supports"] = [{"rel_path": f"m{i}.md", "heading_path": "# M"}]
        return rec

    recs = [_rec(f"hit{i}") for i in range(6)] + [miss(i) for i in range(4)]
    (w,) = [w for w in run_warnings(recs) if w["kind"] == "gold_never_retrieved"]
    assert w["n"] == 4 and w["of"] == 10 and w["severity"] == "info"
    assert "probably disagree" not in w["message"] and "retrieval misses" in w["message"]
    # 3 of 10 matching is under a third: the forms may well disagree
    recs = [_rec(f"hit{i}") for i in range(3)] + [miss(i) for i in range(7)]
    (w,) = [w for w in run_warnings(recs) if w["kind"] == "gold_never_retrieved"]
    assert w["severity"] == "warning" and "probably disagree" in w["message"]
