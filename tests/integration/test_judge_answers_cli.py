"""judge_answers.py end to end on a run folder built by hand: heuristic judge, an
OpenAI-compatible judge served on a real loopback socket, --vault, --ids, exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from tests.support import loopback_server, write_run

pytestmark = pytest.mark.integration

RUN_ID = "20250101T000000Z-abc123"
FULL_1 = "The server listens on port 8080 by default. Operators can change it in config.yaml under the key http.port."
FULL_2 = "The database runs PostgreSQL 16 on a separate host."


def _chunk(cid: str, rel: str, rank: int, text: str, start: int, end: int) -> dict[str, Any]:
    return {"chunk_id": cid, "rel_path": rel, "heading_path": "# H", "rank": rank, "start_line": start, "end_line": end,
            "score_vector": 0.9, "score_lexical": 0.5, "score_final": 0.8, "text": text[:40], "text_truncated": len(text) > 40}


def _record(i: int, cid: str, answer: str, *, answerable: bool = True, abstained: bool | None = False,
            error: dict | None = None) -> dict[str, Any]:
    return {
        "schema_version": 1, "test_case_id": cid, "case_index": i,
        "case": {"id": cid, "question": "Which port does the server use?", "answerable": answerable,
                 "expected_key_facts": ["port 8080"] if answerable else [], "tags": ["ops"], "category": "factual",
                 "gold_supports": [{"rel_path": "server.md", "heading_path": "# H"}]},
        "question": "Which port does the server use?", "answer": answer,
        "references": [{"chunk_id": "c1", "rel_path": "server.md", "heading_path": "# H"}],
        "retrieved_chunks": [_chunk("c1", "server.md", 1, FULL_1, 2, 3), _chunk("c2", "db.md", 2, FULL_2, 2, 2)],
        "config": {"k": 5}, "latency": {"total_ms": 12.0, "judge_ms": None},
        "retrieval_metrics": {"k": 5, "at_k": {"5": {"recall_any": 1.0, "recall_all": None, "recall_frac": 1.0,
                                                   "precision": 0.5, "mrr": 1.0, "ndcg": 1.0}}},
        "groundedness": None, "correctness": None,
        "abstention": {"abstained": abstained, "hallucinated": None, "method": None if abstained is None else "target"},
        "judge_input": None, "cost": {"judge_tokens": 0, "judge_cost_usd": 0.0},
        "error": error, "judge_errors": [], "missing_fields": [],
    }


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A --retrieval-only run folder with four cases, written by hand."""
    results = tmp_path / "results"
    run = results / RUN_ID
    records = [
        _record(0, "q1", "The server listens on port 8080 [1]."),
        _record(1, "q2", "Backups are stored in Amazon S3 every night.", abstained=None),
        _record(2, "q3", "I couldn't find that in your notes.", answerable=False, abstained=None),
        _record(3, "q4", "", error={"kind": "timeout", "status": None, "detail": "30s"}),
    ]
    # An HTTP-target run: only --vault can give the full chunk text back.
    write_run(results, RUN_ID, records, config={
        "run_id": RUN_ID, "config_hash": "abc123",
        "settings": {"k": [5, 10], "seed": 7, "api_url": "http://127.0.0.1:9/", "vault": "sample_vault"},
        "target": {"kind": "http", "api_url": "http://127.0.0.1:9/"}, "judge": {"provider": None}})
    (run / "metrics.json").write_text(json.dumps({"run_id": RUN_ID, "seed": 7, "aggregate_metrics": {"k": 5}}))
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "server.md").write_text("# H\n" + FULL_1 + "\n\n")
    (vault / "db.md").write_text("# H\n" + FULL_2 + "\n")
    return results


def _invoke(results: Path, *args: str) -> Any:
    return CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), *args])


def _records(results: Path) -> dict[str, dict]:
    lines = (results / RUN_ID / "results.jsonl").read_text().splitlines()
    return {r["test_case_id"]: r for r in map(json.loads, lines)}


