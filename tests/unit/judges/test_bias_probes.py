"""Bias probes (issue 42 item 4): `judge_answers --bias-probes N` re-judges a seeded sample with
the answer padded and the context order reversed, and reports the score change (with its
interval) and the position flip rate in metrics.json and the terminal; self-preference is
flagged when the answerer and the judge are of one model family."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from evalkit.judges.base import JudgeItem
from evalkit.judges.bias import model_family, padded, self_preference, swapped
from tests.support import write_run
from tests.unit.judges.judge_helpers import (
    CORRECT,
    GROUNDED,
    OPENAI_MODEL,
    make_record,
    openai_reply,
)

RUN_ID = "20250101T000000Z-bp0001"


def test_swapped_reverses_the_context_and_renumbers_markers():
    item = JudgeItem(question="q", answer="A [1]. B [2]. Both [1, 2]. Far [5].",
                     context=({"text": "one"}, {"text": "two"}))
    s = swapped(item)
    assert [c["text"] for c in s.context] == ["two", "one"]
    assert s.answer == "A [2]. B [1]. Both [2, 1]. Far [5]."  # each marker still names its chunk; [5] names none
    assert padded("Port 8080 [1].") == "Port 8080 [1].\n\nPort 8080 [1]."


def test_model_family_and_self_preference():
    assert model_family("gpt-4o-2024-08-06") == model_family("gpt-4o-mini-2024-07-18") == "openai"
    assert model_family("claude-sonnet-4-5-20250929") == "anthropic"
    assert model_family("Qwen/Qwen2.5-7B-Instruct") == "qwen" and model_family("my-own-model") is None
    assert self_preference("gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06")["flagged"] is True
    other = self_preference("claude-3-5-haiku-20241022", "gpt-4o-2024-08-06")
    assert other["flagged"] is False and other["same_family"] is False
    assert self_preference(None, "gpt-4o-2024-08-06")["same_family"] is None
    assert self_preference("gpt-4o", "heuristic-v1", judge_heuristic=True)["same_family"] is None


def _records(n: int = 4) -> list[dict]:
    out = []
    for i in range(n):
        rec = make_record(f"q{i}", case_index=i)
        rec["question"] = rec["case"]["question"] = f"Which port does server {i} listen on?"
        out.append(rec)
    return out


def _run(tmp_path: Path, llm_model: str | None) -> Path:
    config = {"run_id": RUN_ID, "settings": {"k": [5]}, "versions": {"llm_model": llm_model}}
    return write_run(tmp_path / "results", RUN_ID, _records(), config=config)


def _cli(results: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results),
                                    "--cache-path", str(tmp_path / "cache.sqlite"), *args])


def test_heuristic_is_blind_to_both_probes(tmp_path: Path):
    results = _run(tmp_path, "gpt-4o-mini-2024-07-18")
    res = _cli(results, tmp_path, "--bias-probes", "3", "--quiet")
    assert res.exit_code == 0, res.output
    bias = json.loads((results / RUN_ID / "metrics.json").read_text())["aggregate_metrics"]["judge_bias"]
    assert bias["n_cases"] == 3 and len(bias["case_ids"]) == 3 and bias["pad"] == "repeat-v1"
    # A repeated answer has the same claims, a renumbered marker the same chunk: the
    # heuristic's scores cannot move, by construction.
    for probe in ("verbosity", "position"):
        for name in ("groundedness", "correctness"):
            e = bias[probe][name]
            assert e["n"] == 3 and e["mean_change"] == 0.0 and e["ci"] == [0.0, 0.0]
    assert bias["position"]["groundedness"]["flip_rate"] == 0.0
    assert bias["self_preference"]["same_family"] is None  # the heuristic has no family
    # A re-judge without the flag keeps the earlier probes (not a measured "no bias"), marked as
    # carried over, as the spot check's block is; a new --bias-probes replaces them.
    again = _cli(results, tmp_path, "--quiet", "--json")
    assert again.exit_code == 0
    kept = json.loads((results / RUN_ID / "metrics.json").read_text())["aggregate_metrics"]["judge_bias"]
    assert kept == {**bias, "carried_over": True}
    assert json.loads(again.stdout.strip().splitlines()[-1])["judge_bias"]["carried_over"] is True
    shown = _cli(results, tmp_path)
    assert "bias probes (probes of an earlier judging session): 3 cases" in shown.output
    fresh = _cli(results, tmp_path, "--bias-probes", "2", "--quiet")
    assert fresh.exit_code == 0
    block = json.loads((results / RUN_ID / "metrics.json").read_text())["aggregate_metrics"]["judge_bias"]
    assert block["n_cases"] == 2 and "carried_over" not in block


def _biased_judge(request: httpx.Request) -> httpx.Response:
    """Groundedness from a judge that likes long answers (+2 when the answer is there twice)
    and its first chunk being the server note (-2 otherwise); correctness is fair."""
    body = json.loads(request.content)
    kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
    text = body["messages"][-1]["content"]
    if kind == "correctness":
        return httpx.Response(200, json=openai_reply(json.dumps(CORRECT)))
    score = 3 + (2 if text.count("The port is 8080") >= 2 else 0) - (0 if "[1] ops/server.md" in text else 2)
    return httpx.Response(200, json=openai_reply(json.dumps({**GROUNDED, "score": score})))


def test_an_llm_judge_biased_by_length_and_order(openai_router, openai_key, tmp_path: Path):
    results = _run(tmp_path, "gpt-4o-mini-2024-07-18")
    route = openai_router["chat"]
    route.side_effect = _biased_judge
    res = _cli(results, tmp_path, "--judge-model", OPENAI_MODEL, "--bias-probes", "4", "--evaluators",
               "groundedness,correctness")
    assert res.exit_code == 0, res.output
    bias = json.loads((results / RUN_ID / "metrics.json").read_text())["aggregate_metrics"]["judge_bias"]
    g = bias["verbosity"]["groundedness"]
    assert g["n"] == 4 and g["mean_original"] == 3.0 and g["mean_change"] == 2.0 and g["ci"] == [2.0, 2.0]
    p = bias["position"]["groundedness"]
    assert p["mean_change"] == -2.0 and p["flip_rate"] == 1.0
    assert bias["verbosity"]["correctness"]["mean_change"] == 0.0 and bias["position"]["correctness"]["flip_rate"] == 0.0
    sp = bias["self_preference"]
    assert sp["flagged"] is True and sp["answerer_family"] == sp["judge_family"] == "openai"
    # The probes never change a record's verdict
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    assert rec["groundedness"]["score"] == 3
    # The terminal says it
    out = " ".join(res.output.split())
    assert "bias probes: 4 cases" in out and "flip rate 100%" in out and "self-preference" in out
    assert "groundedness +2.00 [+2.00, +2.00]" in out
    # Probe judgments are cached like any other: a rerun asks nothing again
    route.reset()
    again = _cli(results, tmp_path, "--judge-model", OPENAI_MODEL, "--bias-probes", "4", "--evaluators",
                 "groundedness,correctness", "--quiet")
    assert again.exit_code == 0 and route.call_count == 0
