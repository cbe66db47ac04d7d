"""Proxy credentials are secrets (issue 38 item 8).

A proxy named in HTTP_PROXY with credentials (`http://user:s3cret@proxy:3128`) gets them from
httpx as `Proxy-Authorization: Basic base64(user:s3cret)`. One that refuses the request and
echoes its headers in the error page (a 407 or a 502, as squid's can) put them into
results.jsonl's error details, and into judge_answers' records and output. Here a loopback
proxy does exactly that for a run_eval target and an LLM judge, and no file of the run folders
or the judge cache, nor the commands' stdout and stderr, may hold the password, the user info
or the header's value in any form a reader would recognise.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.support import loopback_server, make_case, run_args, write_eval_set

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# (user, password as the URL spells it): the issue's own, and one percent-encoded (an `@` in a
# password must be), which httpx decodes before it builds the Basic header.
CREDENTIALS = {"plain": ("user", "s3cret"), "percent-encoded": ("evalkit-user", "p%40s3cret")}


class _EchoingProxy(BaseHTTPRequestHandler):
    """A forward proxy that refuses everything and shows the request it got, headers and all:
    407 to the judge, 502 to the chatbot."""

    seen: list[str] = []

    def _refuse(self) -> None:
        status = 407 if "/chat/completions" in self.path else 502
        _EchoingProxy.seen.append(str(self.headers.get("Proxy-Authorization")))
        body = (f"<html><h1>{status} from the proxy</h1><pre>{self.requestline}\n{self.headers}</pre>"
                f"<p>credentials seen: {self.headers.get('Proxy-Authorization')}</p></html>").encode()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        if status == 407:
            self.send_header("Proxy-Authenticate", 'Basic realm="proxy"')
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def proxy_port() -> Iterator[int]:
    _EchoingProxy.seen = []
    with loopback_server(_EchoingProxy) as server:
        yield server.server_address[1]


def _basic(user: str, password: str) -> str:
    """What httpx sends: base64 of the decoded `user:password`."""
    return base64.b64encode(f"{user}:{urllib.parse.unquote(password)}".encode()).decode()


def _forms(user: str, password: str) -> set[str]:
    """What must appear nowhere: the password (as written and decoded), the user info (as
    written and decoded), the Basic value (with and without its padding, URL-safe too)."""
    decoded = f"{user}:{urllib.parse.unquote(password)}"
    basic = _basic(user, password)
    return {password, urllib.parse.unquote(password), f"{user}:{password}", decoded, basic, basic.rstrip("="),
            base64.urlsafe_b64encode(decoded.encode()).decode().rstrip("=")}


def _env(proxy: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    return {**env, "HTTP_PROXY": proxy, "http_proxy": proxy, "ALL_PROXY": proxy, "COLUMNS": "200",
            "PYTHONPATH": str(ROOT)}


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # The timeout only bounds a hang; the test asserts what was written and said.
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def _texts(folder: Path) -> dict[str, str]:
    return {str(p): p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("spelled", sorted(CREDENTIALS))
def test_a_proxy_that_echoes_its_credentials_leaks_them_nowhere(proxy_port: int, tmp_path: Path, spelled: str) -> None:
    user, password = CREDENTIALS[spelled]
    env = _env(f"http://{user}:{password}@127.0.0.1:{proxy_port}")
    es = write_eval_set(tmp_path / "es.jsonl", [make_case(f"q{i}") for i in range(3)])
    results = tmp_path / "results"

    # run_eval against an HTTP chatbot behind the proxy: every case is the proxy's 502 page.
    ran = _run([str(ROOT / "scripts" / "run_eval.py"),
                *run_args(api_url="http://chatbot.example:8080", eval_set=es, results_dir=results, run_id="t",
                          no_probe=True, retries=0, max_error_rate=1.0, judge_provider="heuristic")], env, tmp_path)
    assert ran.returncode in (0, 3), (ran.stdout, ran.stderr)
    records = [json.loads(line) for line in (results / "t" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 3
    assert all(r["error"]["status"] == 502 and "from the proxy" in r["error"]["detail"] for r in records)
    assert "Proxy-Authorization: Basic ***" in records[0]["error"]["detail"]  # the echo is kept, its value is not

    # judge_answers through the proxy: an OpenAI-compatible judge the proxy refuses with a 407,
    # over the same cases as if the chatbot had answered.
    (results / "j").mkdir()
    (results / "j" / "config.json").write_bytes((results / "t" / "config.json").read_bytes())
    answered = [{**r, "error": None, "answer": "An answer [1].", "references": []} for r in records]
    (results / "j" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in answered))
    judged = _run([str(ROOT / "scripts" / "judge_answers.py"), "--run-id", "j", "--results-dir", str(results),
                   "--judge-provider", "openai-compatible", "--judge-base-url", "http://judge.example/v1",
                   "--judge-model", "qwen2.5:14b@845dbda0ea48", "--allow-truncated-context",
                   "--cache-path", str(tmp_path / "cache" / "judge_cache.sqlite")], env, tmp_path)
    assert "HTTP 407: <html><h1>407 from the proxy</h1>" in judged.stderr, (judged.stdout, judged.stderr)

    # The proxy was sent the credentials by both commands, so there was something to leak.
    assert _EchoingProxy.seen and set(_EchoingProxy.seen) == {f"Basic {_basic(user, password)}"}
    said = {"run_eval stdout": ran.stdout, "run_eval stderr": ran.stderr,
            "judge_answers stdout": judged.stdout, "judge_answers stderr": judged.stderr}
    texts = {**said, **_texts(results), **_texts(tmp_path / "cache")}
    assert [(where, form) for where, text in texts.items() for form in _forms(user, password) if form in text] == []
