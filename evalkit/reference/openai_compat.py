"""Optional calls to OpenAI-compatible endpoints (embeddings, chat) for the reference chatbot.

Any server that speaks the OpenAI wire format works (OpenAI, llama.cpp, Ollama, vLLM).
`base_url` follows the OpenAI SDK convention and includes the version prefix, e.g.
`http://127.0.0.1:8081/v1`; we post to `{base_url}/embeddings` and
`{base_url}/chat/completions`.

The calls go through evalkit's one HTTP stack (`evalkit.net`), as every target and judge
does: the byte cap on a response (`net.limits.bounded_client`, which also routes through the
environment's proxy itself), the whole-try deadline (`timeout`), and the bounded retry
policy (`net.retry.RetryPolicy`: connection errors, timeouts, 408, 429 and 5xx but 501,
Retry-After honoured). The chatbot is synchronous (its server answers on threads, the
in-process target calls it in one), so each client runs that async stack on an event loop of
its own, in a daemon thread started on first use, and waits for the answer. httpx is
imported lazily, so `import evalkit` stays light.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.net.retry import RetryPolicy

# Tries after the first (net.retry's policy): an endpoint restarting or rate-limiting
# briefly costs a wait, not a failed case; a dead one fails within three tries.
DEFAULT_RETRIES = 2


class BackendError(EvalkitError):
    """An embeddings or chat endpoint failed; the server answers 502 (in process it propagates).

    `status` is the HTTP status the server uses, so an in-process caller can record the
    failure the same way, e.g. as TargetError("http_error", str(e), status=e.status).
    """

    status = 502


class _Client:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout: float,
        *,
        retry_policy: RetryPolicy | None = None,
        max_response_bytes: int | None = None,
    ):
        from evalkit.net.limits import DEFAULT_MAX_RESPONSE_BYTES
        from evalkit.net.retry import RetryPolicy

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._policy = retry_policy or RetryPolicy.from_retries(DEFAULT_RETRIES)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._http: Any = None  # the httpx.AsyncClient, made on the loop's thread
        self._lock = threading.Lock()

    def _run(self, coro: Any) -> Any:
        """Run `coro` on this client's loop (started on first use) and wait for its result."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started: Future[None] = Future()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set_result, None)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name="evalkit-openai-compat", daemon=True)
                self._thread.start()
                started.result()
                self._loop = loop
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._run(self._apost(f"{self.base_url}{path}", body))

    async def _apost(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        from evalkit.net.limits import ResponseTooLarge, bounded_client
        from evalkit.net.retry import retryable_status

        if self._http is None:
            self._http = bounded_client(timeout=self.timeout, max_bytes=self.max_response_bytes, deadline=self.timeout)
        try:
            async for attempt in self._policy.retrying():
                with attempt:
                    resp = await self._http.post(url, json=body, headers=self._headers)
                    if retryable_status(resp.status_code):
                        resp.raise_for_status()  # retried by the policy; the last one is reported below
        except httpx.HTTPStatusError as e:
            resp = e.response
        except ResponseTooLarge as e:
            raise BackendError(f"{url}: {e}") from None
        except httpx.HTTPError as e:
            raise BackendError(f"{url}: {type(e).__name__}: {e}") from None
        if resp.status_code != 200:
            raise BackendError(f"{url}: HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            data = resp.json()
        except ValueError:
            raise BackendError(f"{url}: response is not JSON: {resp.text[:200]}") from None
        if not isinstance(data, dict):
            raise BackendError(f"{url}: expected a JSON object, got {type(data).__name__}")
        return data

    def close(self) -> None:
        """Close the connections and stop the loop (a later call starts them again)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        http, self._http = self._http, None
        if http is not None:
            asyncio.run_coroutine_threadsafe(http.aclose(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join()
        loop.close()


class EmbeddingsClient(_Client):
    """POST /embeddings in batches; returns one vector per input, in input order."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        batch_size: int = 64,
        **kwargs: Any,
    ):
        super().__init__(base_url, model, api_key, timeout, **kwargs)
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed `texts`.

        Raises:
            BackendError: transport error, non-200 status (after the retries), a body over
                the byte cap, or a malformed body.
        """
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            batch = texts[i : i + self.batch_size]
            data = self._post("/embeddings", {"model": self.model, "input": batch})
            try:
                items = sorted(data["data"], key=lambda d: d.get("index", 0))
                vecs = [[float(x) for x in item["embedding"]] for item in items]
            except (KeyError, TypeError, ValueError) as e:
                raise BackendError(f"embeddings response malformed: {e!r}") from None
            if len(vecs) != len(batch):
                raise BackendError(f"embeddings: sent {len(batch)} inputs, got {len(vecs)} vectors")
            out.extend(vecs)
        return out


class ChatClient(_Client):
    """POST /chat/completions at temperature 0; returns the first choice's text."""

    def complete(self, messages: list[dict[str, str]], max_tokens: int = 512) -> str:
        """Return the assistant's reply.

        Raises:
            BackendError: transport error, non-200 status (after the retries), a body over
                the byte cap, or a malformed body.
        """
        body = {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
        data = self._post("/chat/completions", body)
        try:
            text = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise BackendError(f"chat response malformed: {e!r}") from None
        if not isinstance(text, str):
            raise BackendError("chat response has no text content")
        return text
