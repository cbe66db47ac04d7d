"""Paired comparison of two runs (compare_runs.py, `evalkit compare`, `evalkit.compare_runs`).

    from evalkit import compare_runs

    result = compare_runs("baseline", "my-branch")          # run ids under results/
    for row in result.significant_deltas():
        print(row.metric, row.scope, row.delta, row.ci95, row.p_adjusted)
    print(result.gate.passed, result.flips.regressions[:3])

`compare_runs` returns a `Comparison` (pydantic); `evalkit.report.compare` renders it as a
rich terminal report or a markdown PR comment, and `model_dump(mode="json")` is the JSON
output. `save_baseline` writes the small file `--baseline` reads. EVAL.md, "Comparing two
runs", is the spec.
"""

from __future__ import annotations

from evalkit.compare.compute import IncomparableRuns, compare_runs, select_metrics
from evalkit.compare.conditions import CONFIG_DIFF_IGNORED, config_diff, flatten_config
from evalkit.compare.models import Comparison, DeltaRow, Flip, GateReport
from evalkit.compare.sources import RunSource, open_source, save_baseline

__all__ = [
    "CONFIG_DIFF_IGNORED",
    "Comparison",
    "DeltaRow",
    "Flip",
    "GateReport",
    "IncomparableRuns",
    "RunSource",
    "select_metrics",
    "compare_runs",
    "config_diff",
    "flatten_config",
    "open_source",
    "save_baseline",
]
