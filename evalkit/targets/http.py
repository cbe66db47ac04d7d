"""HttpTarget: a chatbot behind the /api/v1/ask contract (DESIGN.md §5), over httpx.

One HTTP stack: an httpx transport (`evalkit.net.transport.ConnectionStack` of
`Http11Connection`s: one kept-alive connection per request in flight, asyncio underneath,
each answer parsed by httptools (llhttp); httpx's own transport through a proxy the
environment names) wrapped in `BoundedTransport` for the byte cap and the whole-try
deadline; an httpx client only when the caller injects one. No HTTP is parsed in this
module (bench/README.md, "One HTTP stack", "Runner CPU per ask").
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
from pydantic import ValidationError

from evalkit.errors import BadConfig, Problem, TargetError
from evalkit.net.limits import (
    DEFAULT_MAX_RESPONSE_BYTES,
    BoundedTransport,
    ResponseTooLarge,
)
from evalkit.net.ratelimit import RateLimiter
from evalkit.net.retry import RetryPolicy, retryable_status
from evalkit.net.transport import ConnectionStack, Http11Connection
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
            event loop and kept alive for reuse; through HTTP(S)_PROXY / ALL_PROXY when the
            environment names one for the URL (NO_PROXY honoured). Cookies are not kept.
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
        self._conn: _Conn | None = None
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._post_headers = {**self._headers, "Content-Type": "application/json"}
        # Built once, not per ask (bench/README.md).
        self._ask_url = httpx.URL(self.api_url + ASK_PATH, params={"debug": "true"})
        self._stats_url = httpx.URL(self.api_url + STATS_PATH)
        host = [(b"Host", self._ask_url.netloc)]
        self._get_head = host + [(k.encode(), v.encode()) for k, v in self._headers.items()]
        self._post_head = host + [(k.encode(), v.encode()) for k, v in self._post_headers.items()]
        self._extensions = {"timeout": httpx.Timeout(self.timeout).as_dict()}

    def _checkout(self) -> _Conn:
        """What sends the requests: the injected client, else our transport (made once, in
        the running event loop), capped and bounded by BoundedTransport either way."""
        if self._client is not None:
            return self._client
        if self._conn is None:
            # We need none of a client's features (cookies, redirects, auth flows, event
            # hooks), so we talk to a transport, httpx's public lower layer: one kept-alive
            # connection per request in flight (net/transport.py). --timeout bounds the whole
            # try (connect, send, every byte of the answer) inside it: a server trickling a
            # byte a second must not hold a case for minutes.
            # Through the proxy the environment names for the URL, if any (ConnectionStack).
            stack = ConnectionStack(connection=Http11Connection)
            self._conn = BoundedTransport(stack, max_bytes=self.max_response_bytes, deadline=self.timeout)
        return self._conn

    async def _send(self, conn: _Conn, method: str, url: httpx.URL, content: bytes | None = None) -> tuple[httpx.Response, bytes]:
        """Send one request on a client or our transport: the response and its whole body
        (read; the response's own stream closed)."""
        if isinstance(conn, httpx.AsyncClient):
            headers = self._post_headers if content is not None else self._headers
            response = await conn.request(method, url, content=content, headers=headers, timeout=self.timeout)
            return response, response.content
        if content is None:
            request = httpx.Request(method, url, headers=self._get_head, extensions=self._extensions)
        else:
            # With the body as a stream and the head written out, httpx skips working out
            # Host and Content-Length (about 5 us of the ask's CPU, bench/README.md).
            head = [*self._post_head, (b"Content-Length", str(len(content)).encode())]
            request = httpx.Request(method, url, headers=head, stream=httpx.ByteStream(content), extensions=self._extensions)
        # The body as BoundedTransport reads it, not through a second httpx.Response (its
        # read costs as much again per ask as the rest of this layer, bench/README.md).
        response, body = await conn.read(request)
        response.request = request
        return response, body

    async def _bounded_send(
        self, conn: _Conn, method: str, url: httpx.URL, content: bytes | None = None
    ) -> tuple[httpx.Response, bytes]:
        """`_send` within --timeout for the whole try: our transport bounds it itself
        (BoundedTransport's deadline); an injected httpx client is bounded here."""
        if isinstance(conn, httpx.AsyncClient):
            async with asyncio.timeout(self.timeout):
                return await self._send(conn, method, url, content)
        return await self._send(conn, method, url, content)

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
                response, body, elapsed_ms = await self._watched_try(content)
            except Exception as first:
                attempts = 0
                async for attempt in self._policy.retrying():
                    with attempt:
                        attempts += 1
                        if attempts == 1:
                            raise first
                        response, body, elapsed_ms = await self._watched_try(content)
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
            raise _status_error(_whole(response, body), attempts)
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError:
            ctype = response.headers.get("content-type", "no content-type")
            raise TargetError(
                "invalid_response", f"response is not JSON ({ctype}): {_snippet(_whole(response, body))!r}"
            ) from None
        result = parse_ask_response(raw, request, source="response")
        result.attempts = attempts
        result.elapsed_ms = elapsed_ms
        return result

    async def _watched_try(self, content: bytes) -> tuple[httpx.Response, bytes, float]:
        """`_try`, with its outcome told to the retry policy's circuit breaker, if it has one
        (`evalkit.net.breaker`: a target failing every request stops being retried)."""
        breaker = self._policy.breaker
        if breaker is None:
            return await self._try(content)
        try:
            out = await self._try(content)
        except Exception as e:
            breaker.observe(e)
            raise
        breaker.success()
        return out

    async def _try(self, content: bytes) -> tuple[httpx.Response, bytes, float]:
        """One try: rate limit, send; a retryable status raises HTTPStatusError. Returns the
        response, its body and the try's own wall time in ms."""
        if self._limiter is not None:
            await self._limiter.acquire()
        conn = self._checkout()
        start = time.perf_counter()
        try:
            response, body = await self._bounded_send(conn, "POST", self._ask_url, content)
        except TimeoutError:
            raise httpx.ReadTimeout(f"no complete answer within {self.timeout:g}s") from None
        elapsed_ms = (time.perf_counter() - start) * 1000
        if retryable_status(response.status_code):
            whole = _whole(response, body)
            raise httpx.HTTPStatusError(f"HTTP {response.status_code}", request=whole.request, response=whole)
        return response, body, elapsed_ms

    async def index_stats(self) -> IndexingCoverage | None:
        """GET /api/v1/index/stats once; None on 404, any error or an invalid body."""
        conn = self._checkout()
        try:
            if self._limiter is not None:
                await self._limiter.acquire()
            response, body = await self._bounded_send(conn, "GET", self._stats_url)
        except (TimeoutError, httpx.TimeoutException):
            log.info("index stats unavailable: no answer within %gs", self.timeout)
            return None
        except httpx.HTTPError as e:
            log.info("index stats unavailable: %s", type(e).__name__)
            return None
        if response.status_code != 200:
            if response.status_code != 404:
                log.info("index stats unavailable: HTTP %s", response.status_code)
            return None
        try:
            return IndexingCoverage.model_validate(orjson.loads(body))
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
        """Close the connections we opened (an injected client is the caller's to close)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()


_Conn = httpx.AsyncClient | httpx.AsyncBaseTransport


def _whole(response: httpx.Response, body: bytes) -> httpx.Response:
    """`response` with its body as `content` (the error paths read its text and headers)."""
    whole = httpx.Response(response.status_code, headers=response.headers, content=body, extensions=response.extensions)
    whole.request = response.request
    return whole


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
