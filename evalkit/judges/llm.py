"""LLMJudge: everything generic around one backend's wire call.

Rendering, the cache lookup, bounded tenacity retries (429 honouring Retry-After, 5xx,
timeouts), one repair retry on output that fails validation, cost accounting, and turning
junk into a JudgeFailure instead of a silent 0 (inspect's `Score.unscored`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel, ValidationError

from evalkit.errors import JudgeConfigError, Problem, redact, redact_data
from evalkit.judges.base import (
    OUTPUT_MODELS,
    Completion,
    JudgeBackend,
    JudgeFailure,
    JudgeItem,
    JudgeOutcome,
    JudgeStats,
    RenderedPrompt,
)
from evalkit.judges.cache import JudgeCache, cache_key, context_hash
from evalkit.judges.cost import PriceTable
from evalkit.judges.prompts import DEFAULT_PROMPT_SET, render_prompt
from evalkit.net.limits import too_large_in
from evalkit.net.ratelimit import RateLimiter
from evalkit.net.retry import RetryPolicy
from evalkit.store.runlog import Rec

RAW_LIMIT = 2000
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def parse_reply(completion: Completion, output: type[BaseModel]) -> BaseModel:
    """Validate a reply against the verdict model.

    Tool input (Anthropic) is validated as is. Text may be wrapped in a ``` fence or in
    prose, as small local models like to do; the outermost {...} is tried after the text
    as a whole fails.

    Raises:
        ValidationError: the reply does not fit the model.
    """
    if completion.data is not None:
        return output.model_validate(completion.data)
    text = completion.text or ""
    m = _FENCE.match(text)
    if m:
        text = m.group(1)
    try:
        return output.model_validate_json(text)
    except ValidationError:
        start, end = text.find("{"), text.rfind("}")
        if start == -1 or end <= start or (start == 0 and end == len(text) - 1):
            raise
        return output.model_validate_json(text[start : end + 1])


class LLMJudge:
    """A Judge over any JudgeBackend.

    Args:
        backend: the provider's wire call.
        prompt_set: which prompt templates (prompts.PROMPT_SETS) to use.
        temperature: sampling temperature (0 by default, as the seed asks).
        cache: the judgment cache, or None to call the provider every time.
        refresh_cache: skip cache reads but still write fresh judgments.
        prices: the price table for cost accounting.
        retry_policy: bounded retries around each wire call.
        concurrency: wire calls in flight at once (shared by every judgment of this judge).
        rps: at most this many wire calls per second, or None.
    """

    heuristic = False

    def __init__(
        self,
        backend: JudgeBackend,
        *,
        prompt_set: str = DEFAULT_PROMPT_SET,
        temperature: float = 0.0,
        cache: JudgeCache | None = None,
        refresh_cache: bool = False,
        prices: PriceTable | None = None,
        retry_policy: RetryPolicy | None = None,
        deadline: float | None = None,
        concurrency: int = 4,
        rps: float | None = None,
    ):
        self.backend = backend
        self.prompt_set = prompt_set
        self.temperature = float(temperature)
        self.cache = cache
        self.refresh_cache = refresh_cache
        self.prices = prices or PriceTable()
        self.retry_policy = retry_policy or RetryPolicy()
        # One call, start to last byte: the SDK's timeout is per read, so a server that
        # trickles a byte a second would otherwise hold a case for minutes.
        self.deadline = deadline
        self.concurrency = max(1, int(concurrency))
        self.limiter = RateLimiter(rps) if rps else None
        self.name = f"{backend.provider}:{backend.model}"
        self.version = f"{backend.model}+prompts-{prompt_set}"
        self.price = self.prices.lookup(backend.provider, backend.model)
        self._stats = JudgeStats()
        self._semaphores: dict[int, asyncio.Semaphore] = {}
        if self.price is None:
            self._stats.unpriced_models.add(backend.model)

    # ------------------------------------------------------------------ plumbing

    @asynccontextmanager
    async def _slot(self):  # type: ignore[no-untyped-def]
        # One semaphore per event loop: asyncio primitives must not cross loops.
        loop_id = id(asyncio.get_running_loop())
        sem = self._semaphores.get(loop_id)
        if sem is None:
            sem = self._semaphores[loop_id] = asyncio.Semaphore(self.concurrency)
        async with sem:
            if self.limiter is not None:
                await self.limiter.acquire()
            yield

    async def _call(self, prompt: RenderedPrompt, output: type[BaseModel], counter: list[int]) -> Completion:
        def retry_on(exc: BaseException) -> bool:
            if isinstance(exc, TimeoutError):
                return True
            if too_large_in(exc) is not None:
                return False  # the same request gets the same answer
            return self.backend.retry_decision(exc).retry

        async def once() -> Completion:
            async with self._slot():
                counter[0] += 1
                self._stats.calls += 1
                if not self.deadline:
                    return await self.backend.complete(prompt, output)
                try:
                    async with asyncio.timeout(self.deadline):
                        return await self.backend.complete(prompt, output)
                except TimeoutError:
                    raise TimeoutError(f"no complete reply within {self.deadline:g}s") from None

        # Most calls succeed at once: the first try skips tenacity's set-up; a failure is
        # replayed into the policy as its first attempt, so waits, Retry-After and the bound
        # are the policy's own (as HttpTarget.ask does).
        try:
            return await once()
        except Exception as exc:  # noqa: BLE001 - re-raised by the policy below
            first: BaseException | None = exc
        result: Completion | None = None
        async for attempt in self.retry_policy.retrying(retry_on):
            with attempt:
                if first is not None:
                    exc, first = first, None
                    raise exc
                result = await once()
        assert result is not None  # tenacity either returned a value or re-raised
        return result

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return self.price.cost(prompt_tokens, completion_tokens) if self.price else 0.0

    def describe(self) -> dict[str, Any]:
        return {
            **self.backend.describe(),
            "name": self.name,
            "version": self.version,
            "prompt_set": self.prompt_set,
            "temperature": self.temperature,
            "heuristic": False,
            "price": None
            if self.price is None
            else {"input_per_mtok": self.price.input_per_mtok, "output_per_mtok": self.price.output_per_mtok, "source": self.price.source},
        }

    def stats(self) -> JudgeStats:
        return self._stats

    async def aclose(self) -> None:
        await self.backend.aclose()
        if self.cache is not None:
            self.cache.close()

    # ------------------------------------------------------------------ the judgment

    def request(self, kind: str, item: JudgeItem, *, trial: int = 0) -> tuple[RenderedPrompt, type[BaseModel], str]:
        """What judging `item` with the prompt of `kind` sends, and its cache key:
        (rendered prompt, verdict model, key). Batch judging submits exactly these."""
        output = OUTPUT_MODELS[kind]
        prompt = render_prompt(kind, item, prompt_set=self.prompt_set, temperature=self.temperature)
        extra = None
        if kind == Rec.CORRECTNESS:
            extra = {"expected_key_facts": list(item.expected_key_facts), "expected_answer": item.expected_answer}
        elif kind == "answer_quality":
            extra = {"expected_topics": list(item.expected_topics)}
        elif kind == "conflict":
            extra = {"conflict_notes": list(item.conflict_notes)}
        key = cache_key(
            kind=kind,
            question=item.question,
            # context relevance reads no answer: its verdict outlives a change of answer
            answer="" if kind == "context_relevance" else item.answer,
            context_sha256=context_hash(item.context) if kind != "abstention" else "",
            provider=self.backend.provider,
            model=self.backend.model,
            prompt_version=prompt.prompt_version,
            temperature=self.temperature,
            trial=trial,
            extra=extra,
        )
        return prompt, output, key

    async def judge(self, kind: str, item: JudgeItem, *, trial: int = 0) -> JudgeOutcome | JudgeFailure:
        """Judge one item with the prompt of `kind`; never raises for a provider or parse failure.

        Raises:
            JudgeConfigError: the provider refused in a way every case would hit (bad key,
                unknown model); the run should stop.
        """
        prompt, output, key = self.request(kind, item, trial=trial)
        return await self.complete_structured(kind, prompt, output, key)

    def cached(self, key: str) -> dict[str, Any] | None:
        """The cached judgment under `key` (None without a cache, or with refresh_cache)."""
        if self.cache is None or self.refresh_cache:
            return None
        return self.cache.get(key)

    def accept(
        self, kind: str, completion: Completion, *, prompt_hash: str, batch_id: str | None = None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Validate a reply obtained elsewhere (a batch): the cache entry complete_structured
        would store for it as a first-try reply, so that once stored (the caller's job:
        `JudgeCache.put` says whether it could) judging the item is a cache hit.

        Returns:
            (the entry, None) for a valid reply; (None, the validation error) otherwise.
        """
        output = OUTPUT_MODELS[kind]
        try:
            parsed: BaseModel | None = parse_reply(completion, output)
        except ValidationError as e:
            return None, _short_errors(e)
        stored, verdict = _scrubbed(completion, parsed)
        if verdict is None:  # pragma: no cover - a parsed reply always has a verdict
            return None, "no verdict"
        value = self._cache_value(
            verdict, stored, prompt_hash, (completion.prompt_tokens, completion.completion_tokens), repaired=False
        )
        if batch_id is not None:
            value["batch_id"] = batch_id
        return value, None

    @staticmethod
    def _cache_value(
        verdict: dict[str, Any], stored: Completion, prompt_hash: str, tokens: tuple[int, int] | list[int], *, repaired: bool
    ) -> dict[str, Any]:
        return {
            "verdict": verdict,
            "answered_model_id": stored.answered_model_id,
            "system_fingerprint": stored.system_fingerprint,
            "raw": stored.text[:RAW_LIMIT],
            "prompt_hash": prompt_hash,
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "repaired": repaired,
        }

    async def complete_structured(
        self, kind: str, prompt: RenderedPrompt, output: type[BaseModel], key: str
    ) -> JudgeOutcome | JudgeFailure:
        """One structured call with everything around it: the cache under `key`, bounded
        retries, one repair try on a reply that fails `output`, cost and stats.

        Judging uses it with the verdict models; `evalkit generate` with its own prompts and
        output models, so generation is cached, retried, repaired and costed exactly as
        judging is. Never raises for a provider or parse failure.

        Raises:
            JudgeConfigError: the provider refused in a way every call would hit.
        """
        common = {"kind": kind, "judge": self.name, "model": self.backend.model, "prompt_version": prompt.prompt_version}
        cached = self._cached(common, prompt, key)
        if cached is not None:
            return cached

        counter = [0]
        tokens = [0, 0]
        raw = ""
        current = prompt
        last_error = ""
        for repair in (False, True):
            try:
                completion = await self._call(current, output, counter)
            except Exception as exc:  # noqa: BLE001 - sorted in _call_failure: provider error, fatal, or our bug
                return self._call_failure(exc, common, raw, counter, tokens)
            tokens[0] += completion.prompt_tokens
            tokens[1] += completion.completion_tokens
            try:
                parsed: BaseModel | None = parse_reply(completion, output)
            except ValidationError as e:
                parsed, last_error = None, _short_errors(e)
            # Parsed as sent, kept only scrubbed: a reply echoing a key (from a proxy, the
            # prompt) must not reach results.jsonl, metrics.json or the cache.
            stored, verdict = _scrubbed(completion, parsed)
            raw = stored.text
            if stored.answered_model_id:
                self._stats.answered_model_ids.add(stored.answered_model_id)
            if stored.system_fingerprint:
                self._stats.system_fingerprints.add(stored.system_fingerprint)
            if verdict is None:
                if repair:
                    return self._failure(common, "parse_failure", last_error, raw, counter, tokens)
                self._stats.repairs += 1
                current = prompt.with_repair(completion.text or "", last_error)
                continue
            cost = self._cost(*tokens)
            self._account(tokens, cost)
            if self.cache is not None:
                self.cache.put(
                    key,
                    self._cache_value(verdict, stored, prompt.prompt_hash, tokens, repaired=repair),
                    kind=kind,
                    model=self.backend.model,
                    prompt_version=prompt.prompt_version,
                )
            return JudgeOutcome(
                **common,
                verdict=verdict,
                method="llm",
                prompt_hash=prompt.prompt_hash,
                answered_model_id=stored.answered_model_id,
                system_fingerprint=stored.system_fingerprint,
                raw=raw[:RAW_LIMIT],
                repaired=repair,
                calls=counter[0],
                prompt_tokens=tokens[0],
                completion_tokens=tokens[1],
                cost_usd=cost,
                price_known=self.price is not None,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _cached(self, common: dict[str, Any], prompt: RenderedPrompt, key: str) -> JudgeOutcome | None:
        """The outcome stored under `key`, counted as a cache hit; None (a miss, when there is a
        cache) when there is none or --refresh-cache asks again."""
        if self.cache is None:
            return None
        hit = None if self.refresh_cache else self.cache.get(key)
        if hit is None:
            self._stats.cache_misses += 1
            return None
        self._stats.cache_hits += 1
        return JudgeOutcome(
            **common,
            verdict=hit["verdict"],
            method="llm",
            prompt_hash=hit.get("prompt_hash", prompt.prompt_hash),
            answered_model_id=hit.get("answered_model_id"),
            system_fingerprint=hit.get("system_fingerprint"),
            raw=hit.get("raw"),
            cached=True,
            repaired=bool(hit.get("repaired")),
            price_known=self.price is not None,
        )

    def _call_failure(
        self, exc: Exception, common: dict[str, Any], raw: str, counter: list[int], tokens: list[int]
    ) -> JudgeFailure:
        """A call that raised, sorted: a reply too large, a timeout or a provider error is a
        JudgeFailure; a refusal every call would hit is JudgeConfigError; anything else is our
        bug and propagates."""
        big = too_large_in(exc)
        if big is not None:
            return self._failure(common, "response_too_large", str(big), raw, counter, tokens)
        if isinstance(exc, TimeoutError):
            return self._failure(common, "timeout", str(exc), raw, counter, tokens)
        decision = self.backend.retry_decision(exc)
        if decision.fatal:
            raise JudgeConfigError(
                Problem(
                    f"{self.backend.provider} refused the judge request ({decision.reason}: {_excerpt(exc, 200)}); "
                    "check the API key and --judge-model",
                    field="--judge-model",
                )
            ) from None
        if not decision.provider_error:
            raise exc
        return self._failure(common, "provider_error", f"{decision.reason}: {_excerpt(exc, 300)}", raw, counter, tokens)

    def _account(self, tokens: list[int], cost: float) -> None:
        self._stats.prompt_tokens += tokens[0]
        self._stats.completion_tokens += tokens[1]
        self._stats.cost_usd += cost

    def _failure(
        self, common: dict[str, Any], reason: str, detail: str, raw: str, counter: list[int], tokens: list[int]
    ) -> JudgeFailure:
        # Failed calls were still billed: count their tokens and cost.
        cost = self._cost(*tokens)
        self._account(tokens, cost)
        self._stats.failures[reason] = self._stats.failures.get(reason, 0) + 1
        return JudgeFailure(
            kind=common["kind"],
            reason=reason,
            detail=detail,
            judge=self.name,
            raw=raw[:RAW_LIMIT] or None,
            calls=counter[0],
            prompt_tokens=tokens[0],
            completion_tokens=tokens[1],
            cost_usd=cost,
            price_known=self.price is not None,
        )


def _scrubbed(completion: Completion, parsed: BaseModel | None) -> tuple[Completion, dict[str, Any] | None]:
    """The reply's text and identity, and the parsed verdict, with every secret redacted.

    One `redact_data` walk for all of them: each redaction pass reads the environment for
    the secrets to scrub, which is a measurable share of a call's CPU at high concurrency.
    """
    text, model_id, fingerprint, verdict = redact_data(
        [
            completion.text or "",
            completion.answered_model_id or None,
            completion.system_fingerprint or None,
            None if parsed is None else parsed.model_dump(mode="json"),
        ]
    )
    stored = dataclasses.replace(completion, text=text, answered_model_id=model_id, system_fingerprint=fingerprint)
    return stored, verdict


def _excerpt(exc: BaseException, limit: int) -> str:
    # Redacted before it is cut: a cut can leave a key's head that no longer matches the key.
    return redact(str(exc))[:limit]


def _short_errors(e: ValidationError, limit: int = 5) -> str:
    parts = []
    for err in e.errors()[:limit]:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg')}")
    more = len(e.errors()) - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)
