"""Optional calls to OpenAI-compatible endpoints (embeddings, chat) for the reference chatbot.

Any server that speaks the OpenAI wire format works (OpenAI, llama.cpp, Ollama, vLLM).
`base_url` follows the OpenAI SDK convention and includes the version prefix, e.g.
`http://127.0.0.1:8081/v1`; we post to `{base_url}/embeddings` and
`{base_url}/chat/completions`. httpx is imported here, lazily, so `import evalkit` stays light.
"""

from __future__ import annotations

from typing import Any

from evalkit.errors import EvalkitError


class BackendError(EvalkitError):
    """An embeddings or chat endpoint failed; the server answers 502 (in process it propagates).

    `status` is the HTTP status the server uses, so an in-process caller can record the
    failure the same way, e.g. as TargetError("http_error", str(e), status=e.status).
    """

    status = 502


class _Client:
    def __init__(self, base_url: str, model: str, api_key: str | None, timeout: float):
        import httpx  # lazy: only when an endpoint is configured

        self.base_url = base_url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers)
        self._httpx = httpx

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        try:
            resp = self._http.post(url, json=body)
        except self._httpx.HTTPError as e:
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
        self._http.close()


class EmbeddingsClient(_Client):
    """POST /embeddings in batches; returns one vector per input, in input order."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0, batch_size: int = 64):
        super().__init__(base_url, model, api_key, timeout)
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed `texts`.

        Raises:
            BackendError: transport error, non-200 status or a malformed body.
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
            BackendError: transport error, non-200 status or a malformed body.
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
