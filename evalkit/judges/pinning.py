"""The pinned-judge-model rule (seed 000 §3.B: "judge model is pinned to an immutable version
or local model build hash").

A model id is pinned when it names something that cannot change under us:

- openai: a dated snapshot (`gpt-4o-2024-08-06`, `o3-mini-2025-01-31`), an older MMDD snapshot
  (`gpt-4-0613`, `gpt-3.5-turbo-0125`) or a fine-tune (`ft:...`).
- anthropic: a dated snapshot (`claude-3-5-sonnet-20241022`, `claude-sonnet-4-5-20250929`,
  Vertex style `claude-3-5-sonnet-v2@20241022`).
- openai-compatible (llama.cpp, Ollama, vLLM): a pin after the last `@`: a hex digest of
  at least 12 characters (`qwen2.5:14b@sha256:845dbda0ea48...`, `llama3.1:8b@46e0c10c039e`,
  the Ollama ID or the gguf file's sha256) or a build id (`...@build-b4567`). The part
  before the `@` is what we send as `model`; the pin is recorded. A dated snapshot also passes.

Anything ending in `-latest` is floating on every provider.
"""

from __future__ import annotations

import re

from evalkit.errors import JudgeConfigError, Problem

_DATED = re.compile(r"(?:-|@)(?:\d{4}-\d{2}-\d{2}|\d{8})$")
_OPENAI_MMDD = re.compile(r"-\d{4}$")
_HEX = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,}(?![0-9A-Za-z])")
_BUILD = re.compile(r"^build-[A-Za-z0-9][A-Za-z0-9._-]*$")


def split_pin(model: str) -> tuple[str, str | None]:
    """`name@pin` -> (name, pin); without `@` -> (model, None). For openai-compatible ids."""
    if "@" not in model:
        return model, None
    name, pin = model.rsplit("@", 1)
    return name, pin


def is_pinned(provider: str, model: str) -> bool:
    """True when `model` names an immutable version on `provider` (see module docstring)."""
    m = model.strip()
    if not m or m.endswith("-latest"):
        return False
    if provider == "openai":
        return m.startswith("ft:") or bool(_DATED.search(m) or _OPENAI_MMDD.search(m))
    if provider == "anthropic":
        return bool(_DATED.search(m))
    if provider == "openai-compatible":
        if _DATED.search(m):
            return True
        _, pin = split_pin(m)
        if pin is None:
            return False
        pin = pin.removeprefix("sha256:").removeprefix("sha256-")
        return bool(_BUILD.match(pin) or _HEX.fullmatch(pin.lower()))
    return True  # heuristic and other deterministic judges carry their own version


def check_pinned(provider: str, model: str, *, allow_unpinned: bool = False) -> None:
    """Refuse a floating model alias unless the user said `--allow-unpinned`.

    Raises:
        JudgeConfigError: one line naming the model, why, and the fix.
    """
    if allow_unpinned or is_pinned(provider, model):
        return
    if provider == "openai-compatible":
        hint = (
            f"add the model file hash or build id after '@', e.g. --judge-model '{split_pin(model)[0]}@sha256:<12+ hex>'"
            " (Ollama: the ID from `ollama list`; llama.cpp: sha256sum of the .gguf)"
        )
    elif provider == "anthropic":
        hint = "use a dated snapshot such as claude-sonnet-4-5-20250929"
    else:
        hint = "use a dated snapshot such as gpt-4o-2024-08-06"
    raise JudgeConfigError(
        Problem(
            f"judge model {model!r} is not pinned to an immutable version (scores would drift when "
            f"{provider} updates it); {hint}, or pass --allow-unpinned",
            field="--judge-model",
        )
    )
