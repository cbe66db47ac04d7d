"""Per-case record building in evalkit/run/records.py (pure functions, no sockets)."""

from __future__ import annotations

import pytest

from evalkit.config import RunSettings
from evalkit.errors import BadConfig, TargetError
from evalkit.evalset.load import EvalSet
from evalkit.run.records import build_record, build_request, error_record, select_cases, versions_tuple
from evalkit.schema import EvalCase, ResultRecord
from evalkit.targets.base import parse_ask_response
from tests.support import eval_case

EVAL_SET = EvalSet(cases=[], files=[], version="v" * 64, commit_hash=None)
LONG = "x" * 250 + " the secret snippet " + "y" * 50  # snippet starts after char 200


# The case most tests here build a record for: answerable, one snippet-bearing gold support, a
# vault and a folder for the request's scope.
SECRET = {"question": "Where is the secret?",
          "gold_supports": [{"rel_path": "a.md", "heading_path": "# A", "snippets": ["secret snippet"]}],
          "vaults": ["personal"], "folders": ["notes"]}


def _chunk(rel_path: str, rank: int | None, text: str = "t", heading: str = "# A") -> dict:
    return {
        "chunk_id": f"{rel_path}-{rank}",
        "rel_path": rel_path,
        "heading_path": heading,
        "start_line": 1,
        "end_line": 2,
        "score_vector": 0.5,
        "score_lexical": 0.5,
        "score_final": 0.5,
        "text": text,
        "rank": rank,
        "token_count": 3,
    }


def _response(chunks, answer="It is in A [1].", abstained=False, timings=None, **extra) -> dict:
    return {
        "answer": answer,
        "references": [{"chunk_id": "a.md-1", "rel_path": "a.md", "heading_path": "# A"}],
        "abstained": abstained,
        "debug": {
            "retrieved_chunks": chunks,
            "timings_ms": timings if timings is not None else {"retrieval": 12.5, "generation": 40.0},
            "versions": {"index_build_version": "idx1", "retriever_version": "r1", "llm_model": "m1"},
        },
        **extra,
    }


def _build(case, raw, **settings):
    s = RunSettings(**settings)
    result = parse_ask_response(raw, build_request(case, s))
    return build_record(
        3,
        case,
        result,
        settings=s,
        total_ms=123.4567,
        run_versions={},
        judge_desc={"provider": None},
        coverage={"docs_processed": 2},
        eval_set=EVAL_SET,
    )


def test_build_request_uses_largest_k_and_params_and_sends_no_scope_by_default():
    s = RunSettings(k=[5, 10, 3], folder_mode="on", rerank_vector_weight=0.6, rerank_lexical_weight=0.4, params={"t": 1})
    req = build_request(eval_case("c1", **SECRET), s)
    assert req.k == 10
    assert req.folder_mode == "on"
    # the case's scope is written from its gold labels: sending it would leak the answer's location
    assert req.vaults == [] and req.folders == []
    assert req.rerank_weights.vector == 0.6 and req.rerank_weights.lexical == 0.4
    assert req.options == {"t": 1} and req.debug is True


def test_metrics_use_full_text_then_text_is_truncated():
    rec, full = _build(eval_case("c1", **SECRET), _response([_chunk("a.md", 1, LONG)]), require_snippets=True)
    # by hand: the only chunk matches a.md/# A and contains the snippet (at char 251) -> hit at rank 1
    assert rec["retrieval_metrics"]["recall_at_k"] == 1.0
    assert rec["retrieval_metrics"]["mrr"] == 1.0
    stored = rec["retrieved_chunks"][0]
    assert stored["text"] == LONG[:200] and stored["text_truncated"] is True
    assert full[0]["text"] == LONG  # the judges get the full text
    ResultRecord.model_validate(rec)


def test_store_full_text_keeps_text():
    rec, _ = _build(eval_case("c1", **SECRET), _response([_chunk("a.md", 1, LONG)]), store_full_text=True)
    assert rec["retrieved_chunks"][0]["text"] == LONG
    assert rec["retrieved_chunks"][0]["text_truncated"] is False


def test_chunks_are_put_in_rank_order_and_missing_ranks_filled():
    rec, _ = _build(eval_case("c1", **SECRET), _response([_chunk("b.md", 2), _chunk("a.md", 1)]))
    assert [c["rel_path"] for c in rec["retrieved_chunks"]] == ["a.md", "b.md"]
    rec, _ = _build(eval_case("c1", **SECRET), _response([_chunk("b.md", None), _chunk("a.md", None)]))
    assert [c["rank"] for c in rec["retrieved_chunks"]] == [1, 2]
    # by hand: gold a.md at position 2 -> MRR 1/2
    assert rec["retrieval_metrics"]["mrr"] == 1 / 2


