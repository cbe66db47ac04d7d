"""Anthropic judge backend: tool use with the verdict schema as the tool's input_schema.

Loaded only through judges/registry.py. The SDK client is built with `max_retries=0`:
LLMJudge's tenacity loop is the only retry loop.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
from pydantic import BaseModel

from evalkit.judges.base import Completion, RenderedPrompt, RetryDecision, inline_refs
from evalkit.net.retry import retry_after_seconds, retryable_status


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

    async def complete(self, prompt: RenderedPrompt, output: type[BaseModel]) -> Completion:
        """One message; returns the tool input as `data` (and as JSON text for the record)."""
        tool = {
            "name": prompt.schema_name,
            "description": "Record your verdict. Call this exactly once.",
            "input_schema": inline_refs(output.model_json_schema()),
        }
        resp = await self._client.messages.create(
            model=self.model,
            max_tokens=prompt.max_tokens,
            temperature=prompt.temperature,
            system=prompt.system,
            messages=prompt.messages,
            tools=[tool],
            tool_choice={"type": "tool", "name": prompt.schema_name},
        )
        data: dict[str, Any] | None = None
        texts: list[str] = []
        for block in resp.content:
            if block.type == "tool_use" and data is None:
                data = block.input if isinstance(block.input, dict) else None
            elif block.type == "text":
                texts.append(block.text)
        text = json.dumps(data, ensure_ascii=False) if data is not None else "".join(texts)
        usage = resp.usage
        return Completion(
            text=text,
            data=data,
            prompt_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            answered_model_id=resp.model,
            finish_reason=resp.stop_reason,
        )

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
