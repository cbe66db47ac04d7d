"""Issue 38 items 3 and 4: one writer per run, with the real commands side by side.

Each holder is held at work by what it waits on (a judge server that answers when the test
says so, a target that waits for a release file), so the test decides the order, not the
machine's load: (a) score_retrieval --k 3 while judge_answers works on the run is refused,
naming judge_answers, and after it the run holds both; (b) of three run_eval --resume of
one run, one asks the remaining cases, once each, and two are refused; (c) a SIGKILLed
holder blocks nobody."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.store.runs import WRITER_LOCK
from tests.support import (
    ROOT,
    loopback_server,
    make_case,
    read_records,
    run_eval_api,
    start_run_eval_script,
    write_eval_set,
)

pytestmark = pytest.mark.integration

TARGET = "python:tests.integration.waiting_bot:ask"
N_CASES = 8
N_KEPT = 3  # records left in results.jsonl when a run is made to look killed
# Bounds a wait for a stuck child; never a time the test measures.
STUCK_S = 300


def _eval_set(path: Path) -> Path:
    return write_eval_set(path, [
        make_case(i, gold_supports=[{"rel_path": f"notes/c{i}.md", "heading_path": "# H"}]) for i in range(N_CASES)
    ])


def _made_run(tmp_path: Path, **settings) -> Path:
    """results/r1, a finished --retrieval-only run of N_CASES cases; returns the results folder."""
    results = tmp_path / "results"
    run_eval_api(eval_set=_eval_set(tmp_path / "es.jsonl"), target=TARGET, retrieval_only=True, results_dir=results,
                 run_id="r1", **settings)
    return results


def _killed_looking(results: Path) -> list[str]:
    """Cut r1 back to its first N_KEPT records, as a run_eval killed there leaves it; returns
    the questions a resume has left to ask."""
    run = results / "r1"
    lines = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run / "results.jsonl").write_bytes(b"".join(lines[:N_KEPT]))
    for name in ("metrics.json", "summary.md", "results.json"):
        (run / name).unlink()
    return sorted(json.loads(line)["question"] for line in lines[N_KEPT:])


def _bot_env(tmp_path: Path) -> dict[str, str]:
    return {"WAITING_BOT_CALLS": str(tmp_path / "calls.txt"), "WAITING_BOT_RELEASE": str(tmp_path / "release")}


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _wait_for(what, proc: subprocess.Popen, why: str) -> None:
    deadline = time.monotonic() + STUCK_S
    while not what():
        if proc.poll() is not None:
            raise AssertionError(f"{why}: the holder ended first ({proc.returncode}): {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"stuck waiting: {why}")
        time.sleep(0.01)


def _stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# --------------------------------------------------------------------------- (a) the lost update


class _HeldJudge(BaseHTTPRequestHandler):
    """An OpenAI-compatible judge that answers each request once the test releases it."""

    asked = threading.Event()
    release = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).asked.set()
        type(self).release.wait(STUCK_S)
        prompt = body["messages"][-1]["content"]
        if "cannot answer the question" in prompt:
            verdict = {"abstained": False, "confidence": 0.9}
        elif "correctly addresses" in prompt:
            verdict = {"reasoning": "ok", "score": 4, "key_facts_covered": [], "key_facts_missing": []}
        else:
            verdict = {"reasoning": "ok", "score": 3, "unsupported_claims": [], "supported_claims": ["x"]}
        data = json.dumps({
            "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(verdict)},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def held_judge() -> Iterator[str]:
    _HeldJudge.asked, _HeldJudge.release = threading.Event(), threading.Event()
    with loopback_server(_HeldJudge) as server:
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            _HeldJudge.release.set()


def _score_retrieval(results: Path, *args: str):
    from evalkit.cli.score_retrieval import app

    return CliRunner().invoke(app, ["--run-id", "r1", "--results-dir", str(results), *args], catch_exceptions=False)


def test_score_retrieval_while_judge_answers_works_is_refused_and_nothing_is_lost(tmp_path, held_judge):
    results = _made_run(tmp_path, store_full_text=True)
    metrics_path = results / "r1" / "metrics.json"
    judge = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "judge_answers.py"), "--run-id", "r1", "--results-dir", str(results),
         "--judge-model", "local@build-test", "--judge-base-url", held_judge, "--cache-path", str(tmp_path / "c.sqlite"),
         "--quiet"],
        cwd=ROOT, env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for(_HeldJudge.asked.is_set, judge, "judge_answers asks its judge")
        before = metrics_path.read_bytes()
        refused = _score_retrieval(results, "--k", "3")
        assert refused.exit_code == 2, refused.output
        line = refused.stderr.strip()
        assert f"run 'r1' is being changed by judge_answers (pid {judge.pid}, since " in line
        assert "judge_answers.py --run-id r1" in line and line.endswith("wait for it to finish or stop it, then rerun")
        assert metrics_path.read_bytes() == before  # refused before it wrote anything

        _HeldJudge.release.set()
        _, err = judge.communicate(timeout=STUCK_S)
        assert judge.returncode == 0, err
    finally:
        _stop(judge)
    assert (results / "r1" / WRITER_LOCK).read_bytes() == b""  # released: no holder named

    done = _score_retrieval(results, "--k", "3")
    assert done.exit_code == 0, done.output
    agg = json.loads(metrics_path.read_text())["aggregate_metrics"]
    # both commands' numbers: the judge's verdicts and the @3 metrics
    assert agg["groundedness_avg"] == 3 and agg["n"]["groundedness_avg"] == N_CASES
    assert agg["at_k"]["3"]["recall_any"] == 1.0 and agg["at_k"]["5"]["recall_any"] == 1.0  # gold at rank 2
    assert all(r["groundedness"]["score"] == 3 for r in read_records(results / "r1"))


# --------------------------------------------------------------------------- (b) concurrent resumes


def test_three_resumes_of_one_run_ask_each_remaining_case_once(tmp_path):
    results = _made_run(tmp_path)
    remaining = _killed_looking(results)
    env = _bot_env(tmp_path)
    procs = [start_run_eval_script("--resume", "r1", results_dir=results, quiet=True, env=env) for _ in range(3)]
    try:
        deadline = time.monotonic() + STUCK_S
        while sum(p.poll() is not None for p in procs) < 2:  # the winner waits for the release file
            assert time.monotonic() < deadline, "stuck: two resumes were not refused"
            time.sleep(0.01)
        refused = [p for p in procs if p.poll() is not None]
        (winner,) = [p for p in procs if p.poll() is None]
        for p in refused:
            err = p.stderr.read()
            assert p.returncode == 2, err
            assert f"run 'r1' is being changed by run_eval --resume (pid {winner.pid}, since " in err, err

        (tmp_path / "release").touch()
        _, err = winner.communicate(timeout=STUCK_S)
        assert winner.returncode == 0, err
    finally:
        _stop(*procs)
    # One process asked: its probe (the first case it has left), then each remaining case once.
    # Three resumes unlocked asked 3 x (1 + 5); issue 38 saw 133 calls for 59 cases.
    calls = _calls(tmp_path)
    assert calls[0] == remaining[0] and sorted(calls[1:]) == remaining
    ids = [r["test_case_id"] for r in read_records(results / "r1")]
    assert sorted(ids) == sorted(f"c{i}" for i in range(N_CASES))


# --------------------------------------------------------------------------- (c) a killed holder


def test_a_sigkilled_holder_does_not_block_the_next_command(tmp_path):
    results = _made_run(tmp_path)
    _killed_looking(results)
    holder = start_run_eval_script("--resume", "r1", results_dir=results, quiet=True, env=_bot_env(tmp_path))
    try:
        _wait_for(lambda: _calls(tmp_path), holder, "the resume asks its first case")
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=STUCK_S)
    finally:
        _stop(holder)
    # What it leaves: its entry in the lock file, and no lock (the kernel dropped it).
    assert json.loads((results / "r1" / WRITER_LOCK).read_bytes())["pid"] == holder.pid


    result = run_eval_api(resume="r1", results_dir=results)  # the next command: this process's target asks at once
    assert result.success
    ids = [r["test_case_id"] for r in read_records(results / "r1")]
    assert sorted(ids) == sorted(f"c{i}" for i in range(N_CASES))
    assert (results / "r1" / WRITER_LOCK).read_bytes() == b""
