"""HttpTarget: a chatbot behind the /api/v1/ask contract (DESIGN.md §5), over httpx.

A plain http:// API (no proxy, no injected client) is asked over our own minimal HTTP/1.1
keep-alive connections (`_Http11`): httpx's transport stack costs about 0.9 ms of CPU per
request, this about 0.05 ms, and at concurrency 16 that CPU is what the harness adds to
the chatbot's time (bench/README.md, "CLI run"). They raise httpx's exception classes, so
retries and error kinds are the same on both paths.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
from pydantic import ValidationError

from evalkit.errors import BadConfig, Problem, TargetError
from evalkit.httplimits import DEFAULT_MAX_RESPONSE_BYTES, BoundedTransport, ResponseTooLarge
from evalkit.ratelimit import RateLimiter
from evalkit.retry import RetryPolicy, retryable_status
from evalkit.schema import AskRequest, IndexingCoverage
from evalkit.targets.base import AskResult, parse_ask_response, request_body

log = logging.getLogger(__name__)

ASK_PATH = "/api/v1/ask"
STATS_PATH = "/api/v1/index/stats"
API_KEY_ENV = "EVAL_API_KEY"
_BODY_SNIPPET = 200


def safe_url(url: str) -> str:
    """The URL without user:password@ (never written to config.json or logs)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def check_api_url(api_url: str) -> str:
    """Normalise an API base URL (no trailing slash) or raise BadConfig naming --api-url."""
    url = (api_url or "").strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadConfig(
            Problem(f"expected an http(s) URL like http://localhost:8080, got {api_url!r}", field="--api-url")
        )
    if parts.query or parts.fragment:
        # The API paths are appended to this base; a query here would end up mid-URL.
        raise BadConfig(
            Problem(f"expected a base URL without ?query or #fragment, got {api_url!r}", field="--api-url")
        )
    return url


