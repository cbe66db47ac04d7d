"""evalkit.net.transport: one kept-alive HTTP/1.1 connection per request in flight, on asyncio.

A raw loopback server (threads, sockets) answers exactly as each test scripts it, and
counts the TCP connections it accepted, so reuse and re-opening are seen from the server.
Every test of one connection runs on both kinds (`Connection`): httpcore's
(ConnectionTransport, the judges') and the one written here and parsed by httptools
(Http11Connection, the HTTP target's), which must behave alike.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalkit.net.limits import BoundedTransport, ResponseTooLarge, deadline_in
from evalkit.net.transport import ConnectionStack, ConnectionTransport, Http11Connection

Handler = Callable[[socket.socket, bytes, int], bool]  # (conn, request, n) -> keep the connection open?


def _response(body: bytes, *, status: str = "200 OK", close: bool = False) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


def _read_request(conn: socket.socket, buf: bytearray) -> bytes | None:
    """One whole request (head and Content-Length body) from `buf` + the socket; None at EOF."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    buf[:] = rest[length:]
    return head + b"\r\n\r\n" + rest[:length]


class Server:
    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None):
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._tls = tls
        self.port = self._sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            buf = bytearray()
            while True:
                request = _read_request(conn, buf)
                if request is None:
                    return
                self.requests.append(request)
                if not self.handler(conn, request, len(self.requests)):
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        # Wake the accept() before closing: a thread still blocked in it on a closed socket's
        # number accepts on whatever socket gets that number next (a later test's server,
        # whose clients then got this server's answers).
        self._stop = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(handler: Handler, tls: ssl.SSLContext | None = None) -> Server:
        made.append(Server(handler, tls))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture(params=[ConnectionTransport, Http11Connection], ids=["httpcore", "httptools"])
def Connection(request: pytest.FixtureRequest) -> type:  # noqa: N802 (a class, as it is used)
    return request.param


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    return port


def _ok(body: bytes = b'{"ok": true}') -> Handler:
    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(_response(body))
        return True

    return handler


