"""HttpTarget: a chatbot behind the /api/v1/ask contract (DESIGN.md §5), over httpx."""

from __future__ import annotations

import logging
import os
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
from pydantic import ValidationError

from evalkit.errors import BadConfig, Problem, TargetError
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
            single-connection clients, one per request in flight, created on first use
            in the running event loop and kept alive for reuse.
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
    ):
        self.api_url = check_api_url(api_url)
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
        self._owned: list[httpx.AsyncClient] = []
        self._free: list[httpx.AsyncClient] = []
        self._ssl: Any = None
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}

    def _checkout(self) -> httpx.AsyncClient:
        if self._client is not None:
            return self._client
        if self._free:
            return self._free.pop()
        # One connection per client, one client per request in flight: httpcore's pool
        # rescans every connection on each request, which costs milliseconds per
        # request at 64 connections. Single-connection clients keep that O(1).
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        client = httpx.AsyncClient(
            timeout=self.timeout,
            verify=self._ssl,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )
        self._owned.append(client)
        return client

    def _checkin(self, client: httpx.AsyncClient) -> None:
        if client is not self._client:
            self._free.append(client)

    async def ask(self, request: AskRequest, *, case_id: str | None = None) -> AskResult:
        """Ask one question.

        Raises:
            TargetError: timeout | connect | http_error (with status) | invalid_response.
        """
        content = orjson.dumps(request_body(request, self.params))
        headers = {**self._headers, "Content-Type": "application/json"}
        url = self.api_url + ASK_PATH
        attempts = 0
        elapsed_ms = 0.0
        try:
            async for attempt in self._policy.retrying():
                with attempt:
                    attempts += 1
                    if self._limiter is not None:
                        await self._limiter.acquire()
                    client = self._checkout()
                    start = time.perf_counter()
                    try:
                        response = await client.post(
                            url,
                            params={"debug": "true"},
                            content=content,
                            headers=headers,
                            timeout=self.timeout,
                        )
                    finally:
                        self._checkin(client)
                    elapsed_ms = (time.perf_counter() - start) * 1000
                    if retryable_status(response.status_code):
                        raise httpx.HTTPStatusError(
                            f"HTTP {response.status_code}", request=response.request, response=response
                        )
        except httpx.HTTPStatusError as e:
            raise _status_error(e.response, attempts) from None
        except httpx.TimeoutException as e:
            kind = "connect" if isinstance(e, httpx.ConnectTimeout) else "timeout"
            raise TargetError(kind, f"{type(e).__name__} after {self.timeout:g}s ({_tries(attempts)})") from None
        except httpx.ConnectError as e:
            where = safe_url(self.api_url)
            raise TargetError("connect", f"cannot connect to {where}: {e} ({_tries(attempts)})") from None
        except httpx.DecodingError as e:
            raise TargetError("invalid_response", f"undecodable response body: {e}") from None
        except httpx.HTTPError as e:
            # Connected, but the exchange broke (server disconnected, bad HTTP).
            raise TargetError("http_error", f"{type(e).__name__}: {e} ({_tries(attempts)})") from None

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

    async def index_stats(self) -> IndexingCoverage | None:
        """GET /api/v1/index/stats once; None on 404, any error or an invalid body."""
        client = self._checkout()
        try:
            if self._limiter is not None:
                await self._limiter.acquire()
            response = await client.get(self.api_url + STATS_PATH, headers=self._headers, timeout=self.timeout)
        except httpx.HTTPError as e:
            log.info("index stats unavailable: %s", type(e).__name__)
            return None
        finally:
            self._checkin(client)
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
        """Close the clients we created (an injected client is the caller's to close)."""
        owned, self._owned, self._free = self._owned, [], []
        for client in owned:
            await client.aclose()


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
    return TargetError("http_error", detail, status=status)
