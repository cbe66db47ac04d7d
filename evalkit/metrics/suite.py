"""Scenario suites (seed 004): a primary metric and a weight per scenario, and a global score.

A suite file (`--suite suite.toml`) names, for each scenario family (the cases' `scenario`
field), the metric that scores it and its weight:

    name = "hindsight-baseline"            # optional

    [scenarios.follow_up_recall]
    metric = "must_include_mrr"
    weight = 0.30

A scenario's score is its `by_scenario` cell's value of that metric (the mean over the
scenario's cases that have it, as in every other slice). The global score is the weighted
mean  sum(w_s * score_s) / sum(w_s)  — with weights that sum to 1, as seed 004's do, the
weighted sum itself. It is null, with a reason, when any weighted scenario has no score
(no case of it in the run, or none that the metric applies to): renormalising over the
scenarios that happen to be present would report a number for a different suite.

Only higher-is-better metrics can be weighted (a global score that adds a rate where less
is better would reward it); the metric names are those a slice holds (SLICE_METRICS).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, Problem
from evalkit.metrics.keys import LOWER_IS_BETTER
from evalkit.project import TomlError, parse_toml
from evalkit.store.runlog import Met

__all__ = ["ScenarioWeight", "Suite", "load_suite", "suite_block", "suite_metrics"]


def suite_metrics() -> list[str]:
    """The metrics a suite may weigh: a slice's higher-is-better metrics."""
    from evalkit.metrics.aggregate import (
        SLICE_METRICS,  # numpy: only when a suite is read
    )

    return [m for m in SLICE_METRICS if m not in LOWER_IS_BETTER]


@dataclass(frozen=True)
class ScenarioWeight:
    name: str
    metric: str
    weight: float


@dataclass(frozen=True)
class Suite:
    """A parsed suite file; `to_json` is what config.json keeps, so later scripts that
    rewrite metrics.json (score_retrieval, judge_answers, ...) need not find the file."""

    scenarios: tuple[ScenarioWeight, ...]
    name: str | None = None
    path: str | None = None
    sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "sha256": self.sha256,
            "scenarios": {s.name: {"metric": s.metric, "weight": s.weight} for s in self.scenarios},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Suite:
        scenarios = obj.get("scenarios") or {}
        return cls(
            scenarios=tuple(
                ScenarioWeight(str(name), str(s["metric"]), float(s["weight"])) for name, s in scenarios.items()
            ),
            name=obj.get("name"),
            path=obj.get("path"),
            sha256=obj.get("sha256"),
        )


def load_suite(path: str | Path) -> Suite:
    """Read and check a suite file.

    Raises:
        BadConfig: unreadable or not TOML; no scenario; a scenario without a known,
            higher-is-better `metric` or a positive `weight`; an unknown key. Every problem
            names the file and the field.
    """
    path = Path(path)
    where = {"path": str(path)}
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise BadConfig(Problem(f"cannot read the suite file: {e.strerror or e}", field="--suite", **where)) from None
    try:
        doc = parse_toml(raw.decode("utf-8"))  # bounded: never a RecursionError
    except (UnicodeDecodeError, TomlError) as e:
        raise BadConfig(Problem(f"not a TOML file: {e}", field="--suite", **where)) from None

    problems: list[Problem] = []
    for key in doc:
        if key not in ("name", "scenarios"):
            problems.append(Problem("unknown key; a suite has `name` and [scenarios.<name>] tables", field=key, **where))
    name = doc.get("name")
    if name is not None and not isinstance(name, str):
        problems.append(Problem("must be a string", field="name", **where))
    tables = doc.get("scenarios")
    if not isinstance(tables, dict) or not tables:
        problems.append(
            Problem("no scenario: add [scenarios.<name>] tables with metric and weight", field="scenarios", **where)
        )
        raise BadConfig(problems)

    allowed = suite_metrics()
    scenarios: list[ScenarioWeight] = []
    for scen, table in tables.items():
        field = f"scenarios.{scen}"
        if not isinstance(table, dict):
            problems.append(Problem("must be a table with metric and weight", field=field, **where))
            continue
        for key in table:
            if key not in ("metric", "weight"):
                problems.append(Problem("unknown key; a scenario has metric and weight", field=f"{field}.{key}", **where))
        metric, weight = table.get("metric"), table.get("weight")
        if not isinstance(metric, str) or metric not in allowed:
            if isinstance(metric, str) and metric in LOWER_IS_BETTER:
                msg = f"{metric!r} is a rate where lower is better; a weighted score needs a higher-is-better metric"
            else:
                msg = f"must be one of {', '.join(allowed)}, got {metric!r}"
            problems.append(Problem(msg, field=f"{field}.metric", **where))
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
            problems.append(Problem(f"must be a number > 0, got {weight!r}", field=f"{field}.weight", **where))
        if isinstance(metric, str) and isinstance(weight, int | float) and not isinstance(weight, bool):
            scenarios.append(ScenarioWeight(str(scen), metric, float(weight)))
    if problems:
        raise BadConfig(problems)
    return Suite(tuple(scenarios), name=name, path=str(path), sha256=hashlib.sha256(raw).hexdigest())


def suite_block(metrics: Mapping[str, Any], suite: Suite) -> dict[str, Any]:
    """metrics.json's `suite` block: each scenario's score and the global score.

    Args:
        metrics: a metrics.json body with its `by_scenario` slices.
        suite: the suite.

    Returns:
        {"name", "path", "sha256", "scenarios": {name: {"metric", "weight", "n_cases",
        "n", "score"}}, "global_score", "weight_total", "problems": [why the global score
        is null], "unweighted_scenarios": {scenario in the run but not in the suite:
        n_cases}}.
    """
    by = metrics.get(Met.BY_SCENARIO) or {}
    rows: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for s in suite.scenarios:
        cell = by.get(s.name) or {}
        n_cases = int(cell.get("n_cases") or 0)
        n = int((cell.get("n") or {}).get(s.metric) or 0)
        value = cell.get(s.metric) if n else None
        score = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        if not n_cases:
            problems.append(f"no case of scenario {s.name!r} in this run")
        elif score is None:
            problems.append(f"{s.metric} applies to none of the {n_cases} cases of scenario {s.name!r}")
        rows[s.name] = {"metric": s.metric, "weight": s.weight, "n_cases": n_cases, "n": n, "score": score}
    total = math.fsum(s.weight for s in suite.scenarios)
    global_score = None
    if not problems:
        global_score = math.fsum(r["weight"] * r["score"] for r in rows.values()) / total
    named = {s.name for s in suite.scenarios}
    unweighted = {
        name: int(cell.get("n_cases") or 0)
        for name, cell in sorted(by.items())
        if name not in named and int(cell.get("n_cases") or 0) > 0
    }
    return {
        **suite.to_json(),
        "scenarios": rows,
        "global_score": global_score,
        "weight_total": total,
        "problems": problems,
        "unweighted_scenarios": unweighted,
    }