async def _get(transport: httpx.AsyncBaseTransport, url: str, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.get(url, **kw)


def test_sequential_requests_reuse_one_connection(serve: Callable[..., Server], Connection: type) -> None:
    srv = serve(_ok())

    async def go() -> list[bytes]:
        t = Connection()
        async with httpx.AsyncClient(transport=t) as client:
            out = [(await client.post(srv.url + "/x", content=b"{}")).content for _ in range(5)]
        return out

    assert asyncio.run(go()) == [b'{"ok": true}'] * 5
    assert srv.connections == 1  # kept alive
    head = srv.requests[0].split(b"\r\n")
    assert head[0] == b"POST /x HTTP/1.1"
    assert b"Content-Length: 2" in srv.requests[0] and srv.requests[0].endswith(b"\r\n\r\n{}")


def test_a_closed_connection_is_reopened(serve: Callable[..., Server], Connection: type) -> None:
    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(_response(b"{}", close=True))
        return False  # the server hangs up after every answer

    srv = serve(handler)

    async def go() -> list[int]:
        async with httpx.AsyncClient(transport=Connection()) as client:
            return [(await client.get(srv.url)).status_code for _ in range(3)]

    assert asyncio.run(go()) == [200, 200, 200]
    assert srv.connections == 3


def test_a_connection_the_server_dropped_while_idle_is_not_reused(serve: Callable[..., Server], Connection: type) -> None:
    # No "Connection: close": the server just closes the socket after answering. The
    # transport sees the hang-up while the connection is idle and opens a new one.
    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(_response(b"{}"))
        return False

    srv = serve(handler)

    async def go() -> list[int]:
        async with httpx.AsyncClient(transport=Connection()) as client:
            out = []
            for _ in range(3):
                out.append((await client.get(srv.url)).status_code)
                await asyncio.sleep(0.05)  # the FIN arrives while idle
            return out

    assert asyncio.run(go()) == [200, 200, 200]
    assert srv.connections == 3


def test_large_bodies_both_ways(serve: Callable[..., Server], Connection: type) -> None:
    # Past the read buffer's high-water mark (reading pauses and resumes) and past the
    # size under which a request head waits for its body.
    big = bytes(range(256)) * 12_000  # 3 MB

    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        body = request.partition(b"\r\n\r\n")[2]
        conn.sendall(_response(body[::-1]))
        return True

    srv = serve(handler)

    async def go() -> bytes:
        async with httpx.AsyncClient(transport=Connection()) as client:
            return (await client.post(srv.url, content=big)).content

    assert asyncio.run(go()) == big[::-1]


def test_errors_are_httpx_errors(serve: Callable[..., Server], Connection: type) -> None:
    # The silent server answers nothing until the test is over: only the timeout can end that read.
    over = threading.Event()

    def silent(conn: socket.socket, request: bytes, n: int) -> bool:
        over.wait(60)
        return False

    def torn(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half")
        return False

    def junk(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(b"SPDY/9 what\r\n\r\n")
        return False

    port = _closed_port()

    with pytest.raises(httpx.ConnectError):
        asyncio.run(_get(Connection(), f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(httpx.ReadTimeout):
            asyncio.run(_get(Connection(), serve(silent).url, timeout=0.2))
    finally:
        over.set()
    with pytest.raises(httpx.RemoteProtocolError):
        asyncio.run(_get(Connection(), serve(torn).url))
    with pytest.raises(httpx.RemoteProtocolError):
        asyncio.run(_get(Connection(), serve(junk).url))


def test_a_cancelled_request_leaves_the_transport_usable(serve: Callable[..., Server], Connection: type) -> None:
    gave_up = threading.Event()

    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        if n == 1:
            gave_up.wait(60)  # the first answer comes after the caller gave up, however late that is
        conn.sendall(_response(b'{"n": %d}' % n))
        return True

    srv = serve(handler)

    async def go() -> bytes:
        async with httpx.AsyncClient(transport=Connection()) as client:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await client.get(srv.url)
            gave_up.set()
            return (await client.get(srv.url)).content

    assert asyncio.run(go()) == b'{"n": 2}'
    assert srv.connections == 2  # the cancelled exchange's connection was not reused


def test_the_byte_cap_and_deadline_hold_over_it(serve: Callable[..., Server], Connection: type) -> None:
    def huge(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(100):
            conn.sendall(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")
        return False

    def trickle(conn: socket.socket, request: bytes, n: int) -> bool:
        # a byte every 0.05 s: each read is quick; the whole body would take 30 s
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 600\r\n\r\n")
        for _ in range(600):
            conn.sendall(b"x")
            time.sleep(0.05)
        return False

    with pytest.raises(ResponseTooLarge):
        asyncio.run(_get(BoundedTransport(Connection(), max_bytes=100_000), serve(huge).url))
    # each byte came within the read timeout; only the deadline can stop it, and says so
    with pytest.raises(httpx.ReadTimeout, match="no complete answer within 0.3s") as late:
        asyncio.run(_get(BoundedTransport(Connection(), deadline=0.3), serve(trickle).url))
    # told from a single slow read, also behind the wrapping an SDK adds
    wrapped = RuntimeError("Request timed out.")
    wrapped.__cause__ = late.value
    assert deadline_in(wrapped) == 0.3 and deadline_in(httpx.ReadTimeout("slow")) is None


def test_read_gives_the_body_handle_async_request_gives_as_content() -> None:
    # BoundedTransport.read (the HTTP target's ask): the same status, headers and body as
    # handle_async_request's response content, gzip inflated, the cap and the deadline held
    import gzip

    body = b'{"answer": "' + "é".encode() * 5000 + b'"}'
    answers = {
        "/plain": lambda: httpx.Response(200, headers={"Content-Type": "application/json"}, content=body),
        "/gzip": lambda: httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=gzip.compress(body)),
        "/big": lambda: httpx.Response(200, content=b"x" * 5000),
    }

    async def slow(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            await asyncio.sleep(5)
        return answers[request.url.path]()

    def bounded(**kwargs: Any) -> BoundedTransport:
        return BoundedTransport(httpx.MockTransport(slow), **kwargs)

    async def go() -> None:
        for path in ("/plain", "/gzip"):
            response, got = await bounded(deadline=5).read(httpx.Request("GET", f"http://x{path}"))
            whole = await bounded(deadline=5).handle_async_request(httpx.Request("GET", f"http://x{path}"))
            assert (response.status_code, got) == (whole.status_code, whole.content) == (200, body)
            assert response.headers.get("Content-Encoding") is None  # inflated here, not again by httpx
        response, got = await bounded().read(httpx.Request("GET", "http://x/plain"))  # no deadline
        assert got == body
        with pytest.raises(ResponseTooLarge):
            await bounded(max_bytes=1000, deadline=5).read(httpx.Request("GET", "http://x/big"))
        with pytest.raises(httpx.ReadTimeout, match="no complete answer within 0.1s"):
            await bounded(deadline=0.1).read(httpx.Request("GET", "http://x/slow"))

    asyncio.run(go())


def test_the_stack_holds_one_connection_per_request_in_flight(serve: Callable[..., Server], Connection: type) -> None:
    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        time.sleep(0.02)
        conn.sendall(_response(b"{}"))
        return True

    srv = serve(handler)

    async def go() -> int:
        stack = ConnectionStack(connection=Connection)
        sem = asyncio.Semaphore(8)
        async with httpx.AsyncClient(transport=stack) as client:

            async def one() -> None:
                async with sem:
                    assert (await client.get(srv.url)).status_code == 200

            await asyncio.gather(*(one() for _ in range(40)))
            return stack.n_connections

    n = asyncio.run(go())
    assert n <= 8 and srv.connections == n  # reused, never more than were in flight


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a test certificate")
def test_https_through_asyncio_tls(serve: Callable[..., Server], tmp_path: Path, Connection: type) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    srv = serve(_ok(), tls=server_ctx)

    async def go(ctx: ssl.SSLContext) -> list[bytes]:
        async with httpx.AsyncClient(transport=Connection(ctx)) as client:
            return [(await client.get(srv.url)).content for _ in range(2)]

    trusting = ssl.create_default_context(cafile=str(cert))
    assert asyncio.run(go(trusting)) == [b'{"ok": true}'] * 2
    with pytest.raises(httpx.ConnectError, match="certificate"):
        asyncio.run(go(ssl.create_default_context()))  # the system CAs do not know it


def test_the_capped_client_goes_through_the_environments_proxy(
    serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The judge SDKs' client (bounded_client): the server plays a forward proxy, which gets
    # the absolute URL in the request line; the cap holds on that path too.
    from evalkit.net.limits import bounded_client

    def proxy(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(_response(b'{"ok": true}' if n == 1 else b"x" * 5000))
        return True

    srv = serve(proxy)
    monkeypatch.setenv("HTTP_PROXY", srv.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def go() -> bytes:
        async with bounded_client(timeout=5, max_bytes=1000) as client:
            first = (await client.post("http://judge.example/v1/chat/completions", content=b"{}")).content
            with pytest.raises(ResponseTooLarge):
                await client.post("http://judge.example/v1/chat/completions", content=b"{}")
            return first

    assert asyncio.run(go()) == b'{"ok": true}'
    assert srv.requests[0].split(b"\r\n")[0] == b"POST http://judge.example/v1/chat/completions HTTP/1.1"
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    port = _closed_port()

    async def direct() -> None:
        async with bounded_client(timeout=5, max_bytes=1000) as client:
            with pytest.raises(httpx.ConnectError):  # refused: it went there, not to the proxy
                await client.get(f"http://127.0.0.1:{port}/")

    asyncio.run(direct())
    assert len(srv.requests) == 2


def test_an_answer_nobody_asked_for_retires_the_connection(serve: Callable[..., Server]) -> None:
    # After its answer the server sends a second one, unasked: in the same segment for the
    # first request, a moment later (while the connection is idle) for the second. Neither
    # may be taken for the answer to the next request, which goes on a new connection.
    # (httpcore's connection takes the first for the next answer: h11 keeps what followed
    # the answer in its buffer. Http11Connection only.)
    Connection = Http11Connection  # noqa: N806
    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        stray = _response(b'{"stray": %d}' % n)
        if n == 1:
            conn.sendall(_response(b'{"n": 1}') + stray)
        else:
            conn.sendall(_response(b'{"n": %d}' % n))
            time.sleep(0.05)
            conn.sendall(stray)
        return True

    srv = serve(handler)

    async def go() -> list[bytes]:
        async with httpx.AsyncClient(transport=Connection()) as client:
            out = []
            for _ in range(3):
                out.append((await client.get(srv.url)).content)
                await asyncio.sleep(0.15)  # the late stray answer arrives while idle
            return out

    assert asyncio.run(go()) == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']
    assert srv.connections == 3


def test_a_head_request_reads_no_body(serve: Callable[..., Server], Connection: type) -> None:
    # A HEAD answer announces the length of a body it never sends: waiting for one would
    # hang until the timeout.
    def handler(conn: socket.socket, request: bytes, n: int) -> bool:
        if request.startswith(b"HEAD"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n")
        else:
            conn.sendall(_response(b'{"ok": true}'))
        return True

    srv = serve(handler)

    async def go() -> tuple[int, bytes, bytes]:
        async with httpx.AsyncClient(transport=Connection(), timeout=2) as client:
            head = await client.head(srv.url)
            return head.status_code, head.content, (await client.get(srv.url)).content

    assert asyncio.run(go()) == (200, b"", b'{"ok": true}')


def test_a_header_that_would_split_the_request_is_refused(serve: Callable[..., Server], Connection: type) -> None:
    srv = serve(_ok())

    async def go(headers: dict[str, str]) -> None:
        async with httpx.AsyncClient(transport=Connection()) as client:
            await client.get(srv.url, headers=headers)

    for bad in ({"X-Key": "tok\r\nX-Injected: 1"}, {"X-Key": "tok\nX: 1"}, {"X Key": "tok"}, {"X-Key": "t\x00k"}):
        with pytest.raises(httpx.LocalProtocolError):
            asyncio.run(go(bad))
    assert srv.requests == []  # nothing was sent
    asyncio.run(go({"X-Key": "tok en\tvalue"}))
    assert len(srv.requests) == 1


def test_an_idle_connection_expires(serve: Callable[..., Server], Connection: type) -> None:
    srv = serve(_ok())

    async def go() -> None:
        async with httpx.AsyncClient(transport=Connection(keepalive_expiry=0.05)) as client:
            await client.get(srv.url)
            await client.get(srv.url)  # at once: reused
            await asyncio.sleep(0.2)
            await client.get(srv.url)  # after the expiry: a new connection

    asyncio.run(go())
    assert srv.connections == 2


def test_a_response_head_without_end_is_refused(serve: Callable[..., Server], Connection: type) -> None:
    # 100 KiB of head is all that is read (httpcore's limit): a header that never ends
    # cannot fill memory, whether it comes in one piece or many.
    over = threading.Event()

    def endless_header(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Big: ")
        try:
            for _ in range(200):
                conn.sendall(b"a" * 4096)
                time.sleep(0.001)
            over.wait(30)
        except OSError:
            pass
        return False

    try:
        with pytest.raises(httpx.RemoteProtocolError):
            asyncio.run(_get(Connection(), serve(endless_header).url, timeout=10))
    finally:
        over.set()


def test_a_connection_reset_mid_answer_is_a_read_error(serve: Callable[..., Server], Connection: type) -> None:
    def reset(conn: socket.socket, request: bytes, n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.05)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close = RST
        return False

    with pytest.raises(httpx.ReadError):
        asyncio.run(_get(Connection(), serve(reset).url))


def test_a_streamed_request_body_goes_chunked() -> None:
    # A body of unknown length (an async stream) is announced chunked by httpx and sent so.
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.readuntil(b"0\r\n\r\n"))
        writer.write(_response(b"{}"))
        await writer.drain()
        writer.close()

    async def parts() -> Any:
        yield b'{"a": '
        yield b"1}"

    async def go() -> int:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            async with httpx.AsyncClient(transport=Http11Connection()) as client:
                return (await client.post(url, content=parts())).status_code
        finally:
            server.close()

    assert asyncio.run(go()) == 200
    head, _, body = got[0].partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and body == b'8\r\n{"a": 1}\r\n0\r\n\r\n'


def test_the_http_target_asks_on_http11_connections() -> None:
    from evalkit.targets.http import HttpTarget

    inner = HttpTarget("http://127.0.0.1:9")._checkout()._inner  # type: ignore[union-attr]
    assert isinstance(inner, ConnectionStack)
    conn = inner._checkout((b"http", b"127.0.0.1", 9))
    assert isinstance(conn, Http11Connection)
