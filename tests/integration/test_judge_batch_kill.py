"""SIGKILL of `judge_answers.py --batch` while it waits for its batch: rerunning the command
picks the recorded batch up and never submits it twice (issue 27 item 4, done-when).

The OpenAI Batch API is played by a loopback server (files, batches, file content, and
Chat Completions, which must never be called); the command runs as a real process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from evalkit.judges.batch import STATE_FILE
from tests.support import loopback_server, write_run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "batch-killed"
MODEL = "gpt-4o-2024-08-06"
VERDICTS = {
    "groundedness_verdict": {"reasoning": "in chunk 1", "score": 5, "unsupported_claims": [], "supported_claims": ["port 8080"]},
    "correctness_verdict": {"reasoning": "right", "score": 4, "key_facts_covered": ["port 8080"], "key_facts_missing": []},
}


class _BatchServer:
    """Just enough of the OpenAI Batch API. A batch stays in_progress until `release` is set."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.uploads: list[list[dict[str, Any]]] = []
        self.batches: dict[str, dict[str, Any]] = {}
        self.polls = 0
        self.chat_calls = 0
        self.release = threading.Event()

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        with self.lock:
            if method == "POST" and path == "/v1/files":
                self.uploads.append([json.loads(x.strip()) for x in body.split(b"\n") if x.startswith(b'{"custom_id"')])
                return 200, json.dumps({"id": f"file-in-{len(self.uploads)}", "object": "file", "purpose": "batch",
                                        "bytes": len(body), "created_at": int(time.time()), "filename": "in.jsonl",
                                        "status": "processed"}).encode()
            if method == "POST" and path == "/v1/batches":
                req = json.loads(body)
                bid = f"batch_{len(self.batches) + 1}"
                lines = self.uploads[int(req["input_file_id"].rsplit("-", 1)[1]) - 1]
                self.batches[bid] = {"id": bid, "object": "batch", "endpoint": req["endpoint"], "status": "validating",
                                     "input_file_id": req["input_file_id"], "completion_window": "24h",
                                     "created_at": int(time.time()), "metadata": req.get("metadata"),
                                     "output_file_id": None, "error_file_id": None, "errors": None,
                                     "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
                return 200, json.dumps(self.batches[bid]).encode()
            if method == "GET" and path == "/v1/batches":
                data = sorted(self.batches.values(), key=lambda b: -b["created_at"])
                return 200, json.dumps({"object": "list", "data": data, "has_more": False}).encode()
            m = re.fullmatch(r"/v1/batches/([^/]+)", path)
            if method == "GET" and m:
                self.polls += 1
                batch = self.batches[m.group(1)]
                if self.release.is_set():
                    n = batch["request_counts"]["total"]
                    batch.update(status="completed", output_file_id=f"file-out-{batch['id']}",
                                 request_counts={"total": n, "completed": n, "failed": 0})
                else:
                    batch["status"] = "in_progress"
                return 200, json.dumps(batch).encode()
            m = re.fullmatch(r"/v1/files/file-out-([^/]+)/content", path)
            if method == "GET" and m:
                batch = self.batches[m.group(1)]
                lines = self.uploads[int(batch["input_file_id"].rsplit("-", 1)[1]) - 1]
                out = []
                for i, line in enumerate(lines):
                    name = line["body"]["response_format"]["json_schema"]["name"]
                    reply = {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": 0, "model": MODEL,
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": json.dumps(VERDICTS[name])}}],
                             "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}}
                    out.append({"id": f"r{i}", "custom_id": line["custom_id"], "error": None,
                                "response": {"status_code": 200, "request_id": f"q{i}", "body": reply}})
                return 200, "".join(json.dumps(x) + "\n" for x in out).encode()
            if method == "POST" and path == "/v1/chat/completions":
                self.chat_calls += 1
                return 500, b'{"error": {"message": "the batch test must not call this"}}'
            return 404, b'{"error": {"message": "not found"}}'


@pytest.fixture
def server() -> Iterator[tuple[str, _BatchServer]]:
    state = _BatchServer()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _serve(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, payload = state.handle(method, self.path.split("?", 1)[0], body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802
            self._serve("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

    with loopback_server(Handler) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", state


def _record(i: int) -> dict[str, Any]:
    return {
        "schema_version": 1, "test_case_id": f"q{i}", "case_index": i,
        "case": {"id": f"q{i}", "question": "Which port does the server use?", "answerable": True,
                 "expected_key_facts": ["port 8080"], "tags": ["ops"], "category": "factual", "gold_supports": []},
        "question": "Which port does the server use?", "answer": f"Port 8080 [1] (case {i}).",
        "references": [{"chunk_id": "c1", "rel_path": "server.md", "heading_path": "# H"}],
        "retrieved_chunks": [{"chunk_id": "c1", "rel_path": "server.md", "heading_path": "# H", "rank": 1, "start_line": 1,
                              "end_line": 2, "text": "The server listens on port 8080.", "text_truncated": False}],
        "config": {"k": 5}, "latency": {"total_ms": 10.0}, "retrieval_metrics": {},
        "groundedness": None, "correctness": None,
        "abstention": {"abstained": False, "hallucinated": None, "method": "target"},
        "judge_input": None, "cost": {"judge_tokens": 0, "judge_cost_usd": 0.0},
        "error": None, "judge_errors": [], "missing_fields": [],
    }


def _command(base_url: str, results: Path, cache: Path) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / "judge_answers.py"), "--run-id", RUN_ID, "--results-dir", str(results),
            "--judge-provider", "openai", "--judge-model", MODEL, "--judge-base-url", base_url,
            "--cache-path", str(cache), "--batch", "--batch-poll-interval", "0.05", "--json"]


def test_sigkill_while_waiting_then_rerun_collects_the_same_batch(server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    base_url, api = server
    results = tmp_path / "results"
    run = results / RUN_ID
    write_run(results, RUN_ID, [_record(i) for i in range(5)])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    cache = tmp_path / "cache.sqlite"

    proc = subprocess.Popen(_command(base_url, results, cache), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and api.polls < 3:
            time.sleep(0.01)
        assert api.polls >= 3, "the batch was never polled"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, err
    state = json.loads((run / STATE_FILE).read_text())
    assert [e["batch_id"] for e in state["batches"]] == ["batch_1"]
    assert all(json.loads(x)["groundedness"] is None for x in (run / "results.jsonl").read_text().splitlines())

    api.release.set()
    done = subprocess.run(_command(base_url, results, cache), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "resuming the recorded batch" in done.stderr
    assert len(api.batches) == 1 and len(api.uploads) == 1  # submitted once, across both processes
    assert api.chat_calls == 0
    records = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert [(r["groundedness"]["score"], r["correctness"]["score"]) for r in records] == [(5, 4)] * 5
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["judge_stats"]["batch"]["batches"][0]["batch_id"] == "batch_1"
    assert out["judge_stats"]["batch"]["cached"] == 10
    assert not (run / STATE_FILE).exists()
