"""One keep-alive HTTP/1.1 connection as an httpx transport, over asyncio itself.

httpx is layered: a client (cookies, redirects, auth, hooks) over a transport, over
httpcore's connections (HTTP framing by h11), over a *network backend* that moves bytes.
The stock `httpx.AsyncHTTPTransport` puts a connection pool between the transport and the
connection, and reaches the socket through anyio; both are general and both cost CPU on
every request: the pool's locks and events, anyio's cancel scopes, checkpoints and
`sniffio` lookups. The HTTP target asks one question per connection at a time, 64 at once,
so that per-request CPU, not the network, sets the pace at high concurrency
(bench/README.md, "One HTTP stack, faster").

`ConnectionTransport` keeps httpx's transport interface and httpcore's HTTP/1.1
(`httpcore.AsyncHTTPConnection`, h11 framing: nothing here parses HTTP) and changes the two
general parts for specific ones, through the extension points both libraries document:

- no pool: one connection, re-opened when the server closed it, it expired, or it failed;
- `AsyncioBackend`, an `httpcore.AsyncNetworkBackend` on asyncio's own transports and
  protocols: a read is one future and one timer, `is_readable` a flag, not a `select()`.

Together about 0.15 ms less CPU per request on this machine (bench/README.md).
`ConnectionStack` holds one such transport per request in flight, and sends an origin the
environment's proxy covers through httpx's own transport instead (`env_proxy_for`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import httpcore
import httpx

# Reading pauses when this much is buffered unread, and resumes below a quarter of it.
_HIGH_WATER = 256 * 1024
_KEEPALIVE_EXPIRY_S = 5.0  # httpx's default (httpx.Limits)
# A write shorter than this (a request head) waits for what follows it in the same step.
_COALESCE_BELOW = 16 * 1024


class _Protocol(asyncio.Protocol):
    """Buffers what the socket receives and wakes the one reader waiting for it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.lost = False
        self.reader: asyncio.Future | None = None
        self.drained: asyncio.Future | None = None
        self.reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake(self.reader)

    def eof_received(self) -> bool:
        self.eof = True
        self._wake(self.reader)
        return False  # close our side too: an HTTP/1.1 exchange cannot go on half-closed

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = self.eof = True
        self.error = exc
        self._wake(self.reader)
        self._wake(self.drained)

    def pause_writing(self) -> None:
        self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self.drained = self.drained, None
        self._wake(drained)

    @staticmethod
    def _wake(future: asyncio.Future | None) -> None:
        if future is not None and not future.done():
            future.set_result(None)


def _expire(future: asyncio.Future, error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


async def _wait(future: asyncio.Future, timeout: float | None, error: Exception) -> None:
    """Await `future`; after `timeout` seconds it fails with `error` instead."""
    if timeout is None:
        await future
        return
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future, error)
    try:
        await future
    finally:
        timer.cancel()


