"""Anthropic judge backend: tool use with the verdict schema as the tool's input_schema.

Loaded only through judges/registry.py. The SDK client is built with `max_retries=0`:
LLMJudge's tenacity loop is the only retry loop.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import anthropic
import httpx
import orjson
from pydantic import BaseModel

from evalkit.errors import JudgeConfigError, Problem
from evalkit.judges.base import (
    BatchReply,
    BatchStatus,
    Completion,
    RenderedPrompt,
    RetryDecision,
    custom_id_in,
    inline_refs,
)
from evalkit.net.retry import retry_after_seconds, retryable_status


def _completion(reply: dict[str, Any]) -> Completion:
    """A Message (a reply, or a batch result's message) as a Completion: the first tool
    input as `data`, and as JSON text for the record; the text blocks otherwise."""
    data: dict[str, Any] | None = None
    texts: list[str] = []
    blocks = reply.get("content")
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use" and data is None:
            data = block.get("input") if isinstance(block.get("input"), dict) else None
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    text = json.dumps(data, ensure_ascii=False) if data is not None else "".join(texts)
    usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
    return Completion(
        text=text,
        data=data,
        prompt_tokens=_int(usage.get("input_tokens")),
        completion_tokens=_int(usage.get("output_tokens")),
        answered_model_id=reply.get("model") if isinstance(reply.get("model"), str) else None,
        finish_reason=reply.get("stop_reason") if isinstance(reply.get("stop_reason"), str) else None,
    )


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _batch_reply(line: bytes) -> BatchReply:
    """One line of Message Batches results: {"custom_id", "result": {"type": "succeeded",
    "message"} | {"type": "errored", "error"} | {"type": "expired" | "canceled"}}. A line of
    another shape is a bad line: its request's error when its custom_id can be read."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = None
    custom_id = obj.get("custom_id") if isinstance(obj, dict) else None
    if not isinstance(custom_id, str) or not custom_id:
        return BatchReply(custom_id=custom_id_in(line), error=f"unreadable batch result line: {line[:200]!r}", bad_line=True)
    result = obj.get("result")
    kind = result.get("type") if isinstance(result, dict) else None
    if not isinstance(result, dict) or kind not in ("succeeded", "errored", "expired", "canceled"):
        return BatchReply(custom_id=custom_id, error=f"batch result line without a result: {line[:200]!r}", bad_line=True)
    if kind == "succeeded":
        if isinstance(result.get("message"), dict):
            return BatchReply(custom_id=custom_id, completion=_completion(result["message"]))
        return BatchReply(custom_id=custom_id, error=f"succeeded without a message: {line[:200]!r}", bad_line=True)
    error = result.get("error") if isinstance(result.get("error"), dict) else {}
    inner = error.get("error") if isinstance(error.get("error"), dict) else error
    detail = inner.get("message") or inner.get("type") or kind
    return BatchReply(custom_id=custom_id, error=str(detail), unrun=kind in ("expired", "canceled"))


@functools.cache
def _input_schema(output: type[BaseModel]) -> dict[str, Any]:
    # Built once per verdict model, not per call (about 1 ms of pydantic each time).
    return inline_refs(output.model_json_schema())


class AnthropicBackend:
    """Messages API, forced to call one tool whose input is the verdict.

    Args:
        model: the pinned model id (a dated snapshot).
        api_key: ANTHROPIC_API_KEY.
        base_url: optional gateway URL (default: the SDK's, i.e. api.anthropic.com).
        timeout: seconds per request.
        http_client: an httpx.AsyncClient to use (tests, proxies).
    """

    provider = "anthropic"
    # What a Message Batches request costs against the list price (half, as of 2025-09-01).
    batch_price_factor: float | None = 0.5
    # Message Batches carry no metadata: a batch whose id was lost cannot be found.
    batch_findable = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        seed: int | None = None,  # accepted for a uniform constructor; the API has no seed
    ):
        self.model = model
        self.base_url = base_url
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0, http_client=http_client
        )

    def _body(self, prompt: RenderedPrompt, output: type[BaseModel]) -> dict[str, Any]:
        tool = {
            "name": prompt.schema_name,
            "description": "Record your verdict. Call this exactly once.",
            "input_schema": _input_schema(output),
        }
        return {
            "model": self.model,
            "max_tokens": prompt.max_tokens,
            "temperature": prompt.temperature,
            "system": prompt.system,
            "messages": prompt.messages,
            "tools": [tool],
            "tool_choice": {"type": "tool", "name": prompt.schema_name},
        }

    async def complete(self, prompt: RenderedPrompt, output: type[BaseModel]) -> Completion:
        """One message; returns the tool input as `data` (and as JSON text for the record)."""
        # The SDK's documented door for raw requests: the same auth, version header, status
        # errors and timeouts as messages.create, without its parameter transform and
        # response model (bench/README.md "Judging at scale").
        resp = await self._client.post("/v1/messages", body=self._body(prompt, output), cast_to=httpx.Response)
        try:
            reply = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            reply = None
        if not isinstance(reply, dict):
            raise anthropic.APIResponseValidationError(
                response=resp, body=None, message=f"the reply body is not a JSON object: {resp.text[:200]!r}"
            )
        return _completion(reply)

    # ------------------------------------------------------------------ Message Batches

    def _batches(self) -> Any:
        batches = getattr(self._client.messages, "batches", None)
        if batches is None:  # before anthropic 0.41 Message Batches were a beta, elsewhere
            raise JudgeConfigError(
                Problem(f"--batch with Anthropic needs anthropic>=0.41 (installed: {anthropic.__version__}): "
                        "pip install 'anthropic>=0.41,<1'", field="--batch")
            )
        return batches

    def batch_request(self, custom_id: str, prompt: RenderedPrompt, output: type[BaseModel]) -> dict[str, Any]:
        """One request of the batch: the same params `complete` sends."""
        return {"custom_id": custom_id, "params": self._body(prompt, output)}

    async def prepare_batch(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        """Nothing to upload: the requests travel in the create call."""
        self._batches()
        return {}

    async def create_batch(self, requests: list[dict[str, Any]], prepared: dict[str, Any], *, tag: str) -> str:
        """POST /v1/messages/batches. The API keeps no metadata, so `tag` lives only in the
        custom_ids (a batch created by a killed command cannot be looked up)."""
        batch = await self._batches().create(requests=requests)
        return batch.id

    async def batch_status(self, batch_id: str) -> BatchStatus:
        """GET /v1/messages/batches/{id}."""
        b = await self._batches().retrieve(batch_id)
        c = b.request_counts
        processing, succeeded = int(c.processing or 0), int(c.succeeded or 0)
        failed = int(c.errored or 0) + int(c.canceled or 0) + int(c.expired or 0)
        return BatchStatus(
            batch_id=b.id,
            status=b.processing_status,
            ended=b.processing_status == "ended",
            total=processing + succeeded + failed,
            done=succeeded + failed,
            failed=failed,
            handle={"results_url": getattr(b, "results_url", None)},
        )

    async def batch_results(self, status: BatchStatus, *, http_client: httpx.AsyncClient | None = None) -> list[BatchReply]:
        """The results JSONL (results_url), one reply per line; downloaded through
        `http_client` when given (batch judging's: capped, with an overall deadline).

        Read line by line here, not through the SDK's decoder: a line that is not JSON, not
        an object or without a result is that request's error (`_batch_reply`), where the
        decoder would stop the whole download."""
        url = status.handle.get("results_url") or (await self._batches().retrieve(status.batch_id)).results_url
        if not url:
            raise anthropic.AnthropicError(f"batch {status.batch_id} has no results_url ({status.status})")
        client = self._client if http_client is None else self._client.with_options(http_client=http_client)
        resp = await client.get(url, cast_to=httpx.Response, options={"headers": {"Accept": "application/binary"}})
        return [_batch_reply(line) for line in resp.content.splitlines() if line.strip()]

    def retry_decision(self, exc: BaseException) -> RetryDecision:
        """429, 408, 409, 5xx (incl. 529 overloaded), timeouts and connection errors are retried."""
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            if retryable_status(status) or status == 409:
                return RetryDecision(True, wait=retry_after_seconds(exc), reason=f"HTTP {status}")
            return RetryDecision(False, fatal=status in (401, 403, 404), reason=f"HTTP {status}")
        if isinstance(exc, anthropic.APIConnectionError):
            return RetryDecision(True, reason=type(exc).__name__)
        return RetryDecision(False, reason=type(exc).__name__, provider_error=isinstance(exc, anthropic.AnthropicError))

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url}

    async def aclose(self) -> None:
        await self._client.close()
