"""A judge key the provider rejects never leaves the process: not on stdout or stderr, not
in any file of the run or the judge cache. Every provider, key source and entry point.

regression: hardening issue item 2, the fatal 401/403/404 path printed `str(exc)[:200]`
unscrubbed, so a server (or proxy) echoing the key put it on stderr.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import httpx
import pytest
import respx
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app as judge_answers_app
from tests.support import make_case, run_eval_cli, write_eval_set, write_run
from tests.unit.judges.judge_helpers import (
    ANTHROPIC_MODEL,
    ANTHROPIC_URL,
    CORRECT,
    GROUNDED,
    OPENAI_MODEL,
    OPENAI_URL,
    make_record,
    openai_reply,
)

COMPAT_URL = "http://judge.test/v1"
RUN_ID = "20250101T000000Z-5ec2e7"

# provider -> (flags, env var, sentinel key, route). The compat key has no known key shape:
# only the env-var rule of redact() can catch it.
PROVIDERS = {
    "openai": (["--judge-model", OPENAI_MODEL], "OPENAI_API_KEY", "sk-test-SENTINEL-1234567890", OPENAI_URL),
    "anthropic": (["--judge-model", ANTHROPIC_MODEL], "ANTHROPIC_API_KEY", "sk-ant-test-SENTINEL-1234567890", ANTHROPIC_URL),
    "openai-compatible": (
        ["--judge-provider", "openai-compatible", "--judge-model", "qwen2.5:14b@845dbda0ea48", "--judge-base-url", COMPAT_URL],
        "OPENAI_COMPAT_API_KEY",
        "local-SENTINEL-1234567890",
        f"{COMPAT_URL}/chat/completions",
    ),
}

BOT = textwrap.dedent(
    '''
    def ask(request):
        chunk = {"chunk_id": "c1", "rel_path": "ops/server.md", "heading_path": "# Server", "rank": 1,
                 "start_line": 1, "end_line": 3, "text": "The server listens on port 8080 by default."}
        return {"answer": "The port is 8080 [1].", "abstained": False,
                "references": [{k: chunk[k] for k in ("chunk_id", "rel_path", "heading_path")}],
                "debug": {"retrieved_chunks": [chunk]}}
    '''
)


def _rejecting(key: str, seen: list[str]):
    """A provider that answers 401 and echoes the key it got, in its message and raw."""

    def handler(request: httpx.Request) -> httpx.Response:
        sent = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        seen.append(sent)
        body = {
            "type": "error",
            "error": {"type": "authentication_error", "code": "invalid_api_key",
                      "message": f"Incorrect API key provided: {sent}"},
            "echo": {"authorization": f"Bearer {sent}", "x-api-key": sent},
        }
        return httpx.Response(401, json=body)

    return handler


def _accepting(seen: list[str], echo: str = ""):
    """A provider that answers every judge prompt, its reasoning echoing `echo`."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(request.headers.get("authorization", ""))
        kind = body["response_format"]["json_schema"]["name"].removesuffix("_verdict")
        data = dict(GROUNDED if kind == "groundedness" else CORRECT)
        data["reasoning"] = f"{data['reasoning']} {echo}".strip()
        return httpx.Response(200, json=openai_reply(json.dumps(data)))

    return handler


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory: `.env` and the default cache/ are read and written here."""
    monkeypatch.chdir(tmp_path)
    for name in (env for _, env, _, _ in PROVIDERS.values()):
        # Registered so a key that load_dotenv put into os.environ is removed after the test.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return tmp_path


def _put_key(source: str, env: str, key: str, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if source == "env":
        monkeypatch.setenv(env, key)
    else:
        (workdir / ".env").write_text(f"{env}={key}\n")


def _eval_set(workdir: Path) -> list[str]:
    (workdir / "bot.py").write_text(BOT)
    gold = [{"rel_path": "ops/server.md", "heading_path": "# Server"}]
    write_eval_set(workdir / "es.jsonl", [make_case(f"q{i}", question=f"Which port, take {i}?", gold_supports=gold)
                                          for i in range(3)])
    return ["--eval-set", "es.jsonl", "--target", f"python:{workdir / 'bot.py'}:ask", "--results-dir", "results",
            "--run-id", RUN_ID, "--quiet"]


def _stored_run(workdir: Path) -> list[str]:
    write_run(workdir / "results", RUN_ID, [make_record(f"q{i}", case_index=i) for i in range(3)])
    return ["--run-id", RUN_ID, "--results-dir", "results", "--quiet"]


def _leaks(key: str, workdir: Path, *outputs: str) -> list[str]:
    """Where `key` shows up: an output stream, or a file under results/ or cache/."""
    found = [f"output {i}" for i, out in enumerate(outputs) if key in out]
    for folder in (workdir / "results", workdir / "cache"):
        if folder.exists():
            found += [str(p) for p in folder.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    return found


@pytest.mark.parametrize("entry", ["run_eval", "judge_answers"])
@pytest.mark.parametrize("source", ["env", "dotenv"])
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_rejected_key_appears_in_no_output_and_no_file(provider, source, entry, workdir, monkeypatch):
    flags, env, key, url = PROVIDERS[provider]
    _put_key(source, env, key, workdir, monkeypatch)
    seen: list[str] = []
    with respx.mock(assert_all_mocked=True) as router:
        router.post(url).mock(side_effect=_rejecting(key, seen))
        if entry == "run_eval":
            res = run_eval_cli(*_eval_set(workdir), *flags)
        else:
            res = CliRunner().invoke(judge_answers_app, [*_stored_run(workdir), *flags])

    assert seen and set(seen) == {key}  # the key did reach the provider, from the env or .env
    assert _leaks(key, workdir, res.stdout, res.stderr) == []
    assert res.exit_code == 2, res.output
    assert f"{provider} refused the judge request (HTTP 401" in res.stderr
    assert "Incorrect API key provided: ***" in res.stderr  # the echo is still shown, scrubbed
    if entry == "run_eval":
        assert res.stderr.rstrip().endswith(f"; resume with: python scripts/run_eval.py --resume {RUN_ID}")


def test_a_run_stopped_by_a_rejected_key_resumes_once_the_key_is_fixed(workdir, monkeypatch):
    bad, good = "sk-test-SENTINEL-1234567890", "sk-test-FIXED-0987654321"
    monkeypatch.setenv("OPENAI_API_KEY", bad)
    args = [*_eval_set(workdir), "--judge-model", OPENAI_MODEL, "--concurrency", "1"]
    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=_rejecting(bad, []))
        stopped = run_eval_cli(*args)
    assert stopped.exit_code == 2, stopped.output
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("evalkit: --judge-model: openai refused the judge request (HTTP 401")
    assert last.endswith(f"; resume with: python scripts/run_eval.py --resume {RUN_ID}")
    assert (workdir / "results" / RUN_ID / "config.json").exists()

    monkeypatch.setenv("OPENAI_API_KEY", good)
    seen: list[str] = []
    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=_accepting(seen))
        resumed = run_eval_cli(resume=RUN_ID, results_dir="results", quiet=True)
    assert resumed.exit_code == 0, resumed.output
    assert set(seen) == {f"Bearer {good}"}
    records = [json.loads(line) for line in (workdir / "results" / RUN_ID / "results.jsonl").read_text().splitlines()]
    assert [r["test_case_id"] for r in records] == ["q0", "q1", "q2"]
    assert all(r["groundedness"]["score"] == GROUNDED["score"] and not r["judge_errors"] for r in records)
    assert _leaks(bad, workdir, stopped.stdout, stopped.stderr, resumed.stdout, resumed.stderr) == []


@pytest.mark.parametrize("entry", ["run_eval", "judge_answers"])
def test_a_judge_reply_echoing_the_key_is_scrubbed_before_it_is_stored(entry, workdir, monkeypatch):
    key = "sk-test-SENTINEL-1234567890"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    args = _eval_set(workdir) if entry == "run_eval" else _stored_run(workdir)
    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=_accepting([], echo=f"(my key is {key})"))
        if entry == "run_eval":
            res = run_eval_cli(*args, "--judge-model", OPENAI_MODEL)
        else:
            res = CliRunner().invoke(judge_answers_app, [*args, "--judge-model", OPENAI_MODEL])
    assert res.exit_code == 0, res.output
    assert _leaks(key, workdir, res.stdout, res.stderr) == []
    rec = json.loads((workdir / "results" / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    assert rec["groundedness"]["reasoning"] == f"{GROUNDED['reasoning']} (my key is ***)"
    assert (workdir / "cache" / "judge_cache.sqlite").exists()
    assert _leaks(key, workdir, res.stdout, res.stderr) == []


def test_the_cache_stores_and_returns_no_key(tmp_path, monkeypatch):
    import sqlite3

    from evalkit.judges.cache import JudgeCache

    key = "local-SENTINEL-1234567890"
    monkeypatch.setenv("OPENAI_COMPAT_API_KEY", key)
    path = tmp_path / "cache" / "judge_cache.sqlite"
    cache = JudgeCache(path)
    cache.put("k1", {"verdict": {"reasoning": f"echo {key}", "score": 3}, "raw": key}, kind="groundedness", model="m", prompt_version="v1")
    assert cache.get("k1") == {"verdict": {"reasoning": "echo ***", "score": 3}, "raw": "***"}
    assert _leaks(key, tmp_path) == []
    # An entry written before replies were scrubbed is scrubbed when read.
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO judgments VALUES ('k2', 'groundedness', 'm', 'v1', 0, ?)", (json.dumps({"raw": key}).encode(),))
    conn.close()
    assert cache.get("k2") == {"raw": "***"}
    cache.close()