class HttpTarget:
    """POSTs each question to `{api_url}/api/v1/ask?debug=true` and validates the answer.

    Retries connection errors, timeouts, 429 and 5xx with bounded exponential backoff
    and jitter, honouring Retry-After; each try has its own `timeout`. A 4xx, a body
    that is not JSON, or JSON that fails the contract becomes a TargetError at once.

    If `EVAL_API_KEY` is set (or `api_key` given) it is sent as `Authorization: Bearer`,
    and is never logged, described or stored anywhere but this object.

    Args:
        api_url: base URL of the chatbot API, with or without a trailing slash.
        client: an httpx.AsyncClient to use (not closed by `aclose`); default: our own
            connections, one per request in flight, opened on first use in the running
            event loop and kept alive for reuse: minimal HTTP/1.1 ones (`_Http11`) for
            http://, single-connection httpx transports for https://, httpx clients when a
            proxy is set in the environment. Cookies are not kept.
        timeout: seconds per try (connect, read, write and pool each).
        retries: retries after the first try.
        rps: at most this many requests per second (tries included); None/0 = no limit.
        params: free `--param key=value` options, sent in the body's `options`.
        retry_policy: overrides the policy built from `retries` (tests: no waits).
        api_key: overrides EVAL_API_KEY.
    """

    def __init__(
        self,
        api_url: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        rps: float | None = None,
        params: dict[str, Any] | None = None,
        retry_policy: RetryPolicy | None = None,
        api_key: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ):
        self.api_url = check_api_url(api_url)
        self.max_response_bytes = int(max_response_bytes)
        self.name = f"http:{safe_url(self.api_url)}"
        if timeout is None or timeout <= 0:
            raise BadConfig(Problem(f"must be a positive number of seconds, got {timeout!r}", field="--timeout"))
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.rps = rps or None
        self.params = dict(params or {})
        self._policy = retry_policy or RetryPolicy.from_retries(self.retries)
        self._limiter = RateLimiter(rps) if rps else None
        self._client = client
        self._owned: list[_Conn] = []
        self._free: list[_Conn] = []
        self._ssl: Any = None
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._post_headers = {**self._headers, "Content-Type": "application/json"}
        # Built once, not per ask (bench/README.md).
        self._ask_url = httpx.URL(self.api_url + ASK_PATH, params={"debug": "true"})
        self._stats_url = httpx.URL(self.api_url + STATS_PATH)
        self._extensions = {"timeout": httpx.Timeout(self.timeout).as_dict()}
        # Our own HTTP/1.1 for http:// sends the headers httpx's transport sent (Host,
        # Content-Length, Content-Type, Authorization). A key that cannot go in a header as
        # is goes through httpx instead, which reports it per case as before.
        self._raw = self._ask_url.scheme == "http" and (not key or (key.isascii() and key.isprintable()))
        auth = f"Authorization: Bearer {key}\r\n".encode() if key and self._raw else b""
        # identity: a body is counted against --max-response-bytes as it will be used.
        self._raw_headers = b"Host: " + self._ask_url.netloc + b"\r\nAccept-Encoding: identity\r\n" + auth
        self._stub_requests: dict[str, httpx.Request] = {}

    def _checkout(self) -> _Conn:
        if self._client is not None:
            return self._client
        if self._free:
            return self._free.pop()
        # One connection per request in flight: httpcore's pool rescans every connection
        # on each request, which costs milliseconds per request at 64 connections.
        conn: _Conn
        if self._raw and not _env_proxy_set():
            url = self._ask_url
            conn = _Http11(url.raw_host.decode("ascii"), url.port or 80, self.timeout, self.max_response_bytes)
            self._owned.append(conn)
            return conn
        if self._ssl is None:
            # An http:// API never negotiates TLS (redirects are not followed), so loading
            # the CA bundle (about 20 ms per run) buys nothing there; this bare context
            # verifies against no CA, so it would fail closed if it were ever used.
            https = self.api_url.startswith("https:")
            self._ssl = httpx.create_ssl_context() if https else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        if _env_proxy_set():
            # A client resolves HTTP(S)_PROXY / NO_PROXY from the environment for us.
            conn = httpx.AsyncClient(timeout=self.timeout, verify=self._ssl, limits=limits)
        else:
            # We need none of a client's features (cookies, redirects, auth flows, event
            # hooks), so we talk to the transport, httpx's public lower layer: about 0.3 ms
            # less CPU per ask, the difference between 0.84 and 0.9 efficiency at C=16.
            conn = BoundedTransport(
                httpx.AsyncHTTPTransport(verify=self._ssl, limits=limits), max_bytes=self.max_response_bytes
            )
        self._owned.append(conn)
        return conn

    def _checkin(self, conn: _Conn) -> None:
        if conn is not self._client:
            self._free.append(conn)

    async def _send(self, conn: _Conn, method: str, url: httpx.URL, content: bytes | None = None) -> httpx.Response:
        """Send one request on our own connection, a client or a bare transport; the body is
        read before returning."""
        if isinstance(conn, _Http11):
            head = b"%s %s HTTP/1.1\r\n%s" % (method.encode(), url.raw_path, self._raw_headers)
            if content is not None:
                head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(content)
            status, headers, body = await conn.request(head + b"\r\n" + (content or b""))
            headers, body = _decoded(headers, body, self.max_response_bytes)
            response = httpx.Response(status, headers=headers, content=body)
            # The request HTTPStatusError names: built once per URL, not per ask.
            stub = self._stub_requests.get(method)
            if stub is None or stub.url != url:
                stub = self._stub_requests[method] = httpx.Request(method, url)
            response.request = stub
            return response
        headers = self._post_headers if content is not None else self._headers
        if isinstance(conn, httpx.AsyncClient):
            return await conn.request(method, url, content=content, headers=headers, timeout=self.timeout)
        request = httpx.Request(method, url, content=content, headers=headers, extensions=self._extensions)
        response = await conn.handle_async_request(request)
        response.request = request
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def ask(self, request: AskRequest, *, case_id: str | None = None) -> AskResult:
        """Ask one question.

        Raises:
            TargetError: timeout | connect | http_error (with status) | invalid_response |
                response_too_large (an answer over --max-response-bytes, not retried).
        """
        content = orjson.dumps(request_body(request, self.params))
        attempts = 1
        try:
            try:
                # Most asks succeed at once: the first try skips tenacity's set-up (about
                # 0.07 ms per ask); a failure replays into the policy as its first attempt,
                # so waits, Retry-After and the bound are the policy's own.
                response, elapsed_ms = await self._try(content)
            except Exception as first:
                attempts = 0
                async for attempt in self._policy.retrying():
                    with attempt:
                        attempts += 1
                        if attempts == 1:
                            raise first
                        response, elapsed_ms = await self._try(content)
        except httpx.HTTPStatusError as e:
            raise _status_error(e.response, attempts) from None
        except ResponseTooLarge as e:
            raise TargetError("response_too_large", f"{e} ({_tries(attempts)})", attempts=attempts) from None
        except httpx.TimeoutException as e:
            kind = "connect" if isinstance(e, httpx.ConnectTimeout) else "timeout"
            raise TargetError(kind, f"{type(e).__name__} after {self.timeout:g}s ({_tries(attempts)})", attempts=attempts) from None
        except httpx.ConnectError as e:
            where = safe_url(self.api_url)
            raise TargetError("connect", f"cannot connect to {where}: {e} ({_tries(attempts)})", attempts=attempts) from None
        except httpx.DecodingError as e:
            raise TargetError("invalid_response", f"undecodable response body: {e}") from None
        except httpx.HTTPError as e:
            # Connected, but the exchange broke (server disconnected, bad HTTP).
            raise TargetError("http_error", f"{type(e).__name__}: {e} ({_tries(attempts)})", attempts=attempts) from None

        if not response.is_success:
            raise _status_error(response, attempts)
        try:
            raw = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            ctype = response.headers.get("content-type", "no content-type")
            raise TargetError(
                "invalid_response", f"response is not JSON ({ctype}): {_snippet(response)!r}"
            ) from None
        result = parse_ask_response(raw, request, source="response")
        result.attempts = attempts
        result.elapsed_ms = elapsed_ms
        return result

    async def _try(self, content: bytes) -> tuple[httpx.Response, float]:
        """One try: rate limit, send; a retryable status raises HTTPStatusError. Returns the
        response and the try's own wall time in ms."""
        if self._limiter is not None:
            await self._limiter.acquire()
        conn = self._checkout()
        start = time.perf_counter()
        try:
            # --timeout bounds the whole try (connect, send, every byte of the answer), not
            # each read: a server trickling a byte a second must not hold a case for minutes.
            async with asyncio.timeout(self.timeout):
                response = await self._send(conn, "POST", self._ask_url, content)
        except TimeoutError:
            raise httpx.ReadTimeout(f"no complete answer within {self.timeout:g}s") from None
        finally:
            self._checkin(conn)
        elapsed_ms = (time.perf_counter() - start) * 1000
        if retryable_status(response.status_code):
            raise httpx.HTTPStatusError(f"HTTP {response.status_code}", request=response.request, response=response)
        return response, elapsed_ms

    async def index_stats(self) -> IndexingCoverage | None:
        """GET /api/v1/index/stats once; None on 404, any error or an invalid body."""
        conn = self._checkout()
        try:
            if self._limiter is not None:
                await self._limiter.acquire()
            async with asyncio.timeout(self.timeout):
                response = await self._send(conn, "GET", self._stats_url)
        except TimeoutError:
            log.info("index stats unavailable: no answer within %gs", self.timeout)
            return None
        except httpx.HTTPError as e:
            log.info("index stats unavailable: %s", type(e).__name__)
            return None
        finally:
            self._checkin(conn)
        if response.status_code != 200:
            if response.status_code != 404:
                log.info("index stats unavailable: HTTP %s", response.status_code)
            return None
        try:
            return IndexingCoverage.model_validate(orjson.loads(response.content))
        except (orjson.JSONDecodeError, ValidationError):
            log.info("index stats unavailable: invalid body")
            return None

    def describe(self) -> dict:
        """Target settings for config.json (no credentials, no headers)."""
        return {
            "kind": "http",
            "api_url": safe_url(self.api_url),
            "timeout_s": self.timeout,
            "retries": self._policy.attempts - 1,
            "rps": self.rps,
            "params": dict(self.params),
        }

    async def aclose(self) -> None:
        """Close the connections we created (an injected client is the caller's to close)."""
        owned, self._owned, self._free = self._owned, [], []
        for conn in owned:
            await conn.aclose()


