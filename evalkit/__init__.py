"""evalkit: an evaluation harness for retrieval-backed chatbots.

Importing evalkit stays cheap: no httpx, openai, anthropic or rich at import time.
`from evalkit import run_eval` loads the runner on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "run_eval"]


def __getattr__(name: str) -> Any:
    if name == "run_eval":
        from evalkit.api import run_eval

        return run_eval
    raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