class AsyncioStream(httpcore.AsyncNetworkStream):
    """A connected socket as httpcore reads and writes it (raises httpcore's errors)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol):
        self._transport = transport
        self._protocol = protocol
        # h11 hands over a request as its head, then its body: sent as one segment, not two.
        self._unsent: list[bytes] = []

    def _flush(self) -> None:
        if self._unsent:
            data = b"".join(self._unsent)
            self._unsent.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._flush()
        p = self._protocol
        if not p.buffer and not p.eof:
            p.reader = asyncio.get_running_loop().create_future()
            try:
                await _wait(p.reader, timeout, httpcore.ReadTimeout(f"no data within {timeout}s"))
            finally:
                p.reader = None
        if p.buffer:
            if len(p.buffer) <= max_bytes:
                data = bytes(p.buffer)
                p.buffer.clear()
            else:
                data = bytes(p.buffer[:max_bytes])
                del p.buffer[:max_bytes]
            if p.reading_paused and len(p.buffer) < _HIGH_WATER // 4:
                p.reading_paused = False
                self._transport.resume_reading()
            return data
        if p.error is not None:
            raise httpcore.ReadError(f"{type(p.error).__name__}: {p.error}")
        return b""  # the peer closed: h11 decides whether that ended the message

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if p.lost or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        if len(buffer) < _COALESCE_BELOW and not self._unsent:
            # Held until the task yields (or reads): the body, if any, follows in this step.
            self._unsent.append(buffer)
            asyncio.get_running_loop().call_soon(self._flush)
            return
        if self._unsent:
            self._unsent.append(buffer)
            buffer = b"".join(self._unsent)
            self._unsent.clear()
        self._transport.write(buffer)
        if p.drained is not None:  # the kernel's send buffer is full: wait for room
            await _wait(p.drained, timeout, httpcore.WriteTimeout(f"could not send within {timeout}s"))
            if p.lost:
                raise httpcore.WriteError(f"connection lost while sending: {p.error}")

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(self._transport, self._protocol, ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout(f"TLS handshake not done within {timeout}s") from None
        except (OSError, ssl.SSLError) as e:  # ssl.SSLError is an OSError; named for the reader
            self._transport.close()
            raise httpcore.ConnectError(f"TLS handshake failed: {e}") from None
        if tls is None:  # the loop closed the transport under us
            raise httpcore.ConnectError("TLS handshake failed: connection closed")
        self._protocol.transport = tls
        return AsyncioStream(tls, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # Asked of an idle keep-alive connection: anything received (or a close) means
            # the server hung up or broke framing, and the connection must not be reused.
            return bool(self._protocol.buffer) or self._protocol.eof
        key = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername", "socket": "socket"}.get(info)
        return self._transport.get_extra_info(key) if key else None


async def _connected(opening: Awaitable[tuple[Any, Any]], where: str, timeout: float | None) -> tuple[Any, _Protocol]:
    """The (transport, protocol) `opening` connects, within `timeout`; httpcore's errors."""
    try:
        async with asyncio.timeout(timeout):
            return await opening
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"no connection to {where} within {timeout}s") from None
    except OSError as e:
        raise httpcore.ConnectError(str(e) or type(e).__name__) from None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on asyncio transports and protocols (no anyio). TCP
    only: nothing here connects over a Unix socket (httpcore's base class refuses one)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        opening = loop.create_connection(_Protocol, host, port, local_addr=local)
        transport, protocol = await _connected(opening, f"{host}:{port}", timeout)
        sock: socket.socket = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return AsyncioStream(transport, protocol)  # asyncio already set TCP_NODELAY

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


_BACKEND = AsyncioBackend()
_ERRORS: list[tuple[type[Exception], type[httpx.HTTPError]]] = [
    # Most specific first: the first match wins.
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
]


def _as_httpx(error: Exception) -> Exception:
    """httpcore's error as the httpx error the stock transport raises for it."""
    for core, public in _ERRORS:
        if isinstance(error, core):
            return public(str(error))
    return error


class _ResponseStream(httpx.AsyncByteStream):
    """httpcore's response body as httpx's: its errors mapped; once closed (read or not),
    `release` gives the connection back (ConnectionStack)."""

    def __init__(self, inner: Any, release: Callable[[], None] | None = None):
        self._inner = inner
        self._release = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._inner:
                yield part
        except Exception as e:
            mapped = _as_httpx(e)
            if mapped is e:
                raise
            raise mapped from e

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class ConnectionTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends every request on one keep-alive HTTP/1.1 connection.

    For a caller that never has two requests in flight on it (the HTTP target keeps one per
    request in flight); a second concurrent request waits for the first. The connection is
    opened on first use and re-opened when the server closed it, it sat idle past
    `keepalive_expiry`, or an exchange on it failed.

    Args:
        ssl_context: for https:// origins (None: httpcore's default, the system CAs).
        keepalive_expiry: seconds an idle connection is kept (httpx's default, 5 s).
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None, *, keepalive_expiry: float = _KEEPALIVE_EXPIRY_S):
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._connection: httpcore.AsyncHTTPConnection | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.send(request)

    async def send(self, request: httpx.Request, release: Callable[[], None] | None = None) -> httpx.Response:
        """`handle_async_request`, calling `release` once the response is closed (or at once
        when there is no response: the exchange failed, and httpcore closed the connection)."""
        try:
            return await self._send(request, release)
        except BaseException:
            if release is not None:
                release()
            raise

    async def _send(self, request: httpx.Request, release: Callable[[], None] | None) -> httpx.Response:
        url = request.url
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            try:
                response = await (await self._connection_for(core_request)).handle_async_request(core_request)
            except httpcore.ConnectionNotAvailable:
                # It closed between our check and the request (what the pool would retry).
                await self._drop()
                response = await (await self._connection_for(core_request)).handle_async_request(core_request)
        except Exception as e:
            mapped = _as_httpx(e)
            if mapped is e:
                raise
            raise mapped from e
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream, release),
            extensions=response.extensions,
        )

    async def _connection_for(self, request: httpcore.Request) -> httpcore.AsyncHTTPConnection:
        conn = self._connection
        if conn is not None and (conn.is_closed() or conn.has_expired() or not conn.can_handle_request(request.url.origin)):
            await self._drop()
            conn = None
        if conn is None:
            conn = self._connection = httpcore.AsyncHTTPConnection(
                origin=request.url.origin,
                ssl_context=self._ssl_context,
                keepalive_expiry=self._keepalive_expiry,
                network_backend=_BACKEND,
            )
        return conn

    async def _drop(self) -> None:
        conn, self._connection = self._connection, None
        if conn is not None:
            await conn.aclose()

    async def aclose(self) -> None:
        await self._drop()


