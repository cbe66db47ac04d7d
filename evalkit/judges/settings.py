"""Which judge to use: `JudgeSettings`, resolved to a provider and model and built into a Judge.

`resolve_judge` says which provider and model settings mean (flags, then EVALKIT_JUDGE_*
variables, then defaults); `build_judge` checks the pin, the API key and the prompt set and
builds the HeuristicJudge or an LLMJudge over the provider's backend. The rules a judge's
verdicts are applied under live in judges/runner.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from evalkit.config import DEFAULT_EVALUATORS, EVALUATORS, parse_evaluators
from evalkit.errors import JudgeConfigError, Problem
from evalkit.judges.base import Judge
from evalkit.judges.cache import DEFAULT_CACHE_PATH, JudgeCache
from evalkit.judges.cost import PriceTable
from evalkit.judges.heuristic import HEURISTIC_VERSION, HeuristicJudge
from evalkit.judges.pinning import check_pinned
from evalkit.judges.prompts import DEFAULT_PROMPT_SET, PROMPT_SETS
from evalkit.judges.registry import PROVIDERS, load_backend_class

__all__ = [
    "DEFAULT_JUDGE_EVALUATORS",
    "DEFAULT_MODELS",
    "JUDGE_EVALUATORS",
    "KEY_ENV",
    "JudgeSettings",
    "ResolvedJudge",
    "build_judge",
    "judge_evaluators",
    "parse_judge_evaluators",
    "redact_base_url",
    "resolve_judge",
    "spot_check_settings",
]

# The judge evaluators `--evaluators` picks from (retrieval is the run's, never a judge's);
# answer_quality is opt-in (--answer-quality), the others run by default.
JUDGE_EVALUATORS = tuple(n for n in EVALUATORS if n != "retrieval")
DEFAULT_JUDGE_EVALUATORS = tuple(n for n in DEFAULT_EVALUATORS if n != "retrieval")

DEFAULT_MODELS = {"openai": "gpt-4o-2024-08-06", "anthropic": "claude-sonnet-4-5-20250929"}
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "openai-compatible": "OPENAI_COMPAT_API_KEY"}
LOCAL_ALIAS = "local"


@dataclass
class JudgeSettings:
    """How to judge. Every field has a default that works offline (the heuristic judge).

    `provider`/`model`/`base_url` fall back to EVALKIT_JUDGE_PROVIDER / EVALKIT_JUDGE_MODEL /
    EVALKIT_JUDGE_BASE_URL. `seed` is sent to providers that take one (OpenAI; default 0).
    `http_client` and `retry_policy` are test and proxy seams.
    """

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    temperature: float = 0.0
    allow_unpinned: bool = False
    use_cache: bool = True
    refresh_cache: bool = False
    cache_path: Path = DEFAULT_CACHE_PATH
    price_file: Path | None = None
    claim_level: bool = False
    # Seed 002's answer-quality judge (relevance / groundedness / completeness vs the
    # case's expected_topics), an optional third verdict on answered answerable cases.
    answer_quality: bool = False
    # Which judge evaluators run (`--evaluators`): a subset of JUDGE_EVALUATORS; None = the
    # default set (DEFAULT_JUDGE_EVALUATORS, plus answer_quality when `answer_quality`).
    evaluators: tuple[str, ...] | None = None
    # Whether the cases to judge hold an acknowledge_both case: the conflict judge's prompt
    # version is then part of the judge's description (and identity). Set by the caller;
    # run_eval asks of the whole run's cases, so every shard of a run has one identity.
    conflict_cases: bool = False
    trials: int = 1
    concurrency: int = 4
    rps: float | None = None
    timeout: float = 60.0
    prompt_set: str = DEFAULT_PROMPT_SET
    seed: int | None = None
    retry_policy: Any = None
    http_client: Any = None
    max_response_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True)
class ResolvedJudge:
    provider: str
    model: str
    base_url: str | None


def _infer_provider(model: str | None, base_url: str | None) -> str | None:
    if model is None:
        return "openai-compatible" if base_url else None
    m = model.lower()
    if m == "heuristic" or m.startswith("heuristic-"):
        return "heuristic"
    if m == LOCAL_ALIAS or m.startswith(LOCAL_ALIAS + "@") or base_url:
        return "openai-compatible"
    if m.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-", "ft:gpt")):
        return "openai"
    if m.startswith("claude"):
        return "anthropic"
    return None


def resolve_judge(settings: JudgeSettings) -> ResolvedJudge:
    """Which provider and model `settings` mean, before any key or pin check.

    No provider and no model -> heuristic. `--judge-model local` -> openai-compatible at
    http://127.0.0.1:8080/v1 (llama.cpp's default) unless a base URL is given. A provider
    without a model gets DEFAULT_MODELS[provider] (dated snapshots).

    Raises:
        JudgeConfigError: unknown provider, or a model whose provider cannot be told.
    """
    provider = settings.provider or os.environ.get("EVALKIT_JUDGE_PROVIDER") or None
    model = settings.model or os.environ.get("EVALKIT_JUDGE_MODEL") or None
    base_url = settings.base_url or os.environ.get("EVALKIT_JUDGE_BASE_URL") or None
    if provider is not None and provider not in PROVIDERS:
        raise JudgeConfigError(
            Problem(f"unknown judge provider {provider!r}; expected one of {', '.join(PROVIDERS)}", field="--judge-provider")
        )
    if provider is None:
        provider = _infer_provider(model, base_url) if (model or base_url) else "heuristic"
        if provider is None:
            raise JudgeConfigError(
                Problem(
                    f"cannot tell which provider serves judge model {model!r}; pass --judge-provider "
                    f"({', '.join(PROVIDERS)})",
                    field="--judge-model",
                )
            )
    if provider == "heuristic":
        return ResolvedJudge("heuristic", HEURISTIC_VERSION, None)
    if model is None:
        model = DEFAULT_MODELS.get(provider, LOCAL_ALIAS)
    return ResolvedJudge(provider, model, base_url)


def redact_base_url(url: str | None) -> str | None:
    if not url:
        return url
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def build_judge(settings: JudgeSettings) -> Judge:
    """The Judge `settings` describe: HeuristicJudge or LLMJudge over the provider's backend.

    Raises:
        JudgeConfigError: unknown provider, unpinned model (without allow_unpinned), missing
            API key, unknown prompt set, bad price file.
    """
    if settings.prompt_set not in PROMPT_SETS:
        raise JudgeConfigError(
            Problem(f"unknown prompt version {settings.prompt_set!r}; expected one of {', '.join(PROMPT_SETS)}", field="--spot-check-prompt-version")
        )
    r = resolve_judge(settings)
    if r.provider == "heuristic":
        return HeuristicJudge(claim_level=settings.claim_level)
    check_pinned(r.provider, r.model, allow_unpinned=settings.allow_unpinned)
    env = KEY_ENV[r.provider]
    api_key = os.environ.get(env) or None
    if api_key is None and r.provider != "openai-compatible":
        raise JudgeConfigError(
            Problem(f"{env} is not set (needed by --judge-provider {r.provider}; put it in the environment or .env)")
        )
    prices = PriceTable.load(settings.price_file)
    backend_cls = load_backend_class(r.provider)
    backend = backend_cls(
        r.model,
        api_key=api_key,
        base_url=r.base_url,
        timeout=settings.timeout,
        http_client=settings.http_client or _bounded_client(settings),
        seed=settings.seed if settings.seed is not None else 0,
    )
    from evalkit.judges.llm import LLMJudge

    cache = JudgeCache(settings.cache_path) if settings.use_cache else None
    return LLMJudge(
        backend,
        prompt_set=settings.prompt_set,
        temperature=settings.temperature,
        cache=cache,
        refresh_cache=settings.refresh_cache,
        prices=prices,
        retry_policy=settings.retry_policy,
        deadline=settings.timeout,
        concurrency=settings.concurrency,
        rps=settings.rps,
    )


def _bounded_client(settings: JudgeSettings) -> Any:
    """The SDKs' HTTP client: every reply body capped at max_response_bytes (a judge server
    streaming without end, or a gzip bomb, must not take the run's memory), one kept-alive
    connection per call in flight, through the environment's proxy when it names one
    (`evalkit.net.limits.bounded_client`)."""
    from evalkit.net.limits import bounded_client

    return bounded_client(timeout=settings.timeout, max_bytes=settings.max_response_bytes)


def parse_judge_evaluators(value: Any) -> tuple[str, ...] | None:
    """judge_answers' `--evaluators` as JudgeSettings.evaluators (None when not given):
    the judge evaluators named; `retrieval` may be listed and is score_retrieval's job.

    Raises:
        JudgeConfigError: an unknown name (listing the known ones), or no judge named.
    """
    if value is None:
        return None
    try:
        names = parse_evaluators(value)
    except ValueError as e:
        raise JudgeConfigError(Problem(str(e), field="--evaluators")) from None
    judges = tuple(n for n in names if n != "retrieval")
    if not judges:
        raise JudgeConfigError(Problem(
            f"names no judge; expected some of {', '.join(JUDGE_EVALUATORS)} (retrieval is score_retrieval's)",
            field="--evaluators",
        ))
    return judges


def judge_evaluators(settings: JudgeSettings) -> frozenset[str]:
    """The judge evaluators `settings` run: `evaluators` (DEFAULT_JUDGE_EVALUATORS when
    None), plus answer_quality when `answer_quality` is set."""
    on = set(DEFAULT_JUDGE_EVALUATORS if settings.evaluators is None else settings.evaluators)
    if settings.answer_quality:
        on.add("answer_quality")
    return frozenset(on)


def spot_check_settings(
    settings: JudgeSettings, *, model: str | None = None, provider: str | None = None, prompt_set: str | None = None
) -> JudgeSettings:
    """The second judge of a reliability spot-check: another model (same provider unless told,
    or inferred from the model name) or another prompt version of the same judge."""
    if model is None and prompt_set is None:
        raise JudgeConfigError(
            Problem("--spot-check needs --spot-check-model or --spot-check-prompt-version", field="--spot-check")
        )
    main = resolve_judge(settings).provider
    new = replace(settings, trials=1)
    if model is not None:
        second = provider or _infer_provider(model, None) or main
        new = replace(new, model=model, provider=second, base_url=settings.base_url if second == main else None)
    elif provider is not None:
        new = replace(new, provider=provider)
    if prompt_set is not None:
        if resolve_judge(new).provider == "heuristic":
            raise JudgeConfigError(
                Problem("--spot-check-prompt-version needs an LLM judge; the heuristic has no prompts", field="--spot-check-prompt-version")
            )
        new = replace(new, prompt_set=prompt_set)
    return new
