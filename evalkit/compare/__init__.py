"""Paired comparison of two runs (compare_runs.py, `evalkit compare`, `evalkit.compare_runs`).

    from evalkit import compare_runs

    result = compare_runs("baseline", "my-branch")   # run ids under results/
    print(result.decision.headline, result.decision.exit_code)   # PASS / FAIL / NOT ENOUGH EVIDENCE: 0 / 1 / 4
    print(result.verdict.verdict, result.verdict.summary)   # identical | better | ... | worse | inconclusive
    for row in result.significant_deltas():
        print(row.metric, row.scope, row.delta, row.ci95, row.p_adjusted)
    print(result.gate.passed, result.flips.regressions[:3])

`compare_runs` returns a `Comparison` (pydantic); `evalkit.report.compare` renders it as a
rich terminal report or a markdown PR comment, and `model_dump(mode="json")` is the JSON
output. `save_baseline` writes the small file `--baseline` reads. EVAL.md, "Comparing two
runs", is the spec.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> the module that defines it, imported on first use: importing the package must not
# load numpy and the statistics. The verdict, gate and decision models are `evalkit.gate.models`.
_HOME = {
    "IncomparableRuns": "compute",
    "compare_runs": "compute",
    "select_metrics": "compute",
    "CONFIG_DIFF_IGNORED": "conditions",
    "config_diff": "conditions",
    "flatten_config": "conditions",
    "Comparison": "models",
    "DeltaRow": "models",
    "Flip": "models",
    "RunSource": "sources",
    "open_source": "sources",
    "save_baseline": "sources",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
