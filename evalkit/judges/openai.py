"""OpenAI and OpenAI-compatible (llama.cpp, Ollama, vLLM) judge backends.

Loaded only through judges/registry.py. The SDK client is built with `max_retries=0`:
LLMJudge's tenacity loop is the only retry loop (the SDK's own two retries would multiply
every wait).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import httpx
import openai
import orjson
from pydantic import BaseModel

from evalkit.judges.base import (
    BatchReply,
    BatchStatus,
    Completion,
    RenderedPrompt,
    RetryDecision,
    custom_id_in,
    strict_json_schema,
)
from evalkit.judges.pinning import split_pin
from evalkit.net.retry import retry_after_seconds, retryable_status

DEFAULT_LOCAL_BASE_URL = "http://127.0.0.1:8080/v1"
BATCH_ENDPOINT = "/v1/chat/completions"
# The metadata key that tags a batch with the submission that made it, so that a command
# killed between creating the batch and recording its id finds it again (judges/batch.py).
BATCH_TAG = "evalkit_submission"


def _json_object(resp: httpx.Response) -> dict[str, Any]:
    """The response body as a JSON object; anything else is the provider's error, not ours."""
    try:
        data = orjson.loads(resp.content)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise openai.APIResponseValidationError(
            response=resp, body=None, message=f"the reply body is not a JSON object: {resp.text[:200]!r}"
        )
    return data


def _completion(data: dict[str, Any]) -> Completion:
    """A chat.completion object (a reply, or a batch output line's body) as a Completion."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(
        text=_str(message.get("content")) or _str(message.get("refusal")),
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        answered_model_id=_str(data.get("model")) or None,
        system_fingerprint=_str(data.get("system_fingerprint")) or None,
        finish_reason=_str(choice.get("finish_reason")) or None,
    )


def _batch_reply(line: bytes) -> BatchReply:
    """One line of a batch output or error file:
    {"custom_id", "response": {"status_code", "body"} | null, "error": {"code", "message"} | null}.
    A line of another shape is a bad line: its request's error when its custom_id can be read."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or not _str(obj.get("custom_id")):
        return BatchReply(custom_id=custom_id_in(line), error=f"unreadable batch output line: {line[:200]!r}",
                          bad_line=True)
    custom_id = _str(obj.get("custom_id"))
    response = obj.get("response") if isinstance(obj.get("response"), dict) else {}
    body = response.get("body")
    error = obj.get("error") if isinstance(obj.get("error"), dict) else None
    if error is None and response.get("status_code") == 200 and isinstance(body, dict):
        return BatchReply(custom_id=custom_id, completion=_completion(body))
    if error is None and not isinstance(body, dict):
        return BatchReply(custom_id=custom_id, error=f"batch output line without a response or an error: {line[:200]!r}",
                          bad_line=True)
    if error is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
    detail = (error or {}).get("message") or (error or {}).get("code") or f"HTTP {response.get('status_code')}"
    unrun = (error or {}).get("code") in ("batch_expired", "batch_cancelled")
    return BatchReply(custom_id=custom_id, error=_str(detail) or "error", unrun=unrun)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _decision(exc: BaseException) -> RetryDecision:
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if retryable_status(status) or status == 409:
            return RetryDecision(True, wait=retry_after_seconds(exc), reason=f"HTTP {status}")
        # A bad key or an unknown model fails every case the same way: stop the run.
        return RetryDecision(False, fatal=status in (401, 403, 404), reason=f"HTTP {status}")
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return RetryDecision(True, reason=type(exc).__name__)
    return RetryDecision(False, reason=type(exc).__name__, provider_error=isinstance(exc, openai.OpenAIError))


