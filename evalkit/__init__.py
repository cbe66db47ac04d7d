"""evalkit: an evaluation harness for retrieval-backed chatbots.

Importing evalkit stays cheap: no httpx, openai, anthropic or rich at import time.
`from evalkit import run_eval` loads the runner on first use, `from evalkit import
compare_runs` the comparison.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = [
    "__version__",
    "compare_runs",
    "export_trec",
    "import_cases",
    "merge_runs",
    "run_eval",
    "score_abstention",
    "score_retrieval",
]
# name -> "module:attribute", imported on first use.
_LAZY = {
    "export_trec": "evalkit.interop.trec:export_trec",
    "import_cases": "evalkit.interop.importers:import_cases",
    "merge_runs": "evalkit.run.merge:merge_runs",
}


def __getattr__(name: str) -> Any:
    if name == "run_eval":
        from evalkit.run.api import run_eval

        return run_eval
    if name == "compare_runs":
        from evalkit.compare import compare_runs

        return compare_runs
    if name in ("score_retrieval", "score_abstention"):
        from evalkit.rescore import scoring
        return getattr(scoring, name)
    if name in _LAZY:
        import importlib

        module, _, attr = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
