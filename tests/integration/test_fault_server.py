"""HttpTarget against a real loopback server that injects faults (no respx here)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import TargetError
from evalkit.net.retry import RetryPolicy
from evalkit.schema import AskRequest
from evalkit.targets.http import HttpTarget
from tests.integration.fault_server import FaultServer, start_fault_server

pytestmark = pytest.mark.integration


def target(srv: FaultServer, **kw: Any) -> HttpTarget:
    kw.setdefault("retry_policy", RetryPolicy.no_wait(kw.pop("attempts", 3)))
    kw.setdefault("timeout", 5.0)
    return HttpTarget(srv.base_url, **kw)


async def ask_all(t: HttpTarget, questions: list[str], **req: Any) -> list[Any]:
    async def one(q: str) -> Any:
        try:
            return await t.ask(AskRequest(question=q, **req))
        except TargetError as e:
            return e

    try:
        return await asyncio.gather(*(one(q) for q in questions))
    finally:
        await t.aclose()


def test_every_error_class_over_a_real_socket(fault_server: Any) -> None:
    srv = fault_server(
        {
            "ok": "ok",
            "flaky": {"behaviour": "503-then-ok", "times": 2},
            "limited": {"behaviour": "429-then-ok", "times": 1, "retry_after": "0"},
            "down": "500",
            "gone": {"behaviour": "status", "status": 410},
            "garbled": "bad_json",
            "schema": "invalid_schema",
            "empty": "empty_answer",
            "partial": "partial",
            "hang": {"behaviour": "hang", "hang_s": 120},  # released when the server stops
            "cut": "disconnect",
        }
    )
    questions = [q for q in srv.behaviours if q != "hang"]
    results = dict(zip(questions, asyncio.run(ask_all(target(srv), questions, k=2))))
    # A short timeout only where the hang is, so a slow CI machine cannot fail the others; the
    # server holds its answer 400 times longer, so only the client's timeout can end that case.
    (results["hang"],) = asyncio.run(ask_all(target(srv, timeout=0.3, attempts=2), ["hang"]))

    assert results["ok"].missing_fields == [] and len(results["ok"].response.debug.retrieved_chunks) == 2
    assert results["flaky"].attempts == 3 and srv.hits["flaky"] == 3
    assert results["limited"].attempts == 2
    assert results["empty"].response.answer == ""  # the runner, not the target, calls it empty_answer
    assert results["partial"].missing_fields[:3] == ["references", "abstained", "debug"]

    def err(q: str) -> tuple[str, int | None]:
        e = results[q]
        assert isinstance(e, TargetError), (q, e)
        return e.kind, e.status

    assert err("down") == ("http_error", 500) and srv.hits["down"] == 3
    assert err("gone") == ("http_error", 410) and srv.hits["gone"] == 1
    assert err("garbled") == ("invalid_response", None)
    assert err("schema") == ("invalid_response", None) and "answer" in results["schema"].detail
    assert err("hang") == ("timeout", None) and srv.hits["hang"] == 2
    assert err("cut") == ("http_error", None)


def test_request_reaches_the_server_as_the_contract_says(fault_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_API_KEY", "secret-token")
    srv = fault_server()
    t = target(srv, params={"temperature": 0})
    asyncio.run(ask_all(t, ["What is alpha?"], k=3, folder_mode="on"))
    (req,) = srv.requests
    assert (req["method"], req["path"], req["query"]) == ("POST", "/api/v1/ask", "debug=true")
    assert req["body"]["question"] == "What is alpha?" and req["body"]["options"] == {"temperature": 0}
    assert "debug" not in req["body"]
    assert req["authorization"] == "Bearer secret-token"
    assert "secret-token" not in json.dumps(t.describe())


def test_connection_refused_is_connect() -> None:
    base_url, stop = start_fault_server()
    stop()  # nothing listens on that port any more
    t = HttpTarget(base_url, retry_policy=RetryPolicy.no_wait(2), timeout=2)
    (res,) = asyncio.run(ask_all(t, ["q"]))
    assert isinstance(res, TargetError) and res.kind == "connect"


def test_index_stats(fault_server: Any) -> None:
    async def stats(srv: FaultServer) -> Any:
        t = target(srv)
        try:
            return await t.index_stats()
        finally:
            await t.aclose()

    cov = asyncio.run(stats(fault_server()))
    assert cov is not None and cov.docs_processed == 3 and cov.coverage_by_doc_type["md"].processed == 3
    assert asyncio.run(stats(fault_server(index_stats=None))) is None


def test_many_concurrent_requests_reuse_connections(fault_server: Any) -> None:
    srv = fault_server({"*": {"behaviour": "ok", "delay_ms": 20}})
    questions = [f"q{i}" for i in range(64)]
    t = target(srv)

    async def go() -> tuple[list[Any], int]:
        sem = asyncio.Semaphore(16)

        async def one(q: str) -> Any:
            async with sem:
                return await t.ask(AskRequest(question=q))

        out = await asyncio.gather(*(one(q) for q in questions))
        n_clients = t._checkout()._inner.n_connections
        await t.aclose()
        return out, n_clients

    results, n_clients = asyncio.run(go())
    assert all(r.missing_fields == [] for r in results)
    assert n_clients <= 16  # one connection per request in flight, reused afterwards


def test_bench_stub_server_answers_the_contract() -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "stub_server.py"
    spec = importlib.util.spec_from_file_location("bench_stub_server", path)
    assert spec is not None and spec.loader is not None
    stub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stub)
    base_url, stop = stub.start_stub_server(delay_ms=5)
    try:
        t = HttpTarget(base_url, retries=0, timeout=5)
        (res,) = asyncio.run(ask_all(t, ["anything"]))
        assert res.missing_fields == []
        assert res.elapsed_ms >= 5
    finally:
        stop()