class _Http11:
    """One keep-alive HTTP/1.1 connection to a plain http:// origin, over asyncio streams.

    One request at a time (HttpTarget checks it out): one write of head and body, then a
    small parser for the answer, framed by Content-Length, chunked encoding or the close
    of the connection; 1xx answers are skipped. It (re)connects on first use and after
    the server closed it; any failure closes it. Failures raise httpx's exceptions, as
    httpcore's would: ConnectError / ConnectTimeout, WriteError / WriteTimeout,
    ReadError / ReadTimeout (`timeout` seconds without progress: for the head, for a
    Content-Length body, for each chunk), RemoteProtocolError (a malformed answer, or the
    server closed the connection before answering).
    """

    # The answer's head: status line and headers, at most this much (like h11's limit).
    MAX_HEAD = 64 * 1024
    MAX_LINES = 200

    def __init__(self, host: str, port: int, timeout: float, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, data: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send a whole request (head and body); returns (status, headers, body)."""
        if self._reader is not None and (self._reader.at_eof() or self._reader.exception() is not None):
            self.close()  # closed by the server while idle (keep-alive timeout)
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await self._connect()
        try:
            status, headers, body, keep = await self._exchange(self._reader, self._writer, data)
        except BaseException:  # a failure or a cancel mid-exchange: the connection is unusable
            self.close()
            raise
        if not keep:
            self.close()
        return status, headers, body

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.open_connection(self.host, self.port, limit=self.MAX_HEAD)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {self.host}:{self.port} within {self.timeout:g}s") from None
        except OSError as e:
            raise httpx.ConnectError(str(e) or type(e).__name__) from None

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        loop = asyncio.get_running_loop()
        sent = False
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                writer.write(data)
                await writer.drain()
                sent = True
                while True:
                    deadline.reschedule(loop.time() + self.timeout)
                    status, http11, headers = _parse_head(await self._read_head(reader))
                    if not 100 <= status < 200:
                        break
                    if status == 101:
                        raise httpx.RemoteProtocolError("unexpected 101 Switching Protocols")
                deadline.reschedule(loop.time() + self.timeout)
                body, keep = await self._read_body(reader, status, headers, deadline, loop)
        except TimeoutError:
            what = "answer" if sent else "request to be sent"
            exc = httpx.ReadTimeout if sent else httpx.WriteTimeout
            raise exc(f"waited {self.timeout:g}s for the {what}") from None
        except asyncio.IncompleteReadError as e:
            if not sent or not e.partial:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.") from None
            raise httpx.RemoteProtocolError("server closed the connection in the middle of its answer") from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError(f"answer head or chunk line over {self.MAX_HEAD} bytes") from None
        except OSError as e:
            exc = httpx.ReadError if sent else httpx.WriteError
            raise exc(str(e) or type(e).__name__) from None
        connection = b",".join(v for k, v in headers if k.lower() == b"connection").lower()
        keep = keep and http11 and b"close" not in [t.strip() for t in connection.split(b",")]
        return status, headers, body, keep

    async def _read_head(self, reader: asyncio.StreamReader) -> list[bytes]:
        lines: list[bytes] = []
        size = 0
        while True:
            line = await reader.readuntil(b"\n")
            size += len(line)
            if size > self.MAX_HEAD or len(lines) > self.MAX_LINES:
                raise httpx.RemoteProtocolError(f"answer head over {self.MAX_HEAD} bytes or {self.MAX_LINES} lines")
            line = line.rstrip(b"\r\n")
            if line:
                lines.append(line)
            elif lines:  # the blank line that ends the head (blank lines before it are skipped)
                return lines

    async def _read_body(
        self,
        reader: asyncio.StreamReader,
        status: int,
        headers: list[tuple[bytes, bytes]],
        deadline: asyncio.Timeout,
        loop: asyncio.AbstractEventLoop,
    ) -> tuple[bytes, bool]:
        """The body and whether the connection can carry another request (the deadline is
        pushed back after each chunk)."""
        if status in (204, 304):
            return b"", True
        encodings = [v for k, v in headers if k.lower() == b"transfer-encoding"]
        lengths = [v for k, v in headers if k.lower() == b"content-length"]
        if encodings:
            if b",".join(encodings).lower().split(b",")[-1].strip() != b"chunked":
                raise httpx.RemoteProtocolError(f"unsupported Transfer-Encoding {b','.join(encodings)!r}")
            parts = []
            total = 0
            while True:
                size_line = (await reader.readuntil(b"\n")).split(b";", 1)[0].strip()
                if not size_line or size_line.strip(b"0123456789abcdefABCDEF"):
                    raise httpx.RemoteProtocolError(f"bad chunk size {size_line[:20]!r}")
                size = int(size_line, 16)
                if size == 0:
                    break
                total += size
                if total > self.max_bytes:
                    raise ResponseTooLarge(f"chunked answer over the {self.max_bytes}-byte limit")
                parts.append(await reader.readexactly(size))
                if (await reader.readuntil(b"\n")).strip():
                    raise httpx.RemoteProtocolError("chunk data longer than its size")
                deadline.reschedule(loop.time() + self.timeout)
            await self._read_trailers(reader)
            # With both framings, Transfer-Encoding wins and the connection is not reused.
            return b"".join(parts), not lengths
        if lengths:
            values = {v.strip() for value in lengths for v in value.split(b",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise httpx.RemoteProtocolError(f"bad Content-Length {b','.join(lengths)!r}")
            length = int(values.pop())
            if length > self.max_bytes:
                raise ResponseTooLarge(f"answer announces {length} bytes, over the {self.max_bytes}-byte limit")
            return await reader.readexactly(length), True
        # Delimited by the close of the connection.
        parts, total = [], 0
        while chunk := await reader.read(65536):
            total += len(chunk)
            if total > self.max_bytes:
                raise ResponseTooLarge(f"answer over the {self.max_bytes}-byte limit")
            parts.append(chunk)
        return b"".join(parts), False

    async def _read_trailers(self, reader: asyncio.StreamReader) -> None:
        for _ in range(self.MAX_LINES):
            if not (await reader.readuntil(b"\n")).strip():
                return
        raise httpx.RemoteProtocolError(f"over {self.MAX_LINES} trailer lines")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def aclose(self) -> None:
        writer = self._writer
        self.close()
        if writer is not None:
            try:
                await writer.wait_closed()
            except OSError:  # already reset by the server
                pass


def _decoded(headers: list[tuple[bytes, bytes]], body: bytes, limit: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The body without its Content-Encoding, inflated at most to `limit` bytes: a gzip
    bomb stops at the limit instead of filling memory. We ask for identity; a server that
    compresses anyway is still read, boundedly. Other encodings are refused."""
    codings = [v.strip().lower() for k, v in headers if k.lower() == b"content-encoding"]
    codings = [c for value in codings for c in value.split(b",") if c.strip() not in (b"", b"identity")]
    if not codings:
        return headers, body
    import zlib

    for coding in reversed(codings):
        coding = coding.strip()
        if coding in (b"gzip", b"x-gzip"):
            z = zlib.decompressobj(wbits=47)  # gzip or zlib header
        elif coding == b"deflate":
            z = zlib.decompressobj()
        else:
            raise httpx.DecodingError(f"unsupported Content-Encoding {coding.decode('latin-1')!r}")
        try:
            out = z.decompress(body, limit + 1)
        except zlib.error as e:
            raise httpx.DecodingError(f"bad {coding.decode()} body: {e}") from None
        if len(out) > limit or z.unconsumed_tail:
            raise ResponseTooLarge(f"{coding.decode()} answer inflates past the {limit}-byte limit")
        body = out
    return [(k, v) for k, v in headers if k.lower() not in (b"content-encoding", b"content-length")], body


def _parse_head(lines: list[bytes]) -> tuple[int, bool, list[tuple[bytes, bytes]]]:
    """(status, HTTP/1.1?, headers) from the lines of an answer's head."""
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or not code.isdigit() or rest[3:4] not in (b"", b" "):
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x status line: {lines[0][:40]!r}")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name or b"\t" in name:
            raise httpx.RemoteProtocolError(f"malformed header line {line[:40]!r}")
        headers.append((name, value.strip()))
    return int(code), version == b"HTTP/1.1", headers


_Conn = httpx.AsyncClient | httpx.AsyncHTTPTransport | _Http11


def _env_proxy_set() -> bool:
    return any(os.environ.get(v) for v in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"))


def _tries(attempts: int) -> str:
    return "1 try" if attempts == 1 else f"{attempts} tries"


def _snippet(response: httpx.Response) -> str:
    try:
        text = response.text
    except Exception:  # undecodable bytes: show them raw
        text = repr(response.content[:_BODY_SNIPPET])
    text = " ".join(text.split())
    return text[:_BODY_SNIPPET] + ("…" if len(text) > _BODY_SNIPPET else "")


def _status_error(response: httpx.Response, attempts: int) -> TargetError:
    status = response.status_code
    detail = f"HTTP {status} from POST {ASK_PATH} ({_tries(attempts)})"
    snippet = _snippet(response)
    if snippet:
        detail += f": {snippet}"
    return TargetError("http_error", detail, status=status, attempts=attempts)
