"""The answer's fast path (targets/base.plain_response, issue 39 item 4): for every answer it
takes, exactly what pydantic's validate-then-dump gives, key order included; every answer it
is not sure of goes to pydantic, which then accepts or refuses it as before."""

from __future__ import annotations

import copy
import json
import math

import pytest

from evalkit.errors import TargetError
from evalkit.schema import AskRequest, AskResponse
from evalkit.targets.base import parse_ask_response, plain_response

CHUNK = {"chunk_id": "c1", "rel_path": "notes/a.md", "heading_path": "# A", "start_line": 1, "end_line": 9,
         "score_vector": 0.9, "score_lexical": 0.5, "score_final": 0.78, "text": "Some text. " * 40, "rank": 1,
         "token_count": 80}
FULL = {
    "answer": "An answer [1].",
    "references": [{k: CHUNK[k] for k in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")}],
    "abstained": False,
    "debug": {
        "retrieved_chunks": [CHUNK, {**CHUNK, "chunk_id": "c2", "rank": 2}],
        "folder_selection": {"mode": "off", "selected_folders": [], "reasoning": "r", "fallback_used": False},
        "timings_ms": {"folder_selection": 0.0, "retrieval": 1.5, "generation": 2},
        "versions": {"index_build_version": "i", "retriever_version": "r", "answerer_version": "a",
                     "llm_model": "m", "embedding_model": "e", "chunker_version": "c"},
    },
}


def _edit(fn):
    raw = copy.deepcopy(FULL)
    fn(raw)
    return raw


# Answers the fast path takes: the same plain data as pydantic's.
TAKEN = {
    "full": FULL,
    "minimal": {"answer": "a"},
    "debug null": {"answer": "a", "debug": None},
    "no chunks": {"answer": "a", "debug": {}},
    "int in a float field": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(score_vector=1)),
    "chunk fields left out": {"answer": "a", "debug": {"retrieved_chunks": [{"rel_path": "x.md"}]}},
    "extras in input order": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(
        zeta=1, alpha={"body": "b" * 300, "list": [1, 2.5, None, True, {"k": "v"}]})),
    "extra top level": _edit(lambda r: r.update(extra_top={"nested": [1]}, another="x")),
    "extras before fields": {"zz": 1, "answer": "a", "debug": {"x": [], "retrieved_chunks": []}},
    "abstained": _edit(lambda r: r.update(abstained=True, abstain_reason="not in the notes", answer="")),
    "timings extra": _edit(lambda r: r["debug"]["timings_ms"].update(rerank=3.5)),
    "huge answer": _edit(lambda r: r.update(answer="x" * 300_000)),
    "unicode": _edit(lambda r: r.update(answer="é中😀 \ud800")),
    "negative zero, subnormal": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(score_lexical=-0.0,
                                                                                           score_final=1e-320)),
    "big int extra": _edit(lambda r: r.update(big=2 ** 70)),
    "fields in another order": _edit(lambda r: r["debug"].update(
        retrieved_chunks=[dict(reversed(c.items())) for c in r["debug"]["retrieved_chunks"]])),
    "nulls where allowed": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(
        chunk_id=None, start_line=None, score_vector=None, rank=None, token_count=None)),
}

# Answers it leaves to pydantic (which coerces, or refuses them).
LEFT = {
    "no answer": _edit(lambda r: r.pop("answer")),
    "answer null": _edit(lambda r: r.update(answer=None)),
    "answer a number": _edit(lambda r: r.update(answer=42)),
    "rank a float": _edit(lambda r: r["debug"]["retrieved_chunks"][1].update(rank=2.0)),
    "rank a string": _edit(lambda r: r["debug"]["retrieved_chunks"][1].update(rank="2")),
    "rank a bool": _edit(lambda r: r["debug"]["retrieved_chunks"][1].update(rank=True)),
    "int too big for a float": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(score_vector=2 ** 60 + 1)),
    "infinite score": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(score_vector=math.inf)),
    "NaN score": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(score_final=math.nan)),
    "NaN extra": _edit(lambda r: r.update(x=math.nan)),
    "tuple extra": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(t=(1, 2))),
    "set extra": _edit(lambda r: r.update(s={1})),
    "int key": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update({7: "x"})),
    "rel_path missing": _edit(lambda r: r["debug"]["retrieved_chunks"][0].pop("rel_path")),
    "heading_path null": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(heading_path=None)),
    "references null": _edit(lambda r: r.update(references=None)),
    "reference a string": _edit(lambda r: r.update(references=["x"])),
    "abstained a string": _edit(lambda r: r.update(abstained="true")),
    "abstained an int": _edit(lambda r: r.update(abstained=1)),
    "timing a string": _edit(lambda r: r["debug"]["timings_ms"].update(generation="7")),
    "folders a tuple": _edit(lambda r: r["debug"]["folder_selection"].update(selected_folders=("a",))),
    "chunk_id an int": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(chunk_id=12)),
    "str subclass": _edit(lambda r: r.update(answer=type("S", (str,), {})("a"))),
    "bool in a float field": _edit(lambda r: r["debug"]["retrieved_chunks"][0].update(score_final=True)),
    "infinite timing": _edit(lambda r: r["debug"]["timings_ms"].update(retrieval=-math.inf)),
    "a model inside": _edit(lambda r: r["debug"].update(versions=AskResponse(answer="x"))),
}


