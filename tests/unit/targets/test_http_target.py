"""HttpTarget over httpx.MockTransport: parsing, retries, error classes, headers (no sockets)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from evalkit.errors import TargetError
from evalkit.net.retry import RetryPolicy
from evalkit.schema import AskRequest
from evalkit.targets.http import HttpTarget

CHUNK = {
    "chunk_id": "a" * 32,
    "rel_path": "notes/alpha.md",
    "heading_path": "# Alpha",
    "start_line": 1,
    "end_line": 9,
    "score_vector": 0.9,
    "score_lexical": 0.4,
    "score_final": 0.75,
    "text": "Alpha is the first letter.",
    "rank": 1,
    "token_count": 5,
}
FULL = {
    "answer": "Alpha comes first [1].",
    "references": [{k: CHUNK[k] for k in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")}],
    "abstained": False,
    "debug": {
        "retrieved_chunks": [CHUNK],
        "folder_selection": {"mode": "on", "selected_folders": ["notes"], "reasoning": "r", "fallback_used": False},
        "timings_ms": {"folder_selection": 1.5, "retrieval": 2.5, "generation": 30.0},
        "versions": {
            "index_build_version": "i1",
            "retriever_version": "r1",
            "answerer_version": "a1",
            "llm_model": "m",
            "embedding_model": "e",
            "chunker_version": "c1",
        },
    },
}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Server:
    """A MockTransport handler that replays a script of responses and records requests."""

    def __init__(self, *script: Any):
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.script[min(len(self.requests), len(self.script)) - 1]
        if isinstance(step, Exception):
            raise step
        if callable(step):
            return step(request)
        return step


def ok(body: Any = FULL, **kw: Any) -> httpx.Response:
    return httpx.Response(200, json=body, **kw)


def make_target(server: Server, *, attempts: int = 4, url: str = "http://api.test", **kw: Any) -> HttpTarget:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    kw.setdefault("retry_policy", RetryPolicy.no_wait(attempts))
    return HttpTarget(url, client=client, **kw)


def ask(target: HttpTarget, **req: Any) -> Any:
    req.setdefault("question", "What comes first?")
    return run(target.ask(AskRequest(**req)))


def test_full_response_parses_with_nothing_missing() -> None:
    server = Server(ok())
    result = ask(make_target(server), folder_mode="on")
    assert result.response.answer == "Alpha comes first [1]."
    assert result.response.debug.retrieved_chunks[0].chunk_id == "a" * 32
    assert result.missing_fields == []
    assert result.server_timings_ms == {"folder_selection": 1.5, "retrieval": 2.5, "generation": 30.0}
    assert result.attempts == 1
    assert result.elapsed_ms is not None and result.elapsed_ms >= 0


@pytest.mark.parametrize("url", ["http://api.test", "http://api.test/", "http://api.test///"])
def test_request_url_query_and_body(url: str) -> None:
    server = Server(ok())
    target = make_target(server, url=url, params={"temperature": 0, "model": "x"})
    ask(target, k=3, folder_mode="on_with_fallback", vaults=["v"], folders=["f"], options={"model": "y"})
    (req,) = server.requests
    assert req.method == "POST"
    assert str(req.url) == "http://api.test/api/v1/ask?debug=true"
    body = json.loads(req.content)
    assert "debug" not in body
    assert body == {
        "question": "What comes first?",
        "k": 3,
        "folder_mode": "on_with_fallback",
        "vaults": ["v"],
        "folders": ["f"],
        "rerank_weights": {"vector": 0.7, "lexical": 0.3},
        # --param values go into options; the request's own options win on a clash
        "options": {"temperature": 0, "model": "y"},
    }
    assert req.headers["content-type"] == "application/json"


def test_500_is_retried_then_http_error() -> None:
    server = Server(httpx.Response(500, text="boom"))
    with pytest.raises(TargetError) as e:
        ask(make_target(server, attempts=4))
    assert (e.value.kind, e.value.status) == ("http_error", 500)
    assert len(server.requests) == 4
    assert "4 tries" in e.value.detail and "boom" in e.value.detail


def test_503_then_200_succeeds_on_third_try() -> None:
    server = Server(httpx.Response(503), httpx.Response(503), ok())
    result = ask(make_target(server, attempts=4))
    assert len(server.requests) == 3
    assert result.attempts == 3
    assert result.response.answer


def test_retries_zero_means_one_try() -> None:
    server = Server(httpx.Response(502))
    target = make_target(server, retry_policy=None, retries=0)
    with pytest.raises(TargetError) as e:
        ask(target)
    assert e.value.status == 502
    assert len(server.requests) == 1


def test_429_waits_retry_after_then_succeeds() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    server = Server(httpx.Response(429, headers={"Retry-After": "2"}), ok())
    result = ask(make_target(server, retry_policy=RetryPolicy(attempts=4, sleep=sleep)))
    assert waits == [2.0]
    assert result.attempts == 2


def test_retry_after_is_capped() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    server = Server(httpx.Response(503, headers={"Retry-After": "86400"}), ok())
    ask(make_target(server, retry_policy=RetryPolicy(attempts=2, max_retry_after=5.0, sleep=sleep)))
    assert waits == [5.0]


def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    server = Server(httpx.Response(500))
    policy = RetryPolicy(attempts=4, initial_wait=0.5, jitter=0.5, sleep=sleep)
    with pytest.raises(TargetError):
        ask(make_target(server, retry_policy=policy))
    assert len(waits) == 3  # bounded: 4 tries, 3 waits
    # by hand: initial * 2**(n-1) + uniform(0, jitter) for n = 1, 2, 3
    for n, w in enumerate(waits, start=1):
        assert 0.5 * 2 ** (n - 1) <= w <= 0.5 * 2 ** (n - 1) + 0.5


def test_read_timeout_is_retried_then_timeout() -> None:
    server = Server(httpx.ReadTimeout("timed out"))
    with pytest.raises(TargetError) as e:
        ask(make_target(server, attempts=3, timeout=1.5))
    assert e.value.kind == "timeout"
    assert e.value.status is None
    assert len(server.requests) == 3
    assert "1.5s" in e.value.detail


def test_timeout_then_success() -> None:
    server = Server(httpx.ReadTimeout("timed out"), ok())
    assert ask(make_target(server)).attempts == 2


def test_connect_error_is_connect() -> None:
    server = Server(httpx.ConnectError("refused"))
    with pytest.raises(TargetError) as e:
        ask(make_target(server, attempts=2))
    assert e.value.kind == "connect"
    assert len(server.requests) == 2


def test_server_disconnect_is_http_error_without_status() -> None:
    server = Server(httpx.RemoteProtocolError("Server disconnected without sending a response."))
    with pytest.raises(TargetError) as e:
        ask(make_target(server, attempts=2))
    assert (e.value.kind, e.value.status) == ("http_error", None)


def test_4xx_is_not_retried() -> None:
    server = Server(httpx.Response(404, text="no such route"))
    with pytest.raises(TargetError) as e:
        ask(make_target(server))
    assert (e.value.kind, e.value.status) == ("http_error", 404)
    assert len(server.requests) == 1


def test_bad_json_is_invalid_response_and_not_retried() -> None:
    server = Server(httpx.Response(200, text='{"answer": "trunc', headers={"content-type": "application/json"}))
    with pytest.raises(TargetError) as e:
        ask(make_target(server))
    assert e.value.kind == "invalid_response"
    assert "not JSON" in e.value.detail
    assert len(server.requests) == 1


def test_json_array_is_invalid_response() -> None:
    with pytest.raises(TargetError) as e:
        ask(make_target(Server(ok([1, 2]))))
    assert e.value.kind == "invalid_response"
    assert "not an object (got array)" in e.value.detail


def test_missing_answer_names_the_field() -> None:
    with pytest.raises(TargetError) as e:
        ask(make_target(Server(ok({"references": []}))))
    assert e.value.kind == "invalid_response"
    assert "answer: Field required" in e.value.detail


def test_nested_validation_error_has_the_field_path() -> None:
    body = {"answer": "x", "debug": {"retrieved_chunks": [{"heading_path": "# A"}]}}
    with pytest.raises(TargetError) as e:
        ask(make_target(Server(ok(body))))
    assert "debug.retrieved_chunks[0].rel_path: Field required" in e.value.detail


def test_partial_response_lists_missing_fields() -> None:
    result = ask(make_target(Server(ok({"answer": "only this"}))))
    assert result.response.answer == "only this"
    assert result.missing_fields == [
        "references",
        "abstained",
        "debug",
        "debug.retrieved_chunks",
        "debug.timings_ms",
        "debug.versions",
    ]
    assert result.server_timings_ms == {}


def test_partial_chunks_list_missing_per_item_fields() -> None:
    chunk = {"rel_path": "a.md", "heading_path": "# A", "score_vector": 0.5, "score_final": 0.5, "text": "t"}
    body = {
        "answer": "x",
        "references": [{"rel_path": "a.md", "heading_path": "# A"}],
        "abstained": True,
        "debug": {"retrieved_chunks": [chunk], "timings_ms": {"retrieval": 3}, "versions": {"llm_model": "m"}},
    }
    result = ask(make_target(Server(ok(body))), folder_mode="on")
    assert result.missing_fields == [
        "references[].chunk_id",
        "references[].start_line",
        "references[].end_line",
        "abstain_reason",
        "debug.retrieved_chunks[].chunk_id",
        "debug.retrieved_chunks[].start_line",
        "debug.retrieved_chunks[].end_line",
        "debug.retrieved_chunks[].score_lexical",
        "debug.retrieved_chunks[].rank",
        "debug.retrieved_chunks[].token_count",
        "debug.folder_selection",
        "debug.timings_ms.folder_selection",
        "debug.timings_ms.generation",
        "debug.versions.index_build_version",
        "debug.versions.retriever_version",
        "debug.versions.answerer_version",
        "debug.versions.embedding_model",
        "debug.versions.chunker_version",
    ]
    assert result.server_timings_ms == {"retrieval": 3.0}


def test_null_leaf_is_present_but_null_section_is_missing() -> None:
    body = json.loads(json.dumps(FULL))
    body["abstained"] = None
    body["debug"]["retrieved_chunks"][0]["score_lexical"] = None
    body["debug"]["versions"]["llm_model"] = None
    del body["debug"]["retrieved_chunks"][0]["token_count"]
    body["debug"]["timings_ms"] = None
    result = ask(make_target(Server(ok(body))), folder_mode="on")
    # by hand: only the absent key and the null section; null leaves are implemented
    assert result.missing_fields == ["debug.retrieved_chunks[].token_count", "debug.timings_ms"]


def test_unknown_fields_are_kept() -> None:
    body = {**FULL, "trace_id": "t-1"}
    result = ask(make_target(Server(ok(body))))
    assert result.response.model_extra == {"trace_id": "t-1"}


def test_api_key_is_sent_but_never_described(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_API_KEY", "sk-secret-123")
    server = Server(ok())
    target = make_target(server)
    ask(target)
    assert server.requests[0].headers["authorization"] == "Bearer sk-secret-123"
    assert "sk-secret-123" not in json.dumps(target.describe())
    assert "sk-secret-123" not in repr(target) + target.name


def test_no_api_key_no_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVAL_API_KEY", raising=False)
    server = Server(ok())
    ask(make_target(server))
    assert "authorization" not in server.requests[0].headers


def test_describe_drops_credentials_in_url() -> None:
    target = make_target(Server(ok()), url="http://user:pw@api.test:8080/", params={"a": 1})
    d = target.describe()
    assert d == {
        "kind": "http",
        "api_url": "http://api.test:8080",
        "timeout_s": 30.0,
        "retries": 3,
        "rps": None,
        "params": {"a": 1},
    }
    assert "pw" not in target.name


def test_index_stats_parses() -> None:
    stats = {"docs_processed": 4, "chunks_embedded": 9, "chunk_token_stats": {"min": 1, "max": 9}}
    server = Server(httpx.Response(200, json=stats))
    cov = run(make_target(server).index_stats())
    assert cov is not None and cov.docs_processed == 4 and cov.chunk_token_stats.max == 9
    assert str(server.requests[0].url) == "http://api.test/api/v1/index/stats"
    assert server.requests[0].method == "GET"


@pytest.mark.parametrize(
    "step",
    [
        httpx.Response(404),
        httpx.Response(500),
        httpx.Response(200, text="<html>"),
        httpx.Response(200, json={"docs_processed": "many"}),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
    ids=["404", "500", "not-json", "invalid", "connect", "timeout"],
)
def test_index_stats_is_none_when_unavailable(step: Any) -> None:
    assert run(make_target(Server(step)).index_stats()) is None


def test_injected_client_is_not_closed() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(Server(ok())))
    target = HttpTarget("http://api.test", client=client)

    async def go() -> None:
        await target.ask(AskRequest(question="q"))
        await target.aclose()
        assert not client.is_closed
        await client.aclose()

    run(go())


def test_bad_api_url_is_bad_config() -> None:
    from evalkit.errors import BadConfig

    with pytest.raises(BadConfig, match="--api-url"):
        HttpTarget("localhost:8080")


def test_concurrent_asks_share_the_target() -> None:
    server = Server(ok())
    target = make_target(server)

    async def go() -> list[Any]:
        return await asyncio.gather(*(target.ask(AskRequest(question=f"q{i}")) for i in range(20)))

    results = run(go())
    assert len(results) == 20 and len(server.requests) == 20


def test_undecodable_body_is_invalid_response() -> None:
    bad_gzip = httpx.Response(200, stream=httpx.ByteStream(b"not gzip at all"), headers={"content-encoding": "gzip"})
    with pytest.raises(TargetError) as e:
        ask(make_target(Server(bad_gzip)))
    assert e.value.kind == "invalid_response"