def test_latency_config_and_identity_fields():
    rec, _ = _build(eval_case("c1", **SECRET), _response([_chunk("a.md", 1)]), k=[5, 10])
    assert rec["test_case_id"] == "c1" and rec["case_index"] == 3
    assert rec["case"]["id"] == "c1" and rec["question"] == "Where is the secret?"
    assert rec["latency"] == {
        "total_ms": 123.457,
        "folder_selection_ms": None,
        "retrieval_ms": 12.5,
        "generation_ms": 40.0,
        "judge_ms": None,
    }
    assert rec["config"]["k"] == 10 and rec["config"]["ks"] == [5, 10]
    assert rec["config"]["dataset_version"] == "v" * 64
    assert rec["config"]["index_build_version"] == "idx1"
    assert rec["config"]["retriever_version"] == "r1+k10+rerank_70_30+folder_off"
    assert rec["config"]["llm_model"] == "m1"
    assert rec["indexing_coverage"] == {"docs_processed": 2}
    assert rec["retrieval_metrics"]["k"] == 5 and set(rec["retrieval_metrics"]["at_k"]) == {"5", "10"}
    assert "debug.folder_selection" not in rec["missing_fields"]  # folder_mode off
    assert "debug.versions.answerer_version" in rec["missing_fields"]


def test_abstention_from_the_target():
    rec, _ = _build(eval_case("c1", **{**SECRET, "gold_supports": []}, answerable=False), _response([], abstained=False))
    assert rec["abstention"]["method"] == "target"
    assert rec["abstention"]["abstained"] is False and rec["abstention"]["hallucinated"] is True
    rec, _ = _build(eval_case("c1", **SECRET), _response([], answer="", abstained=True, abstain_reason="no_context"))
    assert rec["abstention"]["abstained"] is True and rec["abstention"]["reason"] == "no_context"
    assert rec["error"] is None  # an abstention with an empty answer is not an empty answer


def test_unknown_abstention_stays_null_for_the_judge():
    raw = _response([_chunk("a.md", 1)])
    del raw["abstained"]
    rec, _ = _build(eval_case("c1", **SECRET), raw)
    assert rec["abstention"]["abstained"] is None and rec["abstention"]["method"] is None
    assert "abstained" in rec["missing_fields"]


def test_empty_answer_is_an_error_but_keeps_retrieval_metrics():
    rec, _ = _build(eval_case("c1", **SECRET), _response([_chunk("a.md", 1)], answer="  \n"))
    assert rec["error"]["kind"] == "empty_answer"
    assert rec["retrieval_metrics"]["recall_at_k"] == 1.0
    ResultRecord.model_validate(rec)


def test_error_record_scores_retrieval_as_system_failure():
    s = RunSettings(k=[5, 10])
    rec = error_record(
        0,
        eval_case("c1", **SECRET),
        TargetError("timeout", "ReadTimeout after 1s"),
        settings=s,
        total_ms=1000.0,
        config={"k": 10},
        coverage=None,
    )
    assert rec["error"] == {"kind": "timeout", "status": None, "detail": "ReadTimeout after 1s"}
    assert rec["answer"] is None and rec["retrieved_chunks"] == []
    # by hand: nothing retrieved for a labeled answerable case -> every metric is 0, not None
    assert rec["retrieval_metrics"]["recall_at_k"] == 0.0
    assert rec["retrieval_metrics"]["mrr"] == 0.0
    assert rec["retrieval_metrics"]["at_k"]["10"]["recall_any"] == 0.0
    assert rec["latency"]["total_ms"] == 1000.0
    ResultRecord.model_validate(rec)


def test_http_error_keeps_status_and_tries():
    rec = error_record(
        0, eval_case("c1", **SECRET), TargetError("http_error", "HTTP 503 (3 tries)", status=503, attempts=3), settings=RunSettings(),
        total_ms=1.0, config={}, coverage=None,
    )
    assert rec["error"]["status"] == 503
    assert rec["attempts"] == 3  # regression: review finding 8, error records had attempts null


