"""Limits on what a remote server can make us read: a byte cap on every response body.

A judge endpoint (or anything else we ask over HTTP) may answer with a body that never
ends, a 600 MB JSON document, or a 300 KB gzip bomb that inflates to 300 MB. httpx reads
and decodes whatever arrives. `BoundedTransport` wraps any httpx transport and:

- asks for an unencoded body (`Accept-Encoding: identity`); a server that gzips or
  deflates anyway is read through a bounded inflater (the count below is of inflated
  bytes, so a gzip bomb stops at the cap), and any other encoding is refused as
  undecodable (`httpx.DecodingError`);
- refuses a response whose `Content-Length` is over the cap before reading it;
- counts the body's bytes as they stream and stops at the cap;
- with a `deadline`, reads the whole answer (connect, send, every byte of the body) within
  that many seconds, else raises `httpx.ReadTimeout` (carrying the deadline: `deadline_in`
  tells it from one slow read): a server trickling a byte a second cannot hold a request
  for minutes, and the deadline is part of the one HTTP stack, not wrapped around it by
  each caller.

Each refusal raises `ResponseTooLarge`, which callers classify as a
`response_too_large` failure (not retried: the same request gets the same answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "BoundedTransport",
    "ResponseTooLarge",
    "bounded_client",
    "deadline_in",
    "too_large_in",
]

DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024


class ResponseTooLarge(httpx.TransportError):
    """A response body over the byte cap, or one sent with a content encoding we did not accept."""


class _InflatedStream(httpx.AsyncByteStream):
    """A gzip or deflate body, inflated as it streams, never past `limit` + 1 bytes per chunk."""

    def __init__(self, inner: Any, coding: str, limit: int):
        import zlib

        self._inner = inner
        # wbits 47: a gzip or a zlib header; plain deflate is zlib-wrapped as httpx reads it
        self._z = zlib.decompressobj(wbits=47 if coding in ("gzip", "x-gzip") else 15)
        self._coding = coding
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        import zlib

        try:
            async for chunk in self._inner:
                data = self._z.decompress(chunk, self._limit + 1)
                if self._z.unconsumed_tail:  # one chunk alone inflates past the cap
                    raise ResponseTooLarge(f"{self._coding} body inflates past the {self._limit}-byte limit")
                if data:
                    yield data
            tail = self._z.flush()
            if tail:
                yield tail
        except zlib.error as e:
            raise httpx.DecodingError(f"bad {self._coding} body: {e}") from None

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, limit: int, url: str):
        self._inner = inner
        self._limit = limit
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise ResponseTooLarge(f"response body from {self._url} is over the {self._limit}-byte limit")
            yield chunk

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()


class BoundedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that caps every response body at `max_bytes` (see the module doc)."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        deadline: float | None = None,
    ):
        self._inner = inner or httpx.AsyncHTTPTransport()
        self.max_bytes = int(max_bytes)
        self.deadline = deadline

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.deadline is None:
            return await self._bounded(request)
        response, body = await self.read(request)
        return httpx.Response(response.status_code, headers=response.headers, content=body, extensions=response.extensions)

    async def read(self, request: httpx.Request) -> tuple[httpx.Response, bytes]:
        """Send `request`; its response (status and headers, its stream read and closed) and
        whole body, capped, within the deadline when there is one. The body is what
        `handle_async_request`'s response holds as `content`, without building a second
        response around it and reading it through httpx's decoders (identity was asked for;
        gzip is inflated here): the HTTP target's ask reads it so (bench/README.md)."""
        try:
            async with asyncio.timeout(self.deadline):
                response = await self._bounded(request)
                stream = response.stream
                try:
                    # Read here, off the capped stream itself: httpx's own read (aread,
                    # aiter_bytes, aiter_raw) would add three generator layers per chunk.
                    body = b"".join([chunk async for chunk in stream])  # type: ignore[union-attr]
                finally:
                    await stream.aclose()  # type: ignore[union-attr]
        except TimeoutError:
            if self.deadline is None:
                raise
            late = httpx.ReadTimeout(f"no complete answer within {self.deadline:g}s", request=request)
            late.deadline = self.deadline  # type: ignore[attr-defined]
            raise late from None
        return response, body

    async def _bounded(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        where = f"{request.url.scheme}://{request.url.host}{request.url.path}"
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        length = response.headers.get("Content-Length", "")
        if encoding not in ("", "identity"):
            if encoding not in ("gzip", "x-gzip", "deflate"):
                await response.aclose()
                raise httpx.DecodingError(f"response from {where} is {encoding}-encoded although identity was asked for")
            # Inflated here, boundedly, and counted below as inflated bytes: httpx must not inflate it again.
            stream = _InflatedStream(response.stream, encoding, self.max_bytes)
            del response.headers["Content-Encoding"]
            response.headers.pop("Content-Length", None)
            response.stream = _CappedStream(stream, self.max_bytes, where)
            return response
        if length.strip().isdigit() and int(length) > self.max_bytes:
            await response.aclose()
            raise ResponseTooLarge(f"response body from {where} announces {int(length)} bytes, over the {self.max_bytes}-byte limit")
        response.stream = _CappedStream(response.stream, self.max_bytes, where)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded_client(
    *, timeout: float, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, deadline: float | None = None
) -> httpx.AsyncClient:
    """The httpx client the LLM SDKs and the reference chatbot's endpoints are given: every
    response capped at `max_bytes`, one kept-alive connection per call in flight
    (`evalkit.net.transport.ConnectionStack`), through the environment's proxy when it names
    one, redirects followed as the SDKs' own client does; with `deadline`, each request's
    whole answer within that many seconds (`BoundedTransport`)."""
    from evalkit.net.transport import ConnectionStack

    transport = BoundedTransport(ConnectionStack(), max_bytes=max_bytes, deadline=deadline)
    # trust_env=False: the stack routes through the environment's proxies itself, under the
    # cap; a client that resolved them would mount httpx transports that bypass it.
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=True, trust_env=False)


def too_large_in(exc: BaseException | None) -> ResponseTooLarge | None:
    """The ResponseTooLarge behind an exception (SDKs wrap transport errors), if any."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ResponseTooLarge):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def deadline_in(exc: BaseException | None) -> float | None:
    """The deadline (seconds) of a `BoundedTransport` whose whole answer did not arrive in
    time, behind an exception (SDKs wrap transport errors); None for any other error,
    a single slow read included."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, httpx.ReadTimeout) and getattr(exc, "deadline", None) is not None:
            return float(exc.deadline)  # type: ignore[attr-defined]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