_Origin = tuple[bytes, bytes, int | None]


def env_proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url`, as httpx's `trust_env` reads it:
    HTTP_PROXY / HTTPS_PROXY by scheme, else ALL_PROXY; None when none is set or NO_PROXY
    names the host. (The standard library's reading of those variables, not the system
    settings some platforms also have.)"""
    import urllib.request
    from urllib.parse import urlsplit

    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    if not proxies or urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxies.get(parts.scheme) or proxies.get("all") or None


class ConnectionStack(httpx.AsyncBaseTransport):
    """An httpx transport with one kept-alive connection per request in flight.

    httpx's default pool costs a caller with many requests in flight (bench/README.md,
    "Judging at scale"): it keeps only 20 idle connections, so at C = 64 two requests in
    three opened (and closed) a fresh connection, and httpcore rescans every connection of
    the pool on each request and each response (httpx issue #3215), quadratic in C. Here
    each origin has a stack of `ConnectionTransport`s: a request pops one (or makes one),
    and closing its response pushes it back, so a connection is reused as soon as its
    answer has been read. Their number grows to the most requests that were in flight at
    once, which the caller's concurrency bounds. One TLS context serves them all: building
    one loads the CA bundle (about 20 ms), which must not happen per connection.

    An origin for which the environment names a proxy (`env_proxy_for`: HTTP(S)_PROXY,
    ALL_PROXY, not a NO_PROXY host) is sent through it instead, by httpx's own transport
    (one per proxy, its pool unbounded: the caller bounds what is in flight). Whatever wraps
    this transport (BoundedTransport's cap and deadline) holds on both paths; a client above
    it must not resolve proxies itself (`trust_env=False`), or its own mounts bypass it.

    The HTTP target and the judge SDKs' client both send through it.

    Args:
        keepalive_expiry: seconds an idle connection is kept (httpx's default, 5 s).
    """

    def __init__(self, *, keepalive_expiry: float = _KEEPALIVE_EXPIRY_S):
        self._keepalive_expiry = keepalive_expiry
        self._free: dict[_Origin, list[ConnectionTransport]] = {}
        self._all: list[ConnectionTransport] = []
        self._tls: ssl.SSLContext | None = None
        self._closed = False
        self._routes: dict[_Origin, httpx.AsyncHTTPTransport | None] = {}  # None: direct
        self._proxies: dict[str, httpx.AsyncHTTPTransport] = {}

    def _route(self, origin: _Origin, url: httpx.URL) -> httpx.AsyncHTTPTransport | None:
        """The proxy transport for `origin`, or None to connect directly (decided once per origin)."""
        if origin not in self._routes:
            proxy = env_proxy_for(str(url))
            if proxy is not None and proxy not in self._proxies:
                limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
                self._proxies[proxy] = httpx.AsyncHTTPTransport(proxy=proxy, limits=limits)
            self._routes[origin] = self._proxies[proxy] if proxy is not None else None
        return self._routes[origin]

    def _context(self, scheme: bytes) -> ssl.SSLContext:
        if scheme != b"https":
            # A plain-http origin never negotiates TLS (redirects are the client's, and each
            # is a new request here); this bare context verifies against no CA, so it would
            # fail closed if it were ever used.
            return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return self._tls

    def _checkout(self, origin: _Origin) -> ConnectionTransport:
        free = self._free.get(origin)
        if free:
            return free.pop()
        conn = ConnectionTransport(self._context(origin[0]), keepalive_expiry=self._keepalive_expiry)
        self._all.append(conn)
        return conn

    def _checkin(self, origin: _Origin, conn: ConnectionTransport) -> None:
        if not self._closed:
            self._free.setdefault(origin, []).append(conn)

    @property
    def n_connections(self) -> int:
        """Connections made so far (each `ConnectionTransport` holds at most one at a time)."""
        return len(self._all)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.raw_scheme, url.raw_host, url.port)
        proxied = self._route(origin, url)
        if proxied is not None:
            return await proxied.handle_async_request(request)
        conn = self._checkout(origin)
        # Back on the stack when its response is closed, or at once if the exchange failed
        # (httpcore has then closed the connection, and the transport opens a new one).
        return await conn.send(request, lambda: self._checkin(origin, conn))

    async def aclose(self) -> None:
        self._closed = True
        conns, self._all, self._free = self._all, [], {}
        proxies, self._proxies, self._routes = list(self._proxies.values()), {}, {}
        for conn in [*conns, *proxies]:
            await conn.aclose()
