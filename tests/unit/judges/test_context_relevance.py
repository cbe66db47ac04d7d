"""The context-relevance judge (issue 42 item 6, no gold needed): each retrieved chunk judged
against the question, score = relevant chunks / chunks; offline heuristic (lexical overlap)
and OpenAI (real SDK through respx), cached and versioned like the other judges, the
runner's rule 9, the aggregate and the registry entry."""

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
from evalkit.judges.heuristic import HeuristicJudge, relevance_score
from evalkit.judges.prompts import render_prompt
from evalkit.metrics.aggregate import aggregate_records
from evalkit.metrics.registry import by_key, label_of
from tests.support import write_run
from tests.unit.judges.judge_helpers import GROUNDED, OPENAI_MODEL, make_record, openai_reply

RUN_ID = "20250101T000000Z-cr0001"
CHUNKS = (
    {"text": "The server listens on port 8080 by default."},
    {"text": "The database runs PostgreSQL 16 on a separate host."},
)


def test_heuristic_by_hand():
    item = JudgeItem(question="Which port does the server listen on?", answer="whatever", context=CHUNKS)
    v = asyncio.run(HeuristicJudge().judge("context_relevance", item)).verdict
    # The question's content words {port, server, listen}: chunk 1 holds all three, chunk 2 none.
    assert [c["relevant"] for c in v["chunks"]] == [True, False]
    assert v["chunks"][0]["overlap"] == 1.0 and v["chunks"][1]["overlap"] == 0.0
    assert v["score"] == 0.5 and v["n_chunks"] == 2 and v["n_relevant"] == 1
    # 1 of 3 words (33 %) is under the 50 % threshold; 2 of 3 is over it.
    one = asyncio.run(HeuristicJudge().judge("context_relevance", JudgeItem(
        question="Which port does the server listen on?", answer="", context=({"text": "port numbers"}, {"text": "server port"}))))
    assert [c["relevant"] for c in one.verdict["chunks"]] == [False, True]
    # A question without content words has nothing to look for: no score.
    none = asyncio.run(HeuristicJudge().judge("context_relevance", JudgeItem(question="Why?", answer="", context=CHUNKS)))
    assert none.verdict["score"] is None


def test_relevance_score_counts_each_chunk_once_and_in_range():
    chunks = [{"chunk": 1, "relevant": True}, {"chunk": 1, "relevant": True}, {"chunk": 7, "relevant": True},
              {"chunk": 2, "relevant": False}]
    assert relevance_score(chunks, 4) == 0.25
    assert relevance_score([], 0) is None


def test_prompt_shows_question_and_chunks_not_the_answer():
    item = JudgeItem(question="Which port?", answer="SECRET-ANSWER", context=CHUNKS)
    p = render_prompt("context_relevance", item)
    text = p.messages[0]["content"]
    assert "Which port?" in text and "[1]" in text and "[2]" in text and "PostgreSQL 16" in text
    assert "SECRET-ANSWER" not in text
    assert p.prompt_version == "context_relevance-v1" and p.schema_name == "context_relevance_verdict"


def test_runner_rule_9():
    runner = build_judge_runner(JudgeSettings(evaluators=("groundedness", "context_relevance")))

    def judge(rec):
        return asyncio.run(runner.judge_record(rec))

    rec = judge(make_record())
    assert rec["context_relevance"]["score"] == 0.5 and rec["context_relevance"]["method"] == "heuristic"
    assert rec["context_relevance"]["judge_identity"]["provider"] == "heuristic"
    # An abstention still retrieved: its chunks are judged (groundedness is not).
    abst = judge(make_record(answer="I could not find this.", abstained=True))
    assert abst["context_relevance"]["score"] == 0.5 and abst["groundedness"] is None
    # Nothing retrieved: no judge call, no score.
    empty = judge(make_record(chunks=[]))
    assert empty["context_relevance"] == {"score": None, "chunks": [], "n_chunks": 0, "n_relevant": 0, "method": "rule",
                                          "reasoning": "no context was retrieved"}
    # Unanswerable (nothing relevant exists by construction) and target failures: not judged.
    assert judge(make_record(answerable=False))["context_relevance"] is None
    assert judge(make_record(error={"kind": "timeout", "status": None, "detail": ""}))["context_relevance"] is None
    # Off by default; re-judging without it drops a stale verdict.
    plain = asyncio.run(build_judge_runner(JudgeSettings()).judge_record(rec))
    assert "context_relevance" not in plain
    assert runner.describe()["prompt_version"]["context_relevance"] == "heuristic-v1"
    assert "context_relevance" not in build_judge_runner(JudgeSettings()).describe()["prompt_version"]


