"""What the judge runner stores of a judged answer: the answer once, cut after judging, and
claims bounded (hardening issue, item 5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalkit.config import ANSWER_STORE_CHARS, CLAIM_STORE_CHARS, LIST_STORE_ITEMS, TRUNCATE_CHARS
from evalkit.judges import JudgeSettings, build_judge_runner
from evalkit.judges.base import JudgeItem, JudgeOutcome, JudgeStats
from evalkit.judges.runner import JudgeRunner
from evalkit.schema import ResultRecord
from tests.unit.judges.judge_helpers import make_record

SUPPORTED = "The server listens on port 8080."  # chunk c1 of make_record holds it
UNSUPPORTED = "Backups run nightly to Amazon S3."


def _judge(record, **kw):
    return asyncio.run(build_judge_runner(JudgeSettings(**kw)).judge_record(record))


def test_each_claim_text_is_stored_once():
    rec = _judge(make_record(answer=f"{SUPPORTED} {UNSUPPORTED}"))
    g = rec["groundedness"]
    assert g["supported_claims"] == [SUPPORTED] and g["unsupported_claims"] == [UNSUPPORTED]
    # the claims keep their judgement; their texts are the lists' entries, in claim order
    assert [c["supported"] for c in g["claims"]] == [True, False]
    assert all("claim" not in c for c in g["claims"])
    assert g["claims_dropped"] == 0 and g["claim_texts_cut"] == 0
    ResultRecord.model_validate(rec)


def test_a_long_answer_is_judged_whole_then_stored_cut():
    answer = SUPPORTED + " " + "y" * (ANSWER_STORE_CHARS + 5_000)
    record = make_record(answer=answer)
    rec = _judge(record)
    assert record["answer"] == answer  # the input is not modified
    assert rec["answer"] == answer[:ANSWER_STORE_CHARS]
    assert rec["answer_truncated"] is True and rec["answer_chars"] == len(answer)
    ji = rec["judge_input"]
    assert ji["answer_chars"] == len(answer) and ji["answer_was_truncated"] is False
    assert ji["answer"] == answer[:TRUNCATE_CHARS]
    # two claims: the sentence, and the long run judged whole and stored cut
    texts = rec["groundedness"]["supported_claims"] + rec["groundedness"]["unsupported_claims"]
    assert [len(t) for t in texts] == [len(SUPPORTED), CLAIM_STORE_CHARS]
    assert rec["groundedness"]["claim_texts_cut"] == 1


def test_a_short_answer_is_stored_as_given():
    rec = _judge(make_record())
    assert rec["answer"] == "The port is 8080 [1]." and rec["answer_truncated"] is False
    assert rec["answer_chars"] == len("The port is 8080 [1].")


def test_rejudging_a_cut_answer_keeps_its_marker_and_says_the_judge_saw_it_cut():
    stored = {**make_record(answer="z" * ANSWER_STORE_CHARS), "answer_truncated": True, "answer_chars": 3_000_000}
    rec = _judge(stored)
    assert rec["answer_truncated"] is True and rec["answer_chars"] == 3_000_000
    assert rec["judge_input"]["answer_was_truncated"] is True
    assert rec["judge_input"]["answer_chars"] == ANSWER_STORE_CHARS


def test_claims_beyond_the_cap_are_counted_not_stored():
    n_sup, n_unsup = LIST_STORE_ITEMS + 20, 30
    rec = _judge(make_record(answer=" ".join([SUPPORTED] * n_sup + [UNSUPPORTED] * n_unsup)))
    g = rec["groundedness"]
    # by hand: 120 of 150 claims supported, none cited -> 5 × 120/150 × (0.6 + 0.4 × 0)
    assert g["score"] == pytest.approx(5 * 120 / 150 * 0.6)
    # the first 100 claims in answer order are stored: all supported
    assert len(g["claims"]) == LIST_STORE_ITEMS and g["claims_dropped"] == n_sup + n_unsup - LIST_STORE_ITEMS
    assert len(g["supported_claims"]) == LIST_STORE_ITEMS and g["unsupported_claims"] == []
    assert g["citations"]["claims"] == n_sup + n_unsup


def test_citation_markers_are_capped_and_dropped_references_still_count():
    markers = " ".join(f"[{n}]" for n in range(1, 151))
    rec = _judge({**make_record(answer=f"The server listens on port 8080 {markers}."), "references_dropped": 9})
    c = rec["groundedness"]["citations"]
    assert c["markers"] == list(range(1, LIST_STORE_ITEMS + 1)) and c["markers_dropped"] == 150 - LIST_STORE_ITEMS
    # by hand: 2 chunks, 1 stored + 9 dropped references -> markers above 10 are out of range
    assert c["out_of_range"] == list(range(11, 111)) and c["out_of_range_dropped"] == 140 - LIST_STORE_ITEMS


class _ListJudge:
    """A judge answering like an LLM groundedness judge: claim lists only, no `claims`."""

    heuristic = False
    name = "fake"
    version = "fake-v1"

    def __init__(self, verdict: dict[str, Any]):
        self.verdict = verdict

    def describe(self) -> dict[str, Any]:
        return {"provider": "fake", "model": "fake-v1", "name": self.name, "version": self.version}

    def stats(self) -> JudgeStats:
        return JudgeStats()

    async def aclose(self) -> None:
        return None

    async def judge(self, kind: str, item: JudgeItem, *, trial: int = 0) -> JudgeOutcome:
        verdict = {"abstained": False, "confidence": 0.9} if kind == "abstention" else dict(self.verdict)
        return JudgeOutcome(kind, verdict, method="llm", judge="fake", model="fake-v1", prompt_version="v1")


def test_claim_lists_without_claims_are_capped_each():
    long = "w" * (CLAIM_STORE_CHARS + 1)
    verdict = {"score": 3, "reasoning": "r", "supported_claims": [long] * 150, "unsupported_claims": ["short"]}
    runner = JudgeRunner(_ListJudge(verdict), JudgeSettings(provider="openai-compatible", model="local"))
    rec = asyncio.run(runner.judge_record(make_record()))
    g = rec["groundedness"]
    assert g["score"] == 3
    assert g["supported_claims"] == ["w" * CLAIM_STORE_CHARS] * LIST_STORE_ITEMS
    assert g["unsupported_claims"] == ["short"]
    assert g["claims_dropped"] == 150 - LIST_STORE_ITEMS and g["claim_texts_cut"] == LIST_STORE_ITEMS
