"""Targets: the systems under test behind the /api/v1/ask contract (DESIGN.md §5).

`build_target` turns the run_eval flags into one Target. HttpTarget (and httpx with
it) is imported only when an HTTP target is built or named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from evalkit.errors import BadConfig, Problem
from evalkit.targets.base import AskResult, Target
from evalkit.targets.python import CallableTarget
from evalkit.targets.reference import ReferenceTarget
from evalkit.targets.replay import ReplayTarget

if TYPE_CHECKING:
    from evalkit.targets.http import HttpTarget

__all__ = [
    "API_URL_ENV",
    "AskResult",
    "CallableTarget",
    "HttpTarget",
    "ReferenceTarget",
    "ReplayTarget",
    "Target",
    "build_target",
    "parse_param_options",
]

API_URL_ENV = "EVAL_API_URL"
_SPEC_HELP = "expected python:package.module:function, replay:path.jsonl or an http(s):// URL"


def __getattr__(name: str) -> Any:
    if name == "HttpTarget":
        from evalkit.targets.http import HttpTarget

        return HttpTarget
    raise AttributeError(f"module 'evalkit.targets' has no attribute {name!r}")


def build_target(
    *,
    target: str | None,
    api_url: str | None,
    vault: Path,
    timeout: float,
    retries: int,
    rps: float | None,
    params: dict[str, Any],
    vault_id: str | None = None,
    retry_policy: Any = None,
    max_response_bytes: int | None = None,
    concurrency: int | None = None,
    processes: int | None = None,
) -> Target:
    """The target the run_eval flags name.

    Precedence: `--target` (python:pkg.mod:func | replay:path.jsonl | an http(s) URL),
    then `--api-url`, then the EVAL_API_URL environment variable (HttpTarget), else the
    in-process reference chatbot over `vault`.

    Args:
        target: the --target spec, or None.
        api_url: the --api-url value, or None.
        vault: notes folder for the reference chatbot.
        timeout: seconds per request (HTTP) or per call (python).
        retries: HTTP retries after the first try.
        rps: requests per second limit (HTTP and python), None = none.
        params: free `--param` options, sent in the request's `options`.
        vault_id: vault id for the reference chatbot's chunk ids.
        retry_policy: an evalkit.net.retry.RetryPolicy overriding `retries` (tests).
        max_response_bytes: cap on an HTTP answer's (decoded) body; default 32 MiB.
        concurrency: calls at once (--concurrency): a sync python target's thread pool.
        processes: --target-processes: a sync python target's calls in that many worker
            processes instead of threads (CPU-bound functions).

    Raises:
        InputError: a malformed spec, both --target and --api-url, a missing replay
            log or vault, a python target that cannot be imported.
    """
    if target is not None and api_url:
        raise BadConfig(
            Problem(f"give either --target or --api-url, not both (got {target!r} and {api_url!r})", field="--target")
        )
    if processes is not None and not (target or "").strip().startswith("python:"):
        raise BadConfig(Problem(
            f"--target-processes runs a python: target's function in worker processes; this target is "
            f"{(target or api_url or 'the reference chatbot')!r}", field="--target-processes",
        ))
    http_kwargs = dict(timeout=timeout, retries=retries, rps=rps, params=params, retry_policy=retry_policy)
    if max_response_bytes is not None:
        http_kwargs["max_response_bytes"] = max_response_bytes
    if target is not None:
        spec = target.strip()
        kind, sep, rest = spec.partition(":")
        if kind in ("http", "https") and rest.startswith("//"):
            return _http(spec, http_kwargs)
        if not sep or not rest.strip():
            raise BadConfig(Problem(f"{_SPEC_HELP}, got {target!r}", field="--target"))
        if kind == "python":
            return CallableTarget.from_spec(
                rest.strip(), timeout=timeout, rps=rps, params=params, concurrency=concurrency, processes=processes
            )
        if kind == "replay":
            return ReplayTarget(Path(rest.strip()).expanduser())
        raise BadConfig(Problem(f"unknown target kind {kind!r}: {_SPEC_HELP}", field="--target"))
    url = api_url or os.environ.get(API_URL_ENV) or None
    if url:
        return _http(url, http_kwargs)
    return ReferenceTarget(vault, vault_id, params=params)


def _http(url: str, kwargs: dict[str, Any]) -> Target:
    from evalkit.targets.http import HttpTarget

    return HttpTarget(url, **kwargs)


def parse_param_options(items: Iterable[str]) -> dict[str, Any]:
    """`--param key=value` items as the `options` dict.

    Values are read as JSON when they parse (`k=3` -> 3, `flag=true` -> True,
    `w=[1,2]` -> [1, 2]) and kept as strings otherwise (`model=qwen2.5`).

    Raises:
        BadConfig: an item without `=` or with an empty key (all of them at once).
    """
    options: dict[str, Any] = {}
    problems: list[Problem] = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(Problem(f"expected key=value, got {item!r}", field="--param"))
            continue
        try:
            options[key] = orjson.loads(value)
        except orjson.JSONDecodeError:
            options[key] = value
    if problems:
        raise BadConfig(problems)
    return options