def test_no_long_string_escapes_truncation():
    # regression: review finding 4 — a reference's text and a chunk's extra field were stored whole
    chunk = {**_chunk("a.md", 1, LONG), "content": LONG}
    raw = _response([chunk])
    raw["references"][0]["text"] = LONG
    rec, full = _build(eval_case("c1", **SECRET), raw)
    assert rec["retrieved_chunks"][0]["content"] == LONG[:200]
    assert rec["references"][0]["text"] == LONG[:200]
    assert rec["references"][0]["heading_path"] == "# A"  # locations are never cut
    assert full[0]["content"] == LONG  # in memory, the judges still get everything
    kept, _ = _build(eval_case("c1", **SECRET), raw, store_full_text=True)
    assert kept["references"][0]["text"] == LONG and kept["retrieved_chunks"][0]["content"] == LONG


def test_replayed_latency_is_the_cases_total():
    # regression: review finding 7 — a replay log's latency_ms was ignored
    s = RunSettings()
    result = parse_ask_response(_response([_chunk("a.md", 1)]), build_request(eval_case("c1", **SECRET), s))
    result.logged_total_ms = 812.0
    rec, _ = build_record(
        0, eval_case("c1", **SECRET), result, settings=s, total_ms=0.2, run_versions={}, judge_desc={"provider": None},
        coverage=None, eval_set=EVAL_SET,
    )
    assert rec["latency"]["total_ms"] == 812.0


CASES = [
    EvalCase(id="a", question="qa", answerable=True, tags=["work"], category="factual"),
    EvalCase(id="b", question="qb", answerable=True, tags=["personal"], category="multi_hop"),
    EvalCase(id="c", question="qc", answerable=True, tags=["work", "code"], category="multi_hop"),
    EvalCase(id="d", question="qd", answerable=True, tags=[], category="factual"),
]


def test_select_cases_filters_keep_order_and_set_index():
    assert [(i, c.id) for i, c in select_cases(CASES)] == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    assert [c.id for _, c in select_cases(CASES, ids=["c", "a"])] == ["a", "c"]
    assert [c.id for _, c in select_cases(CASES, tags=["work"])] == ["a", "c"]
    assert [c.id for _, c in select_cases(CASES, tags=["code", "personal"])] == ["b", "c"]
    assert [c.id for _, c in select_cases(CASES, categories=["multi_hop"], tags=["work"])] == ["c"]
    assert [(i, c.id) for i, c in select_cases(CASES, categories=["factual"], limit=1)] == [(0, "a")]
    assert [i for i, _ in select_cases(CASES, ids=["d"])] == [3]


def test_select_cases_errors():
    with pytest.raises(BadConfig) as e:
        select_cases(CASES, ids=["a", "zz", "yy"])
    assert [p.message for p in e.value.problems] == [
        "no case with id 'zz' in the eval set",
        "no case with id 'yy' in the eval set",
    ]
    with pytest.raises(BadConfig, match="--tag nope"):
        select_cases(CASES, tags=["nope"])


def test_versions_tuple_from_target_and_flags():
    s = RunSettings(k=[5], rerank_vector_weight=0.7, rerank_lexical_weight=0.3, folder_mode="on_with_fallback")
    v = versions_tuple(
        s, EVAL_SET, {"chunker_version": "v1.2", "embedding_model": "granite-278m", "llm_model": "llama3.2"},
        {"provider": "openai", "model": "gpt-x", "version": "gpt-x+grounded_v1"},
    )
    assert v == {
        "dataset_version": "v" * 64,
        "index_build_version": "chunker_v1.2+embedding_granite-278m",
        "retriever_version": "k5+rerank_70_30+folder_on_with_fallback",
        "answerer_version": "llm_llama3.2",
        "judge_version": "gpt-x+grounded_v1",
        "llm_model": "llama3.2",
        "embedding_model": "granite-278m",
        "chunker_version": "v1.2",
    }
    v = versions_tuple(s, EVAL_SET, None, {"provider": None})
    assert v["index_build_version"] is None and v["judge_version"] is None
    assert v["retriever_version"] == "k5+rerank_70_30+folder_on_with_fallback"


@pytest.mark.parametrize(
    ("send_scope", "vaults", "folders"),
    [("none", [], []), ("vaults", ["personal"], []), ("folders", [], ["notes"]), ("both", ["personal"], ["notes"])],
)
def test_send_scope_sends_only_what_it_names(send_scope, vaults, folders):
    req = build_request(eval_case("c1", **SECRET), RunSettings(send_scope=send_scope))
    assert (req.vaults, req.folders) == (vaults, folders)


def test_send_scope_is_result_affecting():
    assert RunSettings().hashed()["send_scope"] == "none"
    assert RunSettings(send_scope="both").hashed() != RunSettings().hashed()