def _pydantic(raw):
    return AskResponse.model_validate(raw).model_dump(mode="json")


@pytest.mark.parametrize("name", TAKEN)
def test_the_fast_path_gives_what_pydantic_gives_key_order_included(name: str) -> None:
    raw = TAKEN[name]
    plain = plain_response(raw)
    assert plain is not None
    # json.dumps keeps key order and tells 1 from 1.0
    assert json.dumps(plain) == json.dumps(_pydantic(raw))
    result = parse_ask_response(raw, AskRequest(question="q"))
    assert json.dumps(result.plain) == json.dumps(plain) and result.response == AskResponse.model_validate(raw)


@pytest.mark.parametrize("name", LEFT)
def test_what_the_fast_path_is_not_sure_of_goes_to_pydantic(name: str) -> None:
    raw = LEFT[name]
    assert plain_response(raw) is None
    try:
        expected = _pydantic(raw)
    except Exception:  # refused: the same error as before
        with pytest.raises(TargetError) as e:
            parse_ask_response(raw, None)
        assert e.value.kind == "invalid_response" and "failed validation" in e.value.detail
        return
    assert json.dumps(parse_ask_response(raw, None).plain, allow_nan=True) == json.dumps(expected, allow_nan=True)


def test_the_plain_data_is_a_copy_not_the_targets_own_objects() -> None:
    # A python: target may answer the same dict every time; records edit what they are built from.
    raw = TAKEN["extras in input order"]
    plain = plain_response(raw)
    chunk, original = plain["debug"]["retrieved_chunks"][0], raw["debug"]["retrieved_chunks"][0]
    assert chunk is not original and chunk["alpha"] is not original["alpha"]
    assert chunk["alpha"]["list"] is not original["alpha"]["list"]
    assert plain["debug"]["folder_selection"]["selected_folders"] is not raw["debug"]["folder_selection"]["selected_folders"]


def test_timings_and_missing_fields_are_those_of_the_pydantic_path() -> None:
    raw = _edit(lambda r: (r["debug"]["timings_ms"].update(rerank=3, note="slow"), r["references"][0].pop("end_line")))
    fast = parse_ask_response(raw, None)
    assert fast.server_timings_ms == {"folder_selection": 0.0, "retrieval": 1.5, "generation": 2.0, "rerank": 3.0}
    assert fast.missing_fields == ["references[].end_line"]
    slow = parse_ask_response({**raw, "odd": (1,)}, None)  # the same answer through pydantic
    assert slow.server_timings_ms == fast.server_timings_ms and slow.missing_fields == fast.missing_fields


def test_an_answer_nested_deeper_than_python_recurses_goes_to_pydantic() -> None:
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["d"] = {}
        node = node["d"]
    assert plain_response({"answer": "a", "deep": deep}) is None


# --------------------------------------------------------------------------- the request body

REQUESTS = {
    "default": AskRequest(question="Where?"),
    "scoped": AskRequest(question="Where?", k=20, folder_mode="on_with_fallback", vaults=["v"], folders=["a", "b"],
                         rerank_weights={"vector": 0.5, "lexical": 0.5}, options={"collection": "c", "n": [1, {"x": None}]}),
    "int weights": AskRequest(question="Where?", rerank_weights={"vector": 1, "lexical": 0}),
    "a conversation": AskRequest(question="And then?", history=[{"role": "user", "content": "First?"},
                                                               {"role": "assistant", "content": None}],
                                 conversation_id="c1"),
    "an id alone": AskRequest(question="Where?", conversation_id="c1"),
    "a tuple option": AskRequest(question="Where?", options={"t": (1, 2)}),
    "a NaN option": AskRequest(question="Where?", options={"x": math.nan}),
    "an infinite weight": AskRequest(question="Where?", rerank_weights={"vector": math.inf, "lexical": 0.3}),
}


@pytest.mark.parametrize("name", REQUESTS)
def test_the_request_body_is_the_requests_dump_built_by_hand_or_not(name: str) -> None:
    from evalkit.targets.base import request_body, request_dict

    request = REQUESTS[name]
    expected = request.model_dump(mode="json", exclude={"debug"})
    expected["options"] = {"p": "1", **expected["options"]}
    for key in ("history", "conversation_id"):
        if expected.get(key) is None:
            expected.pop(key)
    body = request_body(request, {"p": "1"})
    assert json.dumps(body, allow_nan=True) == json.dumps(expected, allow_nan=True)
    assert body["options"] is not request.options and body.get("vaults") is not request.vaults
    assert json.dumps(request_dict(request, {"p": "1"}), allow_nan=True) == json.dumps({**expected, "debug": True},
                                                                                       allow_nan=True)
