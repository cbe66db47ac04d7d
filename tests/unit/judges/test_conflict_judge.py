"""`acknowledge_both` is judged (issue 30 item 5, "Rules that are never checked"): the
conflict judge reads the answer and says whether it acknowledges that its sources
disagree; the case's recency.pass = both supports retrieved AND acknowledged. Offline
heuristic and OpenAI (the real SDK through respx), versioned and cached like the other
judges; re-scoring retrieval keeps the verdict.

regression: issue 30 item 5 — acknowledge_both passed whenever both supports were
retrieved, and no judge prompt mentioned the acknowledgement EVAL.md promised.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from evalkit.judges import JudgeSettings, build_judge_runner
from evalkit.judges.base import JudgeItem
from evalkit.judges.heuristic import HeuristicJudge, conflict_check
from evalkit.judges.prompts import render_prompt
from evalkit.metrics.retrieval import score_case_retrieval
from tests.support import write_run
from tests.unit.judges.judge_helpers import CORRECT, GROUNDED, OPENAI_MODEL, make_record, openai_reply

RUN_ID = "20250101T000000Z-cf0001"
V2 = {"rel_path": "docs/deployment-v2.md", "heading_path": "# Overview", "date": "2024-03-01"}
V1 = {"rel_path": "docs/deployment-v1.md", "heading_path": "# Overview", "date": "2022-05-10"}
CHUNKS = [
    {"chunk_id": "c2", "rel_path": V2["rel_path"], "heading_path": "# Overview", "rank": 1,
     "text": "Deploy with the Helm chart from the release pipeline.", "text_truncated": False},
    {"chunk_id": "c1", "rel_path": V1["rel_path"], "heading_path": "# Overview", "rank": 2,
     "text": "Deploy by copying the build to the server with scp.", "text_truncated": False},
]
BOTH_SIDES = ("The notes conflict: the newer note says to deploy with the Helm chart [1], "
              "while the older note says to copy the build with scp [2].")
ONE_SIDE = "Deploy with the Helm chart from the release pipeline [1]."


def _record(case_id: str = "q1", *, answer: str = BOTH_SIDES, chunks: list[dict] | None = None, **kw) -> dict:
    rec = make_record(case_id, answer=answer, chunks=CHUNKS if chunks is None else chunks, **kw)
    rec["case"].update(question="How do I deploy?", gold_supports=[V2, V1], recency_conflict_rule="acknowledge_both",
                       category="recency/conflict")
    rec["question"] = "How do I deploy?"
    rec["references"] = []
    rec["retrieval_metrics"] = score_case_retrieval(rec["case"], rec["retrieved_chunks"], [], None, "off", [5])
    return rec


# ---------------------------------------------------------------- the heuristic, by hand


@pytest.mark.parametrize(
    ("answer", "acknowledged", "notes"),
    [
        # "conflict" + markers [1] (v2.md) and [2] (v1.md): two notes
        pytest.param(BOTH_SIDES, True, 2, id="both-sides-acknowledged"),
        # no conflict phrase; one note (marker [1], and its claim overlaps chunk 1 only)
        pytest.param(ONE_SIDE, False, 1, id="one-side"),
        # a phrase but one note: the other side is never stated
        pytest.param("The notes conflict. Deploy with the Helm chart [1].", False, 1, id="phrase-one-note"),
        # both notes' words, no acknowledgement: blended as if they agreed
        pytest.param("Deploy with the Helm chart from the release pipeline. Copy the build to the server with scp.",
                     False, 2, id="blended"),
    ],
)
def test_heuristic_conflict_check_by_hand(answer: str, acknowledged: bool, notes: int) -> None:
    v = conflict_check(answer, CHUNKS)
    assert (v["acknowledged"], v["notes"]) == (acknowledged, notes)


def test_heuristic_judge_answers_the_conflict_kind() -> None:
    item = JudgeItem(question="How do I deploy?", answer=BOTH_SIDES, context=tuple(CHUNKS))
    out = asyncio.run(HeuristicJudge().judge("conflict", item))
    assert out.verdict["acknowledged"] is True and out.verdict["phrase"] == "conflict"
    assert out.prompt_version == "heuristic-v1"


# ---------------------------------------------------------------- the prompt


def test_conflict_prompt_is_versioned_and_names_the_notes() -> None:
    item = JudgeItem(question="How do I deploy?", answer=ONE_SIDE, context=tuple(CHUNKS),
                     conflict_notes=("docs/deployment-v2.md > # Overview (dated 2024-03-01)",))
    p = render_prompt("conflict", item)
    text = p.messages[0]["content"]
    assert p.prompt_version == "conflict-v1" and p.schema_name == "conflict_verdict"
    assert "- docs/deployment-v2.md > # Overview (dated 2024-03-01)" in text
    assert "acknowledge the conflict" in text and "Answer: " + ONE_SIDE in text
    alt = render_prompt("conflict", item, prompt_set="v1-alt")
    assert alt.prompt_version == "conflict-v1-alt" and alt.messages[0]["content"] != text


# ---------------------------------------------------------------- the runner's rules


def _judge(rec: dict, **settings) -> dict:
    return asyncio.run(build_judge_runner(JudgeSettings(**settings)).judge_record(rec))


def test_runner_completes_recency_with_the_verdict() -> None:
    before = _record()["retrieval_metrics"]["recency"]
    assert before["all_retrieved"] is True and before["pass"] is None  # retrieval alone cannot say

    rec = _judge(_record())
    assert rec["conflict"]["acknowledged"] is True and rec["conflict"]["method"] == "heuristic"
    assert rec["retrieval_metrics"]["recency"] == {**before, "acknowledged": True, "pass": True}

    rec = _judge(_record(answer=ONE_SIDE))
    assert rec["retrieval_metrics"]["recency"]["pass"] is False  # both retrieved, one side told

    # acknowledged, but only one side was retrieved: fails on retrieval
    rec = _judge(_record(chunks=CHUNKS[:1]))
    assert rec["retrieval_metrics"]["recency"]["all_retrieved"] is False
    assert rec["retrieval_metrics"]["recency"]["pass"] is False


@pytest.mark.parametrize(
    ("kw", "reasoning"),
    [
        pytest.param({"answer": "I could not find this.", "abstained": True}, "abstained on an answerable question", id="abstained"),
        pytest.param({"answer": "", "abstained": None, "error": {"kind": "empty_answer", "status": None, "detail": ""}},
                     "empty answer", id="empty"),
        pytest.param({"error": {"kind": "timeout", "status": None, "detail": ""}}, "the target failed the case", id="target-error"),
    ],
)
def test_no_answer_is_not_acknowledged_by_rule(kw: dict, reasoning: str) -> None:
    rec = _judge(_record(**kw))
    assert rec["conflict"] == {"acknowledged": False, "score": 0.0, "reasoning": reasoning, "method": "rule"}
    assert rec["retrieval_metrics"]["recency"]["pass"] is False


def test_only_acknowledge_both_cases_are_judged_for_conflict() -> None:
    rec = _record()
    rec["case"]["recency_conflict_rule"] = "cite_both"
    assert "conflict" not in _judge(rec)
    assert "conflict" not in _judge(make_record())
    # without the evaluator the rule stays unchecked (and a stale verdict is dropped)
    judged = _judge(_record())
    again = _judge(judged, evaluators=("groundedness", "correctness", "abstention"))
    assert "conflict" not in again and again["retrieval_metrics"]["recency"]["pass"] is None


def test_description_names_the_conflict_prompt_only_with_conflict_cases() -> None:
    # a run without an acknowledge_both case keeps the judge identity it had before
    assert "conflict" not in build_judge_runner(JudgeSettings()).describe()["prompt_version"]
    d = build_judge_runner(JudgeSettings(conflict_cases=True)).describe()
    assert d["prompt_version"]["conflict"] == "heuristic-v1"


# ---------------------------------------------------------------- OpenAI through respx, cached


@pytest.fixture
def results(tmp_path: Path) -> Path:
    records = [_record("q0", case_index=0), _record("q1", answer=ONE_SIDE, case_index=1)]
    return write_run(tmp_path / "results", RUN_ID, records)


def _handler():
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
        text = body["messages"][-1]["content"]
        seen.append((kind, text))
        acknowledged = "the older note says" in text
        data = {"groundedness": GROUNDED, "correctness": CORRECT,
                "conflict": {"reasoning": "states both notes" if acknowledged else "one side only",
                             "acknowledged": acknowledged}}[kind]
        return httpx.Response(200, json=openai_reply(json.dumps(data)))

    handler.seen = seen  # type: ignore[attr-defined]
    return handler


def _judge_cli(results: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
                                    "--cache-path", str(tmp_path / "cache.sqlite"), "--quiet", "--json", *args])


def test_openai_conflict_judge_scored_cached_and_kept_by_score_retrieval(openai_router, openai_key, results, tmp_path):
    route = openai_router["chat"]
    handler = _handler()
    route.side_effect = handler
    res = _judge_cli(results, tmp_path)
    assert res.exit_code == 0, res.output
    assert route.call_count == 2 * 3  # groundedness, correctness, conflict per case
    prompts = [text for kind, text in handler.seen if kind == "conflict"]
    assert len(prompts) == 2
    assert "- docs/deployment-v2.md > # Overview (dated 2024-03-01)\n- docs/deployment-v1.md > # Overview (dated 2022-05-10)" in prompts[0]

    run = results / RUN_ID
    recs = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert [r["conflict"]["acknowledged"] for r in recs] == [True, False]
    assert recs[0]["conflict"]["prompt_version"] == "conflict-v1" and recs[0]["conflict"]["model"] == OPENAI_MODEL
    assert [r["retrieval_metrics"]["recency"]["pass"] for r in recs] == [True, False]
    metrics = json.loads((run / "metrics.json").read_text())
    # by hand: 1 pass of 2 judged cases
    assert metrics["aggregate_metrics"]["recency_pass_rate"] == 0.5
    assert json.loads((run / "config.json").read_text())["judge"]["prompt_version"]["conflict"] == "conflict-v1"

    route.reset()
    again = _judge_cli(results, tmp_path)
    assert again.exit_code == 0 and route.call_count == 0  # every verdict from the cache

    # Re-scoring retrieval (at another K, so records are rewritten) keeps the judged pass.
    from evalkit.rescore.scoring import score_retrieval

    es = tmp_path / "eval_set.jsonl"
    es.write_text("".join(json.dumps(r["case"]) + "\n" for r in recs))
    score_retrieval(RUN_ID, results_dir=results, ks=[3, 5], eval_set=es)
    recs = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert set(recs[0]["retrieval_metrics"]["at_k"]) == {"3", "5"}  # rewritten
    assert [r["retrieval_metrics"]["recency"]["pass"] for r in recs] == [True, False]
    assert json.loads((run / "metrics.json").read_text())["aggregate_metrics"]["recency_pass_rate"] == 0.5