def test_heuristic_judging_rewrites_results_metrics_and_config(run_dir: Path):
    res = _invoke(run_dir, "--quiet", "--json", "--allow-truncated-context")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["judge"]["heuristic"] is True and out["n_judged"] == 4
    assert any("truncated (200-char) context" in w for w in out["warnings"])

    recs = _records(run_dir)
    assert list(recs) == ["q1", "q2", "q3", "q4"]
    assert recs["q1"]["groundedness"]["method"] == "heuristic"
    assert recs["q1"]["judge_input"]["context_chunk_ids"] == ["c1", "c2"]
    assert recs["q2"]["abstention"]["method"] == "heuristic" and recs["q2"]["abstention"]["abstained"] is False
    assert recs["q3"]["abstention"]["abstained"] is True and recs["q3"]["groundedness"] is None
    assert recs["q4"]["groundedness"] is None and recs["q4"]["error"]["kind"] == "timeout"

    metrics = json.loads((run_dir / RUN_ID / "metrics.json").read_text())
    agg = metrics["aggregate_metrics"]
    # q1 and q2 are answered answerable cases; q3 is a correct abstention, q4 a target error
    assert agg["n"]["groundedness_avg"] == 2 and agg["n"]["correctness_avg"] == 2
    assert agg["groundedness_avg"] is not None
    assert agg["judge"]["heuristic"] is True and agg["judge"]["not_judged_correct_abstention"] == 1
    assert agg["judge_reliability"] is None
    assert metrics["seed"] == 7  # the run's settings (config.json) are the derive's, re-judged or not
    assert "10" in agg["at_k"]  # ks came from config.json settings.k
    cfg = json.loads((run_dir / RUN_ID / "config.json").read_text())
    assert cfg["judge"]["heuristic"] is True and cfg["judge"]["model"] == "heuristic-v1"
    assert cfg["config_hash"] == "abc123"


def test_terminal_table_marks_heuristic_scores(run_dir: Path):
    res = _invoke(run_dir, "--allow-truncated-context")
    assert res.exit_code == 0, res.output
    assert "Groundedness (0-5) (heuristic)" in res.stdout  # the registry's label, as every report has it
    assert "offline heuristic" in res.stdout


def test_vault_gives_full_chunk_text(run_dir: Path):
    res = _invoke(run_dir, "--quiet", "--json", "--vault", str(run_dir.parent / "vault"), "--ids", "q1")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["warnings"] == [] and out["n_judged"] == 1
    recs = _records(run_dir)
    assert recs["q1"]["judge_input"]["context_was_truncated"] is False
    # by hand: with the full chunk text the one claim {server, listen, port, 8080} is supported and cited
    assert recs["q1"]["groundedness"]["score"] == 5
    assert recs["q2"]["groundedness"] is None  # not in --ids: left as it was


def test_spot_check_with_heuristic_second_judge_is_seeded(run_dir: Path):
    args = ("--quiet", "--json", "--allow-truncated-context", "--spot-check", "2", "--spot-check-provider", "heuristic", "--spot-check-model", "heuristic", "--seed", "3")
    a = json.loads(_invoke(run_dir, *args).stdout.strip().splitlines()[-1])["judge_reliability"]
    b = json.loads(_invoke(run_dir, *args).stdout.strip().splitlines()[-1])["judge_reliability"]
    assert a["spot_check_n"] == 2 and a["seed"] == 3 and a["case_ids"] == b["case_ids"]
    assert a["disagreement_rate"] == 0  # the same deterministic judge twice


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--judge-provider", "openai", "--judge-model", "gpt-4o-2024-08-06"],
                     "evalkit: OPENAI_API_KEY is not set (needed by --judge-provider openai; put it in the environment or .env)",
                     id="missing-key"),
        pytest.param(["--judge-model", "gpt-4o"], "evalkit: --judge-model: judge model 'gpt-4o' is not pinned", id="unpinned"),
        pytest.param(["--judge-model", "claude-sonnet-latest"], "evalkit: --judge-model: judge model 'claude-sonnet-latest' is not pinned", id="latest"),
    ],
)
def test_bad_judge_config_exits_2_with_one_line(run_dir: Path, args, message):
    before = (run_dir / RUN_ID / "results.jsonl").read_text()
    res = _invoke(run_dir, *args)
    assert res.exit_code == 2
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith(message)
    assert (run_dir / RUN_ID / "results.jsonl").read_text() == before


