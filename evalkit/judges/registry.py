"""Provider name -> "module:Class" of its JudgeBackend, imported only when asked for.

Adding a provider is one file with a JudgeBackend class and one line here. Nothing is
registered as a side effect of importing anything, so `import evalkit.judges` never pulls
in an SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

from evalkit.errors import JudgeConfigError, Problem

BACKENDS: dict[str, str] = {
    "openai": "evalkit.judges.openai:OpenAIBackend",
    "openai-compatible": "evalkit.judges.openai:OpenAICompatibleBackend",
    "anthropic": "evalkit.judges.anthropic:AnthropicBackend",
}

# Providers that are not LLM backends (no key, no wire call).
NON_LLM_PROVIDERS: tuple[str, ...] = ("heuristic",)

PROVIDERS: tuple[str, ...] = (*BACKENDS, *NON_LLM_PROVIDERS)

_INSTALL_HINT = {"openai": "openai>=1.40,<3", "anthropic": "anthropic>=0.40,<1"}


def load_backend_class(provider: str) -> Any:
    """Import and return the backend class of `provider`.

    Raises:
        JudgeConfigError: unknown provider, or its SDK is not installed (with a pip hint).
    """
    target = BACKENDS.get(provider)
    if target is None:
        raise JudgeConfigError(
            Problem(f"unknown judge provider {provider!r}; expected one of {', '.join(PROVIDERS)}", field="--judge-provider")
        )
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        sdk = (e.name or "").split(".")[0]
        if sdk in _INSTALL_HINT:
            raise JudgeConfigError(
                Problem(f"--judge-provider {provider} needs the {sdk} SDK: pip install '{_INSTALL_HINT[sdk]}'")
            ) from None
        raise
    return getattr(module, cls_name)
