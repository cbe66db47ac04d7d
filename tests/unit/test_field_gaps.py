"""Any two chatbots compare (issue 36 item 7): a contract field one target leaves out blinds
only the metrics that read it (evalkit/gate/fields.py), never the pair."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from evalkit.compare import compare_runs
from evalkit.evalset.anchors import support_forms
from evalkit.gate.fields import LATENCY, blinded, field_gaps, scored_forms
from evalkit.metrics.aggregate import aggregate_records
from evalkit.metrics.expectations import RETRIEVED_EXPECTATIONS

AT_K = ("recall_at_k_avg", "mrr_avg", "precision_at_k_avg", "ndcg_at_k_avg", "recall_all_avg", "recall_frac_avg")
# Every metric these runs "measured": a value in the aggregate (fields._measured reads that).
EVERYTHING = (*AT_K, "recency_pass_rate", *RETRIEVED_EXPECTATIONS, "scope_miss_rate", "attribution_hit_rate",
              "has_citations_rate", "abstention_accuracy", "false_abstention_rate")


def _run(missing: list[str], forms: list[str] | None, measured: tuple[str, ...] = EVERYTHING) -> dict:
    inv: dict = {"debug_fields_missing": missing}
    if forms is not None:
        inv["gold_forms"] = forms
    return {"aggregate_metrics": dict.fromkeys(measured, 0.5), "invariants": inv}


def _gap(field: str, forms: list[str] | None, measured: tuple[str, ...] = EVERYTHING):
    (gap,) = field_gaps(_run([], forms, measured), _run([field], forms, measured))
    return gap


@pytest.mark.parametrize(
    ("field", "forms", "blind"),
    [
        # the reproduction: debug-only fields no metric reads
        pytest.param("debug.retrieved_chunks[].score_vector", ["anchor"], (), id="score_vector"),
        pytest.param("debug.retrieved_chunks[].score_final", ["anchor"], (), id="score_final"),
        pytest.param("debug.retrieved_chunks[].rank", ["anchor"], (), id="rank-list-order"),
        # the token budget of fact_retention counts token_count
        pytest.param("debug.retrieved_chunks[].token_count", ["anchor"], ("fact_retention",), id="token_count"),
        # the anchor rule reads rel_path + heading_path; line spans read start/end_line
        pytest.param("debug.retrieved_chunks[].start_line", ["anchor"], (), id="lines-anchor-labels"),
        pytest.param("debug.retrieved_chunks[].start_line", ["span"], (*AT_K, "recency_pass_rate"), id="lines-span-labels"),
        pytest.param("debug.retrieved_chunks[].heading_path", ["anchor"], (*AT_K, "recency_pass_rate"), id="heading"),
        pytest.param("debug.retrieved_chunks[].heading_path", ["chunk_id"], (), id="heading-chunk-id-labels"),
        pytest.param("debug.retrieved_chunks[].chunk_id", ["chunk_id"], (*AT_K, "recency_pass_rate"), id="chunk-id"),
        # text: the retrieved-side expectations always; the @K metrics only for required snippets
        pytest.param("debug.retrieved_chunks[].text", ["anchor"], RETRIEVED_EXPECTATIONS, id="text"),
        pytest.param("debug.retrieved_chunks[].text", ["anchor", "snippets"],
                     (*RETRIEVED_EXPECTATIONS, *AT_K, "recency_pass_rate"), id="text-snippets"),
        pytest.param("debug.folder_selection.selected_folders", ["anchor"], ("scope_miss_rate",), id="folders"),
        pytest.param("debug.folder_selection.fallback_used", ["anchor"], (), id="fallback-used"),
        pytest.param("debug.timings_ms.retrieval", ["anchor"], (LATENCY,), id="timings-leaf"),
        pytest.param("debug.versions.llm_model", ["anchor"], (), id="versions"),
        pytest.param("references", ["anchor"], ("attribution_hit_rate", "recency_pass_rate", "has_citations_rate"),
                     id="references"),
        pytest.param("references[].start_line", ["anchor"], (), id="reference-lines-anchor-labels"),
        pytest.param("references[].heading_path", ["anchor"], ("attribution_hit_rate", "recency_pass_rate"),
                     id="reference-heading"),
        pytest.param("abstained", ["anchor"], ("abstention_accuracy", "false_abstention_rate"), id="abstained"),
        pytest.param("abstain_reason", ["anchor"], (), id="abstain-reason"),
        # a run that recorded no gold forms may use any: lines are read
        pytest.param("debug.retrieved_chunks[].end_line", None, (*AT_K, "recency_pass_rate"), id="no-forms-recorded"),
    ],
)
def test_what_each_field_blinds(field, forms, blind):
    gap = _gap(field, forms)
    assert gap.metrics == blind
    assert gap.side == "new run" and gap.reason.startswith(f"the new run's target leaves out {field} (the baseline's sends it): ")


def test_a_reader_neither_run_measured_blocks_nothing_and_says_why():
    # fact_retention needs a case with a token budget; without one it is null in both runs
    gap = _gap("debug.retrieved_chunks[].token_count", ["anchor"], measured=AT_K)
    assert gap.metrics == ()
    assert gap.message == (
        "the new run's target leaves out debug.retrieved_chunks[].token_count (the baseline's sends it): no metric "
        "either run measured reads it (fact_retention: the token budget counts it (ceil(len(text) / 4) without it)); "
        "nothing is blocked"
    )
    score = _gap("debug.retrieved_chunks[].score_vector", ["anchor"])
    assert score.message.endswith("no metric reads it (chunk scores are shown, never scored); nothing is blocked")
    lines = _gap("debug.retrieved_chunks[].start_line", ["anchor"])
    assert "read for gold supports of form span, which these labels do not use" in lines.why


def test_sides_and_sections():
    # the baseline lacks the whole chunk list, the new run only their text: one gap, the section's
    base, new = _run(["debug.retrieved_chunks"], ["anchor"]), _run(["debug.retrieved_chunks[].text"], ["anchor"])
    (gap,) = field_gaps(base, new)
    assert (gap.field, gap.side) == ("debug.retrieved_chunks", "baseline")
    assert gap.reason.startswith("the baseline's target leaves out debug.retrieved_chunks (the new run's sends it)")
    assert blinded([gap])["recall_at_k_avg"] == gap.reason
    # the same field left out by both: no gap; an older metrics.json without the block: none either
    assert field_gaps(new, new) == []
    assert field_gaps({"aggregate_metrics": {}}, new) == []


def test_gold_forms():
    assert support_forms({"rel_path": "a.md", "heading_path": "# A", "snippets": ["x"]}) == {"anchor", "snippets"}
    assert support_forms({"rel_path": "a.md", "start_line": 3, "end_line": 9}) == {"span"}  # no heading: span only
    assert support_forms({"rel_path": "a.md", "start_line": 3, "end_line": 9, "heading_path": ""}) == {"span", "anchor"}
    assert support_forms({"rel_path": "a.md"}) == {"anchor"}  # the whole file
    assert support_forms({"chunk_id": "42"}) == {"chunk_id"}
    assert support_forms({"chunk_id": "42", "snippets": ["x"]}) == {"chunk_id"}  # snippets need a file
    # a run records "snippets" only when it required them
    assert scored_forms({"anchor", "snippets"}, require_snippets=False) == ["anchor"]
    assert scored_forms({"anchor", "snippets"}, require_snippets=True) == ["anchor", "snippets"]


def _record(cid: str) -> dict:
    """A results.jsonl record: an answerable case whose gold chunk comes back at rank 1 and is cited."""
    gold = {"rel_path": f"notes/{cid}.md", "heading_path": "# Gold"}
    return {
        "test_case_id": cid,
        "case": {"id": cid, "question": f"question {cid}?", "answerable": True, "gold_supports": [gold]},
        "answer": f"answer of {cid}", "references": [gold],
        "retrieved_chunks": [{**gold, "chunk_id": cid, "rank": 1}],
        "retrieval_metrics": {"k": 5, "at_k": {"5": {"recall_any": 1.0, "recall_all": None, "recall_frac": 1.0,
                                                     "precision": 0.2, "mrr": 1.0, "ndcg": 1.0}},
                              "attribution_hit": True, "scope_miss": None, "recency": None, "first_match_rank": 1},
        "abstention": {"abstained": False}, "latency": {"total_ms": 10.0},
    }


def _make_run(root: Path, run_id: str, missing: tuple[str, ...] = ()) -> None:
    """A run folder (results.jsonl, metrics.json from aggregate_records, config.json) of four cases."""
    records = [_record(f"c{i}") for i in range(1, 5)]
    folder = root / run_id
    folder.mkdir()
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    metrics = aggregate_records(records, ks=[5])
    metrics.update(run_id=run_id, dataset_version="d" * 64, ks=[5],
                   invariants={"judge": None, "debug_fields_missing": list(missing)})
    (folder / "metrics.json").write_bytes(orjson.dumps(metrics))
    (folder / "config.json").write_bytes(orjson.dumps({"run_id": run_id, "config_hash": run_id, "settings": {"k": [5]}}))


def test_compare_runs_compares_what_a_left_out_field_does_not_blind(tmp_path):
    # regression: issue 36 item 7, "debug payload fields differ" refused the pair (exit 2). Run b's
    # target leaves out score_vector (read by nothing) and the references' heading paths (read by
    # attribution, through the anchor rule).
    _make_run(tmp_path, "a")
    _make_run(tmp_path, "b", missing=("debug.retrieved_chunks[].score_vector", "references[].heading_path"))
    result = compare_runs("a", "b", results_dir=tmp_path, resamples=200)
    assert result.invariants.ok and result.invariants.violations == []
    why = ("the new run's target leaves out references[].heading_path (the baseline's sends it): gold anchors match "
           "on it")
    # by hand: these runs recorded no gold forms, so every form is assumed; of the readers
    # (attribution, recency, by the anchor rule) these runs measured attribution only
    assert [(nc.reason, nc.metrics) for nc in result.invariants.not_comparable] == [(why, ["attribution_hit_rate"])]
    assert result.invariants.warnings == [f"{why}; not compared: attribution_hit_rate"]
    for row in result.deltas:
        if row.metric == "attribution_hit_rate":
            assert row.comparable is False and row.note == f"not comparable: {why}"
        else:
            assert row.comparable, row
    assert any(n.startswith("the new run's target leaves out debug.retrieved_chunks[].score_vector") and
               n.endswith("nothing is blocked") for n in result.notes)
    # the gate skips attribution with the same reason, and compares the rest
    skipped = {s["metric"]: s["reason"] for s in result.gate.skipped if "scope" not in s}
    assert skipped.get("attribution_hit_rate") == why