class OpenAIBackend:
    """Chat Completions with a strict JSON-schema response format built from the verdict model.

    Args:
        model: the pinned model id, sent as is.
        api_key: OPENAI_API_KEY.
        base_url: optional proxy / gateway URL (default: the SDK's, i.e. api.openai.com).
        timeout: seconds per request.
        http_client: an httpx.AsyncClient to use (tests, proxies); the SDK makes one otherwise.
        seed: sent as `seed` for best-effort determinism.
    """

    provider = "openai"
    # What a Batch API request costs against the list price (half, as of 2025-09-01).
    batch_price_factor: float | None = 0.5
    # A batch is found again by the tag in its metadata (find_batch).
    batch_findable = True

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        seed: int | None = 0,
    ):
        self.model = model
        self.wire_model = model
        self.base_url = base_url
        self.seed = seed
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0, http_client=http_client
        )

    def _response_format(self, prompt: RenderedPrompt, output: type[BaseModel]) -> dict[str, Any]:
        return {
            "type": "json_schema",
            "json_schema": {"name": prompt.schema_name, "strict": True, "schema": _strict_schema(output)},
        }

    def _system(self, prompt: RenderedPrompt, output: type[BaseModel]) -> str:
        return prompt.system

    def _body(self, prompt: RenderedPrompt, output: type[BaseModel]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.wire_model,
            "messages": [{"role": "system", "content": self._system(prompt, output)}, *prompt.messages],
            "temperature": prompt.temperature,
            "response_format": self._response_format(prompt, output),
        }
        if self.seed is not None:
            body["seed"] = self.seed
        return body

    async def complete(self, prompt: RenderedPrompt, output: type[BaseModel]) -> Completion:
        """One chat completion; the reply text is validated by the caller."""
        # The SDK's documented door for raw requests: the same auth, status errors and
        # timeouts as chat.completions.create, without its parameter transform and response
        # model (about 1.5 ms of CPU per call, bench/README.md "Judging at scale").
        resp = await self._client.post("/chat/completions", body=self._body(prompt, output), cast_to=httpx.Response)
        return _completion(_json_object(resp))

    # ------------------------------------------------------------------ the Batch API

    def batch_request(self, custom_id: str, prompt: RenderedPrompt, output: type[BaseModel]) -> dict[str, Any]:
        """One line of the batch input file: the same request `complete` sends."""
        return {"custom_id": custom_id, "method": "POST", "url": BATCH_ENDPOINT, "body": self._body(prompt, output)}

    async def prepare_batch(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        """Upload the requests as a JSONL file (purpose "batch"); returns {"input_file_id"}."""
        content = b"".join(orjson.dumps(r) + b"\n" for r in requests)
        uploaded = await self._client.files.create(
            file=("evalkit-judge-batch.jsonl", content, "application/jsonl"), purpose="batch"
        )
        return {"input_file_id": uploaded.id}

    async def create_batch(self, requests: list[dict[str, Any]], prepared: dict[str, Any], *, tag: str) -> str:
        """Create the batch over the uploaded file, tagged with `tag` in its metadata."""
        batch = await self._client.batches.create(
            input_file_id=prepared["input_file_id"],
            endpoint=BATCH_ENDPOINT,
            completion_window="24h",
            metadata={BATCH_TAG: tag},
        )
        return batch.id

    async def find_batch(self, *, tag: str, since: float) -> str | None:
        """The id of the batch whose metadata carries `tag`, created after `since` (epoch
        seconds, with five minutes of slack for clocks), or None if there is none."""
        async for batch in self._client.batches.list(limit=100):
            if (batch.metadata or {}).get(BATCH_TAG) == tag:
                return batch.id
            if batch.created_at < since - 300:
                return None  # newest first: everything further is older still
        return None

    async def batch_status(self, batch_id: str) -> BatchStatus:
        """GET /v1/batches/{id}."""
        b = await self._client.batches.retrieve(batch_id)
        counts = b.request_counts
        completed = int(getattr(counts, "completed", 0) or 0)
        failed = int(getattr(counts, "failed", 0) or 0)
        error = None
        if b.status == "failed":
            data = getattr(b.errors, "data", None) or []
            error = "; ".join(f"{e.code}: {e.message}" if e.code else str(e.message) for e in data[:3]) or "failed"
        return BatchStatus(
            batch_id=b.id,
            status=b.status,
            ended=b.status in ("completed", "failed", "expired", "cancelled"),
            total=int(counts.total) if counts is not None and counts.total is not None else None,
            done=completed + failed,
            failed=failed,
            error=error,
            handle={"output_file_id": b.output_file_id, "error_file_id": b.error_file_id},
        )

    async def batch_results(self, status: BatchStatus, *, http_client: httpx.AsyncClient | None = None) -> list[BatchReply]:
        """Every line of the output and error files, by custom_id; downloaded through
        `http_client` when given (batch judging's: capped, with an overall deadline)."""
        client = self._client if http_client is None else self._client.with_options(http_client=http_client)
        replies: list[BatchReply] = []
        for file_id in (status.handle.get("output_file_id"), status.handle.get("error_file_id")):
            if not file_id:
                continue
            content = await client.files.content(file_id)
            for line in content.content.splitlines():
                if line.strip():
                    replies.append(_batch_reply(line))
        return replies

    def retry_decision(self, exc: BaseException) -> RetryDecision:
        """429, 408, 409, 5xx, timeouts and connection errors are retried; 401/403/404 stop the run."""
        return _decision(exc)

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url}

    async def aclose(self) -> None:
        await self._client.close()


class OpenAICompatibleBackend(OpenAIBackend):
    """A local OpenAI-compatible server: JSON mode plus pydantic validation.

    `model` may carry a pin after `@` (`qwen2.5:14b@sha256:845dbda0ea48`); only the part
    before it is sent, because Ollama routes on that name. The schema goes into the system
    prompt, since JSON mode alone does not tell the model which keys to use.
    """

    provider = "openai-compatible"
    batch_price_factor = None  # local servers have no Batch API

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        seed: int | None = 0,
    ):
        super().__init__(
            model,
            api_key=api_key or "none",
            base_url=base_url or DEFAULT_LOCAL_BASE_URL,
            timeout=timeout,
            http_client=http_client,
            seed=seed,
        )
        self.base_url = base_url or DEFAULT_LOCAL_BASE_URL
        self.wire_model = split_pin(model)[0]

    def _response_format(self, prompt: RenderedPrompt, output: type[BaseModel]) -> dict[str, Any]:
        return {"type": "json_object"}

    def _system(self, prompt: RenderedPrompt, output: type[BaseModel]) -> str:
        return f"{prompt.system}\nThe JSON object must validate against this JSON schema:\n{_schema_text(output)}"


# A verdict model's schema never changes; building it costs about 1 ms of pydantic per call,
# a quarter of a call's CPU before it was cached (bench/README.md, "Judging at scale").
@functools.cache
def _strict_schema(output: type[BaseModel]) -> dict[str, Any]:
    return strict_json_schema(output)


@functools.cache
def _schema_text(output: type[BaseModel]) -> str:
    return json.dumps(output.model_json_schema(), separators=(",", ":"))