def test_unknown_run_id_exits_2(run_dir: Path):
    res = CliRunner().invoke(app, ["--run-id", "nope", "--results-dir", str(run_dir)])
    assert res.exit_code == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "no run 'nope'" in res.stderr


def test_unknown_ids_exit_2(run_dir: Path):
    res = _invoke(run_dir, "--ids", "q1,zz")
    assert res.exit_code == 2 and "no case 'zz' in this run" in res.stderr


# --------------------------------------------------------------------------- loopback judge


class _FakeJudgeServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/chat/completions answering valid verdict JSON."""

    calls: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        prompt = body["messages"][-1]["content"]
        if "cannot answer the question" in prompt:
            verdict = {"abstained": "couldn't find" in prompt, "confidence": 0.9}
        elif "correctly addresses" in prompt:
            verdict = {"reasoning": "ok", "score": 4, "key_facts_covered": ["port 8080"], "key_facts_missing": []}
        else:
            verdict = {"reasoning": "ok", "score": 3, "unsupported_claims": [], "supported_claims": ["x"]}
        reply = {
            "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(verdict)}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def judge_server() -> Iterator[str]:
    _FakeJudgeServer.calls = []
    with loopback_server(_FakeJudgeServer) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_local_llm_judge_then_warm_cache_makes_zero_calls(run_dir: Path, judge_server: str, tmp_path: Path):
    args = ("--quiet", "--json", "--allow-truncated-context", "--judge-model", "qwen2.5:14b@845dbda0ea48", "--judge-base-url", judge_server,
            "--cache-path", str(tmp_path / "cache" / "judge_cache.sqlite"))
    res = _invoke(run_dir, *args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # q1: groundedness + correctness; q2: abstention + both; q3: abstention (then not judged); q4: target error
    assert len(_FakeJudgeServer.calls) == 2 + 3 + 1
    assert _FakeJudgeServer.calls[0]["model"] == "qwen2.5:14b"
    stats = out["judge_stats"]
    assert stats["calls"] == 6 and stats["cache_misses"] == 6 and stats["cache_hits"] == 0
    assert stats["provider"] == "openai-compatible" and stats["heuristic"] is False
    recs = _records(run_dir)
    assert recs["q1"]["groundedness"]["score"] == 3 and recs["q1"]["correctness"]["score"] == 4
    assert recs["q2"]["abstention"]["method"] == "judge"
    assert recs["q1"]["cost"]["judge_tokens"] == 2 * 60
    metrics = json.loads((run_dir / RUN_ID / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["groundedness_avg"] == 3 and metrics["aggregate_metrics"]["n"]["groundedness_avg"] == 2

    _FakeJudgeServer.calls = []
    res = _invoke(run_dir, *args)
    assert res.exit_code == 0, res.output
    assert _FakeJudgeServer.calls == []
    stats = json.loads(res.stdout.strip().splitlines()[-1])["judge_stats"]
    assert stats["calls"] == 0 and stats["cache_hits"] == 6 and stats["cost_usd"] == 0
    assert _records(run_dir)["q1"]["correctness"]["score"] == 4


def test_cut_context_without_a_source_exits_2_and_names_the_fix(run_dir: Path):
    # regression: issue item 6, re-judging a --retrieval-only run judged 200-char chunk text
    before = (run_dir / RUN_ID / "results.jsonl").read_text()
    res = _invoke(run_dir, "--quiet")
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    # q1, q2 and q3 read their chunks; q4 is a target error and is never judged
    assert "3 of 4 cases to judge hold chunk text cut to 200 characters that could not be re-read" in lines[0]
    assert "--vault PATH" in lines[0] and "--allow-truncated-context" in lines[0]
    assert (run_dir / RUN_ID / "results.jsonl").read_text() == before


def test_vault_lines_that_no_longer_hold_the_stored_text_stay_cut(run_dir: Path):
    (run_dir.parent / "vault" / "server.md").write_text("# H\nThe notes were rewritten since the run.\n\n")
    res = _invoke(run_dir, "--quiet", "--vault", str(run_dir.parent / "vault"))
    assert res.exit_code == 2
    # c1 (server.md) changed, so q1 and q2 keep a cut chunk; q3 (answer present) too
    assert "3 of 4 cases to judge" in res.stderr and "they are not in --vault" in res.stderr


def _judge_of(rec: dict, name: str) -> tuple[str, str]:
    ident = rec[name]["judge_identity"]
    return ident["provider"], ident["model"]


def test_partial_rejudge_records_mixed_judges_instead_of_relabelling(run_dir: Path, judge_server: str, tmp_path: Path):
    # regression: issue item 6, --ids relabelled the whole run with the new judge
    vault = str(run_dir.parent / "vault")
    llm = ("--judge-model", "local@build-test", "--judge-base-url", judge_server, "--cache-path", str(tmp_path / "c.sqlite"))
    assert _invoke(run_dir, "--quiet", "--vault", vault).exit_code == 0  # heuristic over every case
    res = _invoke(run_dir, "--json", "--vault", vault, "--ids", "q1", *llm)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # q2 keeps heuristic verdicts (q3 was a correct abstention, q4 a target error: no verdicts)
    assert any(w.startswith("1 cases outside --ids keep judgments from another judge") for w in out["warnings"])
    printed = "".join(res.stderr.split())  # --json sends the table to stderr; rich wraps lines anywhere
    assert "judges:mixed(" in printed
    assert "1casesbyheuristicheuristic-v1" in printed and "1casesbyopenai-compatiblelocal@build-test" in printed
    assert "Groundedness(0-5)(mixedjudges)" in printed  # the registry's label

    recs = _records(run_dir)
    assert _judge_of(recs["q1"], "groundedness") == ("openai-compatible", "local@build-test")
    assert _judge_of(recs["q2"], "correctness") == ("heuristic", "heuristic-v1")
    cfg = json.loads((run_dir / RUN_ID / "config.json").read_text())["judge"]
    assert cfg["mixed"] is True and cfg["heuristic"] is True
    by_provider = {j["provider"]: j for j in cfg["judges"]}
    assert sorted(by_provider) == ["heuristic", "openai-compatible"]
    assert all(j["n_cases"] == 1 and j["n_groundedness"] == 1 and j["n_correctness"] == 1 for j in cfg["judges"])
    assert by_provider["heuristic"]["note"].startswith("offline lexical-overlap proxy")  # its description survived
    assert cfg["latest"]["model"] == "local@build-test"
    metrics = json.loads((run_dir / RUN_ID / "metrics.json").read_text())
    # the gate's invariants see one identity per judge
    assert sorted(j["provider"] for j in metrics["invariants"]["judge"]) == ["heuristic", "openai-compatible"]
    judge = metrics["aggregate_metrics"]["judge"]
    assert judge["mixed"] is True and judge["provider"] is None
    assert judge["heuristic"] is True  # part-heuristic scores: the gate must not read them as LLM scores
    assert judge["session"] == {"provider": "openai-compatible", "model": "local@build-test", "heuristic": False}
    assert sorted((j["model"], j["n_cases"]) for j in judge["judges"]) == [("heuristic-v1", 1), ("local@build-test", 1)]

    # A full re-judge makes one judge again, and then naming it the run's judge is right.
    res = _invoke(run_dir, "--quiet", "--json", "--vault", vault, *llm)
    assert res.exit_code == 0, res.output
    cfg = json.loads((run_dir / RUN_ID / "config.json").read_text())["judge"]
    assert cfg["mixed"] is False and cfg["model"] == "local@build-test" and cfg["heuristic"] is False
    metrics = json.loads((run_dir / RUN_ID / "metrics.json").read_text())
    judge = metrics["aggregate_metrics"]["judge"]
    assert judge["mixed"] is False and judge["model"] == "local@build-test" and len(judge["judges"]) == 1
    assert metrics["invariants"]["judge"]["model"] == "local@build-test"


def test_partial_rejudge_with_the_same_judge_is_not_mixed(run_dir: Path):
    vault = str(run_dir.parent / "vault")
    assert _invoke(run_dir, "--quiet", "--vault", vault).exit_code == 0
    res = _invoke(run_dir, "--quiet", "--json", "--vault", vault, "--ids", "q1")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["warnings"] == []
    assert out["judge"]["mixed"] is False and out["judge"]["model"] == "heuristic-v1"
    assert out["judge_stats"]["judges"][0]["n_cases"] == 2
