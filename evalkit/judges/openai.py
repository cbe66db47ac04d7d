"""OpenAI and OpenAI-compatible (llama.cpp, Ollama, vLLM) judge backends.

Loaded only through judges/registry.py. The SDK client is built with `max_retries=0`:
LLMJudge's tenacity loop is the only retry loop (the SDK's own two retries would multiply
every wait).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
from pydantic import BaseModel

from evalkit.judges.base import Completion, RenderedPrompt, RetryDecision, strict_json_schema
from evalkit.judges.pinning import split_pin
from evalkit.net.retry import retry_after_seconds, retryable_status

DEFAULT_LOCAL_BASE_URL = "http://127.0.0.1:8080/v1"


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
            "json_schema": {"name": prompt.schema_name, "strict": True, "schema": strict_json_schema(output)},
        }

    def _system(self, prompt: RenderedPrompt, output: type[BaseModel]) -> str:
        return prompt.system

    async def complete(self, prompt: RenderedPrompt, output: type[BaseModel]) -> Completion:
        """One chat completion; the reply text is validated by the caller."""
        kwargs: dict[str, Any] = {
            "model": self.wire_model,
            "messages": [{"role": "system", "content": self._system(prompt, output)}, *prompt.messages],
            "temperature": prompt.temperature,
            "response_format": self._response_format(prompt, output),
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed
        resp = await self._client.chat.completions.create(**kwargs)
        choice = resp.choices[0] if resp.choices else None
        text = ""
        if choice is not None:
            text = choice.message.content or getattr(choice.message, "refusal", None) or ""
        usage = resp.usage
        return Completion(
            text=text,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            answered_model_id=resp.model,
            system_fingerprint=getattr(resp, "system_fingerprint", None),
            finish_reason=choice.finish_reason if choice is not None else None,
        )

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
        schema = json.dumps(output.model_json_schema(), separators=(",", ":"))
        return f"{prompt.system}\nThe JSON object must validate against this JSON schema:\n{schema}"
