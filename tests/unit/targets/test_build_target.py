"""build_target spec parsing, parse_param_options, and the reference target's shape."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import BadConfig, InputError, TargetError
from evalkit.schema import AskRequest
from evalkit.targets import (
    CallableTarget,
    HttpTarget,
    ReferenceTarget,
    ReplayTarget,
    Target,
    build_target,
    parse_param_options,
)


def build(**kw: Any) -> Any:
    args: dict[str, Any] = dict(target=None, api_url=None, vault=Path("no-such-vault"), timeout=5.0,
                                retries=2, rps=None, params={})
    args.update(kw)
    return build_target(**args)


def test_api_url_builds_http_target() -> None:
    t = build(api_url="http://localhost:8080/", rps=5, params={"a": 1})
    assert isinstance(t, HttpTarget) and isinstance(t, Target)
    assert t.describe() == {"kind": "http", "api_url": "http://localhost:8080", "timeout_s": 5.0,
                            "retries": 2, "rps": 5, "params": {"a": 1}}


def test_env_api_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_API_URL", "http://chatbot.internal:9000")
    t = build()
    assert isinstance(t, HttpTarget) and t.api_url == "http://chatbot.internal:9000"


def test_flag_beats_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_API_URL", "http://from-env:1")
    assert build(api_url="http://from-flag:2").api_url == "http://from-flag:2"


def test_url_as_target_spec() -> None:
    assert isinstance(build(target="https://bot.example.com"), HttpTarget)


def test_python_spec(tmp_path: Path) -> None:
    path = tmp_path / "bot.py"
    path.write_text("def ask(request):\n    return {'answer': request['options']['x']}\n")
    t = build(target=f"python:{path}:ask", params={"x": "param"})
    assert isinstance(t, CallableTarget)
    assert asyncio.run(t.ask(AskRequest(question="q"))).response.answer == "param"


def test_replay_spec(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"id": "a", "answer": "x"}) + "\n")
    assert isinstance(build(target=f"replay:{log}"), ReplayTarget)


def test_default_is_reference_and_needs_a_vault(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        build(vault=tmp_path / "missing")
    assert str(e.value) == f"{tmp_path / 'missing'}: --vault: vault folder not found"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(target="python:x:y", api_url="http://a"), "either --target or --api-url"),
        (dict(target="grpc:host:1"), "unknown target kind 'grpc'"),
        (dict(target="python:"), "expected python:package.module:function"),
        (dict(target="replay"), "expected python:package.module:function"),
        (dict(target=""), "expected python:package.module:function"),
        (dict(target="python:nomodulehere_xyz:fn"), "no module named 'nomodulehere_xyz'"),
        (dict(target="replay:/no/such/log.jsonl"), "replay log not found"),
        (dict(api_url="localhost:8080"), "--api-url: expected an http(s) URL"),
        (dict(api_url="http://a?token=x"), "--api-url: expected a base URL without ?query"),
        (dict(api_url="http://a", timeout=0), "--timeout: must be a positive number"),
    ],
)
def test_bad_specs(kw: dict, message: str) -> None:
    with pytest.raises(InputError) as e:
        build(**kw)
    assert message in str(e.value)


def test_parse_param_options() -> None:
    assert parse_param_options(["k=3", "flag=true", "model=qwen2.5-14b", "w=[1, 2]", "s=", "eq=a=b"]) == {
        "k": 3, "flag": True, "model": "qwen2.5-14b", "w": [1, 2], "s": "", "eq": "a=b",
    }
    with pytest.raises(BadConfig) as e:
        parse_param_options(["novalue", "=x", "ok=1"])
    assert [str(p) for p in e.value.problems] == [
        "--param: expected key=value, got 'novalue'",
        "--param: expected key=value, got '=x'",
    ]


class FakeChatbot:
    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.requests: list[dict] = []

    def ask(self, request: dict) -> Any:
        self.requests.append(request)
        return self.reply

    def index_stats(self) -> dict:
        return {"docs_processed": 2, "chunker_version": "c1"}


def test_reference_target_with_a_chatbot_of_the_same_shape() -> None:
    bot = FakeChatbot({"answer": "ref", "references": [], "abstained": False})
    t = ReferenceTarget(Path("vault"), "vid", params={"p": 1}, chatbot=bot)
    result = asyncio.run(t.ask(AskRequest(question="q")))
    assert result.response.answer == "ref"
    assert bot.requests[0]["debug"] is True and bot.requests[0]["options"] == {"p": 1}
    cov = asyncio.run(t.index_stats())
    assert cov is not None and cov.docs_processed == 2
    assert t.describe() == {"kind": "reference", "vault": "vault", "vault_id": "vid", "params": {"p": 1}}


def test_reference_target_invalid_reply() -> None:
    t = ReferenceTarget(Path("vault"), chatbot=FakeChatbot({"no": "answer"}))
    with pytest.raises(TargetError) as e:
        asyncio.run(t.ask(AskRequest(question="q")))
    assert e.value.kind == "invalid_response"


def test_reference_target_records_a_failing_model_endpoint_as_http_error() -> None:
    # regression: a dead ANSWER_/EMBEDDINGS_ endpoint crashed the whole in-process run
    from evalkit.reference.openai_compat import BackendError

    class DeadEndpointBot(FakeChatbot):
        def ask(self, request: dict) -> Any:
            raise BackendError("answer endpoint returned 503")

    t = ReferenceTarget(Path("vault"), chatbot=DeadEndpointBot(None))
    with pytest.raises(TargetError) as e:
        asyncio.run(t.ask(AskRequest(question="q")))
    assert (e.value.kind, e.value.status) == ("http_error", 502)


def test_importing_targets_does_not_import_httpx() -> None:
    code = "import sys, evalkit.targets; sys.exit(1 if 'httpx' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
