"""HttpTarget on the wire (httpx's transport, the one HTTP stack) against a scripted loopback server.

Each test starts an asyncio server on 127.0.0.1 that answers every request with the next
canned reply, byte for byte, so framing (Content-Length, chunked, close-delimited),
keep-alive and every malformed answer can be written down exactly. The fault server
(tests/integration/test_fault_server.py) covers the error classes over http.server.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from evalkit.errors import TargetError
from evalkit.net.limits import BoundedTransport
from evalkit.net.retry import RetryPolicy
from evalkit.schema import AskRequest
from evalkit.targets.http import HttpTarget

BODY = json.dumps({"answer": "Alpha comes first.", "references": [], "abstained": False}).encode()
STATS = json.dumps({"docs_processed": 2, "chunks_attempted": 4, "chunks_embedded": 4}).encode()


def answer(body: bytes = BODY, *headers: str, status: str = "200 OK", version: str = "HTTP/1.1") -> bytes:
    head = [f"{version} {status}", "Content-Type: application/json", *headers]
    if not any(h.lower().startswith(("content-length:", "transfer-encoding:")) for h in headers):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@dataclass
class Reply:
    """What the server does for one request: write `data`, then maybe close or hang."""

    data: bytes = b""
    close: bool = False
    hang: bool = False


@dataclass
class ScriptServer:
    replies: list[Any]
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    url: str = ""

    async def __aenter__(self) -> ScriptServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                reply = self.replies.pop(0)
                if isinstance(reply, bytes):
                    reply = Reply(reply)
                writer.write(reply.data)
                await writer.drain()
                if reply.hang:
                    await asyncio.sleep(30)
                if reply.close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def target(url: str, **kw: Any) -> HttpTarget:
    kw.setdefault("retry_policy", RetryPolicy.no_wait(1))
    kw.setdefault("timeout", 2.0)
    return HttpTarget(url, **kw)


async def ask_n(replies: list[Any], n: int = 1, *, pause: float = 0.0, **kw: Any) -> tuple[list[Any], ScriptServer]:
    """Ask n questions one after another; each result is an AskResult or the TargetError."""
    async with ScriptServer(replies) as srv:
        t = target(srv.url, **kw)
        out: list[Any] = []
        try:
            for i in range(n):
                if i and pause:
                    await asyncio.sleep(pause)
                try:
                    out.append(await t.ask(AskRequest(question=f"q{i}")))
                except TargetError as e:
                    out.append(e)
        finally:
            await t.aclose()
        return out, srv


def test_plain_http_keeps_the_connection_alive() -> None:
    (a, b), srv = asyncio.run(ask_n([answer(), answer()], 2))
    assert a.response.answer == b.response.answer == "Alpha comes first."
    assert srv.connections == 1  # the second ask reused the first connection


def test_request_on_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_API_KEY", "tok-123")
    _, srv = asyncio.run(ask_n([answer()], params={"temperature": 0}))
    head, _, body = srv.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /api/v1/ask?debug=true HTTP/1.1"
    headers = {k.lower(): v for k, v in (line.split(b": ", 1) for line in lines[1:])}
    host, port = srv.url.removeprefix("http://").split(":")
    assert {k: headers.get(k) for k in (b"host", b"authorization", b"content-type", b"content-length")} == {
        b"host": f"{host}:{port}".encode(),
        b"authorization": b"Bearer tok-123",
        b"content-type": b"application/json",
        b"content-length": str(len(body)).encode(),
    }
    assert b"cookie" not in headers
    assert json.loads(body) == {**json.loads(body), "question": "q0", "options": {"temperature": 0}}


def test_chunked_answer_with_trailer() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(part), part) for part in (BODY[:7], BODY[7:20], BODY[20:]))
    (a, b), srv = asyncio.run(ask_n([head + chunks + b"0\r\nX-Trailer: 1\r\n\r\n", answer()], 2))
    assert a.response.answer == b.response.answer and srv.connections == 1


def test_close_delimited_answer_then_a_new_connection() -> None:
    old_style = Reply(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY, close=True)
    (a, b), srv = asyncio.run(ask_n([old_style, answer()], 2))
    assert a.response.answer == b.response.answer and srv.connections == 2


def test_connection_close_header_is_honoured() -> None:
    (a, b), srv = asyncio.run(ask_n([answer(BODY, "Connection: close"), answer()], 2))
    assert a.response.answer == b.response.answer and srv.connections == 2


def test_interim_100_is_skipped_and_bare_lf_is_read() -> None:
    lf = b"HTTP/1.1 200 OK\nContent-Length: %d\n\n" % len(BODY) + BODY
    (a,), _ = asyncio.run(ask_n([b"HTTP/1.1 100 Continue\r\n\r\n" + lf]))
    assert a.response.answer == "Alpha comes first."


def test_gzip_body_is_decoded() -> None:
    packed = gzip.compress(BODY)
    (a,), _ = asyncio.run(ask_n([answer(packed, "Content-Encoding: gzip", f"Content-Length: {len(packed)}")]))
    assert a.response.answer == "Alpha comes first."


def test_idle_connection_closed_by_the_server_is_reopened_without_an_error() -> None:
    # The server closes after its first answer (a keep-alive timeout, say), without saying so.
    (a, b), srv = asyncio.run(ask_n([Reply(answer(), close=True), answer()], 2, pause=0.1))
    assert a.response.answer == b.response.answer
    assert b.attempts == 1 and srv.connections == 2


def test_retryable_status_is_retried_on_the_same_connection() -> None:
    busy = answer(b'{"error": "busy"}', "Retry-After: 0", status="503 Service Unavailable")
    (a,), srv = asyncio.run(ask_n([busy, answer()], retry_policy=RetryPolicy.no_wait(2)))
    assert a.attempts == 2 and srv.connections == 1


def test_error_status_keeps_its_status_and_body() -> None:
    (e,), _ = asyncio.run(ask_n([answer(b'{"detail": "no such route"}', status="404 Not Found")]))
    assert (e.kind, e.status) == ("http_error", 404) and "no such route" in e.detail


@pytest.mark.parametrize(
    "reply, words",
    [
        (b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\n{}", "status line"),
        (b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\n{}", "status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n folded\r\n\r\n{}", "header line"),
        (b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", "header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n{}", "Transfer-Encoding"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", "chunk size"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", "over 65536 bytes"),
    ],
)
def test_malformed_answers_are_http_errors(reply: bytes, words: str) -> None:
    # `words`: what is wrong, for the reader; h11 words its own messages
    (e,), _ = asyncio.run(ask_n([Reply(reply, close=True)]))
    assert isinstance(e, TargetError) and e.status is None
    if e.kind == "invalid_response":  # an answer h11 could frame (an oversized header) is still no answer
        assert "not JSON" in e.detail
    else:
        assert e.kind == "http_error" and "RemoteProtocolError" in e.detail


def test_disconnect_before_or_during_the_answer_is_an_http_error() -> None:
    (before,), _ = asyncio.run(ask_n([Reply(b"", close=True)]))
    (during,), _ = asyncio.run(ask_n([Reply(answer()[:-5], close=True)]))
    assert "without sending a response" in before.detail
    assert before.kind == during.kind == "http_error"


def test_silence_after_the_head_is_a_timeout() -> None:
    # The server then stays silent for 30 s: only the 0.3 s timeout can end the case as one.
    (e,), _ = asyncio.run(ask_n([Reply(answer()[:-5], hang=True)], timeout=0.3))
    assert e.kind == "timeout"


def test_connection_refused_is_connect() -> None:
    async def go() -> Any:
        async with ScriptServer([]) as srv:
            url = srv.url
        t = target(url)  # the server is closed: nothing listens on that port
        try:
            await t.ask(AskRequest(question="q"))
        except TargetError as e:
            return e

    e = asyncio.run(go())
    assert e.kind == "connect"


def test_index_stats_is_a_get_without_a_body() -> None:
    async def go() -> Any:
        async with ScriptServer([answer(STATS)]) as srv:
            t = target(srv.url)
            try:
                return await t.index_stats(), srv.requests
            finally:
                await t.aclose()

    stats, requests = asyncio.run(go())
    assert stats is not None and stats.docs_processed == 2
    head = requests[0].split(b"\r\n")
    assert head[0] == b"GET /api/v1/index/stats HTTP/1.1"
    assert not any(line.lower().startswith((b"content-length", b"content-type")) for line in head)


def test_every_path_is_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    # One HTTP stack (issue 25 item 7): a byte-capped httpx transport on every path; only an
    # injected client is the caller's own.
    def conn(url: str, **kw: Any) -> Any:
        t = HttpTarget(url, **kw)
        return t._checkout()

    assert isinstance(conn("http://127.0.0.1:9"), BoundedTransport)
    assert isinstance(conn("https://127.0.0.1:9"), BoundedTransport)

    def route(url: str) -> Any:  # what the capped stack sends an origin's requests through
        u = httpx.URL(url)
        return conn(url)._inner._route((u.raw_scheme, u.raw_host, u.port), u)

    assert route("http://example.org:9") is None  # directly
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert isinstance(route("http://example.org:9"), httpx.AsyncHTTPTransport)
    monkeypatch.setenv("NO_PROXY", "example.org")
    assert route("http://example.org:9") is None
    client = httpx.AsyncClient()
    assert conn("http://127.0.0.1:9", client=client) is client


def test_a_proxy_in_the_environment_carries_the_asks_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    # The script server plays a forward proxy: an HTTP proxy gets the absolute URL in the
    # request line. The answer through it is capped and parsed as any other.
    async def go() -> tuple[list[Any], ScriptServer]:
        async with ScriptServer([answer(), answer(b"x" * 5000)]) as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            t = target("http://chatbot.example:8080", max_response_bytes=1000)
            out: list[Any] = []
            try:
                for q in ("q0", "q1"):
                    try:
                        out.append(await t.ask(AskRequest(question=q)))
                    except TargetError as e:
                        out.append(e)
            finally:
                await t.aclose()
            return out, proxy

    (ok, big), proxy = asyncio.run(go())
    assert ok.response.answer == "Alpha comes first."
    assert proxy.requests[0].split(b"\r\n")[0] == b"POST http://chatbot.example:8080/api/v1/ask?debug=true HTTP/1.1"
    assert isinstance(big, TargetError) and big.kind == "response_too_large"
