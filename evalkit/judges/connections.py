"""The judge SDKs' HTTP transport: one kept-alive connection per request in flight.

httpx's default pool does two things that cost a judge at high concurrency
(bench/README.md, "Judging at scale"): it keeps only 20 idle connections, so at C = 64
two calls in three opened (and closed) a fresh connection; and httpcore rescans every
connection of the pool on each request and each response (httpx issue #3215), which is
quadratic in C. Here each origin has a stack of single-connection httpx transports:
a request pops one (or makes one), and closing its response pushes it back, so a
connection is reused as soon as its answer has been read and no pool ever holds more
than one connection.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

_Origin = tuple[bytes, bytes, int | None]


class _ReturnOnClose(httpx.AsyncByteStream):
    """A response body that gives its connection back once it is closed (read or not)."""

    def __init__(self, inner: Any, release: Callable[[], None]):
        self._inner = inner
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            close = getattr(self._inner, "aclose", None)
            if close is not None:
                await close()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class ConnectionStack(httpx.AsyncBaseTransport):
    """An httpx transport with one single-connection transport per request in flight.

    Connections live as long as the transport (keep-alive, as httpx's own expiry allows);
    their number grows to the most requests that were in flight at once, which the judge's
    concurrency bounds. One TLS context is shared by all of them: building one loads the
    CA bundle (about 20 ms), which must not happen per connection.

    Args:
        keepalive_expiry: seconds an idle connection is kept (httpx's default, 5 s).
    """

    def __init__(self, *, keepalive_expiry: float = 5.0):
        self._limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=keepalive_expiry)
        self._free: dict[_Origin, list[httpx.AsyncHTTPTransport]] = {}
        self._all: list[httpx.AsyncHTTPTransport] = []
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    def _context(self, scheme: bytes) -> ssl.SSLContext:
        if scheme != b"https":
            # A plain-http origin never negotiates TLS; this bare context verifies against
            # no CA, so it would fail closed if it were ever used.
            return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return self._tls

    def _checkout(self, origin: _Origin) -> httpx.AsyncHTTPTransport:
        free = self._free.get(origin)
        if free:
            return free.pop()
        conn = httpx.AsyncHTTPTransport(verify=self._context(origin[0]), limits=self._limits)
        self._all.append(conn)
        return conn

    def _checkin(self, origin: _Origin, conn: httpx.AsyncHTTPTransport) -> None:
        if not self._closed:
            self._free.setdefault(origin, []).append(conn)

    @property
    def n_connections(self) -> int:
        """Single-connection transports made so far (each holds at most one connection)."""
        return len(self._all)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.raw_scheme, url.raw_host, url.port)
        conn = self._checkout(origin)
        try:
            response = await conn.handle_async_request(request)
        except BaseException:
            # httpcore has already closed a connection that failed mid-request, so the
            # transport is fit for the next request.
            self._checkin(origin, conn)
            raise
        response.stream = _ReturnOnClose(response.stream, lambda: self._checkin(origin, conn))
        return response

    async def aclose(self) -> None:
        self._closed = True
        conns, self._all, self._free = self._all, [], {}
        for conn in conns:
            await conn.aclose()


def judge_http_client(*, timeout: float, max_bytes: int) -> httpx.AsyncClient:
    """The httpx client the judge SDKs use: a ConnectionStack under the byte cap
    (evalkit.net.limits.BoundedTransport), redirects followed as the SDKs' own client does."""
    from evalkit.net.limits import BoundedTransport

    return httpx.AsyncClient(
        transport=BoundedTransport(ConnectionStack(), max_bytes=max_bytes), timeout=timeout, follow_redirects=True
    )