def test_aggregate_mean_n_and_failures():
    recs = [
        {"case": {"answerable": True}, "context_relevance": {"score": 0.5}},
        {"case": {"answerable": True}, "context_relevance": {"score": 1.0}, "abstention": {"abstained": True}},
        {"case": {"answerable": True}, "context_relevance": None,
         "judge_errors": [{"judge": "context_relevance", "reason": "parse_failure"}]},
        {"case": {"answerable": True}, "context_relevance": {"score": None, "method": "rule"}},
        {"case": {"answerable": True}},
    ]
    agg = aggregate_records(recs, ks=[5])["aggregate_metrics"]
    # by hand: (0.5 + 1.0) / 2; the abstention counts (what was retrieved is judged), a failure does not
    assert agg["context_relevance_avg"] == pytest.approx(0.75) and agg["n"]["context_relevance_avg"] == 2
    assert agg["judge_errors_by_judge"] == {"context_relevance": 1}


def test_registry_entry():
    m = by_key("context_relevance_avg")
    assert m is not None and m.direction == "higher" and m.scale == 1.0 and m.margin == 0.05
    assert m.stage == "judge" and m.per_case == "as_is" and m.threshold
    assert label_of("context_relevance_avg", heuristic=True) == "Context relevance (0-1) (heuristic)"


def _records(n: int) -> list[dict]:
    out = []
    for i in range(n):  # distinct questions: identical cases would share one cached verdict
        rec = make_record(f"q{i}", case_index=i)
        rec["question"] = rec["case"]["question"] = f"Which port does server {i} listen on?"
        out.append(rec)
    return out


def _handler(reply):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
        seen.append((kind, body["messages"][-1]["content"]))
        data = {"groundedness": GROUNDED, "context_relevance": reply}[kind]
        return httpx.Response(200, json=openai_reply(json.dumps(data)))

    handler.seen = seen  # type: ignore[attr-defined]
    return handler


def _judge_cli(results: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
                                    "--cache-path", str(tmp_path / "cache.sqlite"), "--quiet", "--json",
                                    "--evaluators", "groundedness,context_relevance", *args])


def test_openai_scored_cached_and_versioned(openai_router, openai_key, tmp_path):
    results = write_run(tmp_path / "results", RUN_ID, _records(3))
    route = openai_router["chat"]
    handler = _handler({"reasoning": "chunk 1 names the port", "chunks": [{"chunk": 1, "relevant": True},
                                                                          {"chunk": 2, "relevant": False}]})
    route.side_effect = handler
    res = _judge_cli(results, tmp_path)
    assert res.exit_code == 0, res.output
    assert route.call_count == 3 * 2  # groundedness and context relevance per case
    prompts = [text for kind, text in handler.seen if kind == "context_relevance"]
    assert len(prompts) == 3 and "Judge whether each retrieved context chunk is relevant" in prompts[0]
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    cr = rec["context_relevance"]
    assert cr["score"] == 0.5 and cr["n_relevant"] == 1 and cr["n_chunks"] == 2
    assert cr["prompt_version"] == "context_relevance-v1" and cr["model"] == OPENAI_MODEL and cr["method"] == "llm"
    metrics = json.loads((results / RUN_ID / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["context_relevance_avg"] == 0.5
    assert metrics["aggregate_metrics"]["n"]["context_relevance_avg"] == 3
    cfg = json.loads((results / RUN_ID / "config.json").read_text())
    assert cfg["judge"]["prompt_version"]["context_relevance"] == "context_relevance-v1"

    # The answers change, the chunks do not: context relevance comes from the cache (its key
    # holds no answer); groundedness is asked again.
    lines = (results / RUN_ID / "results.jsonl").read_text().splitlines()
    changed = []
    for line in lines:
        r = json.loads(line)
        r["answer"] = "The server listens on port 8080 [1]."
        changed.append(json.dumps(r))
    (results / RUN_ID / "results.jsonl").write_text("\n".join(changed) + "\n")
    route.reset()
    handler.seen.clear()
    again = _judge_cli(results, tmp_path)
    assert again.exit_code == 0, again.output
    assert [k for k, _ in handler.seen] == ["groundedness"] * 3


def test_openai_junk_is_a_judge_error_not_a_zero(openai_router, openai_key, tmp_path):
    results = write_run(tmp_path / "results", RUN_ID, [make_record("q0")])
    openai_router["chat"].side_effect = _handler({"chunks": "all of them"})  # not a list, twice (with the repair)
    res = _judge_cli(results, tmp_path)
    assert res.exit_code == 0, res.output
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    assert rec["context_relevance"] is None and [e["judge"] for e in rec["judge_errors"]] == ["context_relevance"]
    agg = json.loads((results / RUN_ID / "metrics.json").read_text())["aggregate_metrics"]
    assert agg["context_relevance_avg"] is None and agg["n"]["context_relevance_avg"] == 0
