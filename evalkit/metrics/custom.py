"""A project's own metrics: rubric judges defined in a file and Python scorers (issue 42 item 5).

The built-in registry (`metrics.registry.METRICS`) is fixed at import: its derived lists feed
every consumer and its hash is the scorer identity runs are compared under. A project's own
metric is declared by the project, so it travels with the run instead: its definition
(direction, scale, margin, gated, version) is stored in metrics.json beside its mean, and its
per-case value in each record. Compare, the verdict and `--threshold` read both from the runs,
so a custom metric is judged exactly as a built-in one with the same fields would be.

Names: `rubric/<name>` (a rubric judge) and `scorer/<name>` (a Python scorer). The `/` is
a metric-name character (`metrics.keys`), so the names work wherever a metric is named:
`--threshold rubric/helpfulness=3.5`, `--margin scorer/cites=0.1`, `--metric`.

Where they live:
- results.jsonl: `record["custom_scores"] = {name: number or null}` (null: not scored).
- metrics.json: `aggregate_metrics["custom_metrics"] = {name: {mean, n, direction, scale,
  margin, gated, kind, version, source}}`.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from evalkit.store.runlog import Met, Rec

__all__ = [
    "CUSTOM_ERRORS",
    "CUSTOM_FAILED",
    "CUSTOM_METRICS",
    "CUSTOM_SAMPLES",
    "CUSTOM_SCORES",
    "CustomMetric",
    "CustomTally",
    "aggregate_custom",
    "custom_definitions",
    "custom_label",
    "custom_value",
    "is_custom_name",
    "metric_name",
    "per_case_values",
]

CUSTOM_SCORES = "custom_scores"  # the record's field
CUSTOM_SAMPLES = "custom_samples"  # the record's field: {name: [each --judge-samples sample's score or null]}
CUSTOM_ERRORS = "custom_errors"  # the record's field: {name: {reason, detail}} of a rubric judge that gave no score
CUSTOM_METRICS = "custom_metrics"  # the aggregate cell's block
# metrics.json's warning of a run whose --rubric / --scorer failed as the run ended (a scorer
# raised): kept until a later `evalkit score --rubric/--scorer` scores the run.
CUSTOM_FAILED = "custom_metrics_failed"
KINDS = ("rubric", "scorer")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_FULL = re.compile(r"^(rubric|scorer)/[a-z_][a-z0-9_]*$")


def metric_name(kind: str, name: str) -> str:
    """`rubric` + `helpfulness` -> `rubric/helpfulness`.

    Raises:
        ValueError: a name that is not lower-case letters, digits and `_`.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown custom metric kind {kind!r}")
    if not _NAME.match(name):
        raise ValueError(f"{kind} name {name!r}: use lower-case letters, digits and _ (e.g. helpfulness)")
    return f"{kind}/{name}"


def is_custom_name(name: str) -> bool:
    return bool(_FULL.match(name))


@dataclass(frozen=True)
class CustomMetric:
    """A project's metric with what the verdict, compare and `--threshold` need of it.

    version: what its values depend on (a rubric: the sha256 of its file's bytes; a scorer:
    of its function's source). Two runs scored by different versions, or a rubric by
    different judges, are not compared on it.
    """

    name: str
    kind: Literal["rubric", "scorer"]
    direction: Literal["higher", "lower"] = "higher"
    scale: float = 1.0
    margin: float = 0.05
    gated: bool = True
    version: str = ""
    source: str = ""
    # Who scored it: a rubric's judge ("openai:gpt-4o-...", or "heuristic"); "" for a scorer.
    judge: str = ""

    def __post_init__(self) -> None:
        if not is_custom_name(self.name):
            raise ValueError(f"not a custom metric name: {self.name!r} (rubric/<name> or scorer/<name>)")
        if self.direction not in ("higher", "lower"):
            raise ValueError(f"{self.name}: direction must be higher or lower, got {self.direction!r}")
        if not (isinstance(self.scale, int | float) and math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"{self.name}: scale must be a positive number, got {self.scale!r}")
        if not (isinstance(self.margin, int | float) and 0 < self.margin <= self.scale):
            raise ValueError(f"{self.name}: margin must be in (0, {self.scale:g}], got {self.margin!r}")

    def definition(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("name")
        return out


def check_value(metric: CustomMetric, value: Any) -> float | None:
    """A scorer's or judge's return value as the stored number: None (not scored) stays None,
    a bool is 0/1, a number must lie on [0, scale].

    Raises:
        ValueError: anything else, or a number off the scale.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{metric.name}: expected a number, a bool or None, got {value!r}")
    if not 0.0 <= float(value) <= metric.scale:
        raise ValueError(f"{metric.name}: {value!r} is off its scale [0, {metric.scale:g}]")
    return float(value)


class CustomTally:
    """Each custom metric's per-case values, fed one record at a time (the derive's pass over
    a run's records): {name: {test_case_id: [value per trial]}}; unscored values left out."""

    def __init__(self, names: Iterable[str] | None = None):
        self.wanted = None if names is None else set(names)
        self.values: dict[str, dict[str, list[float]]] = {}

    def add(self, record: Mapping[str, Any]) -> None:
        scores = record.get(CUSTOM_SCORES)
        if not isinstance(scores, Mapping):
            return
        cid = record.get(Rec.CASE_ID)
        if cid is None:
            return
        for name, value in scores.items():
            if self.wanted is not None and name not in self.wanted:
                continue
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self.values.setdefault(str(name), {}).setdefault(str(cid), []).append(float(value))

    def per_case(self) -> dict[str, dict[str, float]]:
        """{name: {test_case_id: value}}, a case's trials averaged."""
        return {n: {cid: math.fsum(v) / len(v) for cid, v in by_case.items()} for n, by_case in self.values.items()}

    def result(self, definitions: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """The `custom_metrics` block: each defined metric's definition, mean and n over the
        cases that scored it (a null is left out, never a 0; a case's trials averaged first,
        as compare pairs them)."""
        cases = self.per_case()
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(definitions):
            got = list(cases.get(name, {}).values())
            definition = {k: v for k, v in definitions[name].items() if k not in ("mean", "n")}
            out[name] = {"mean": math.fsum(got) / len(got) if got else None, "n": len(got), **definition}
        return out


def aggregate_custom(records: Iterable[Mapping[str, Any]], metrics: Iterable[CustomMetric]) -> dict[str, dict[str, Any]]:
    """The `custom_metrics` block of `metrics` over `records` (`CustomTally.result`)."""
    wanted = list(metrics)
    tally = CustomTally(m.name for m in wanted)
    for record in records:
        tally.add(record)
    return tally.result({m.name: m.definition() for m in wanted})


def per_case_values(records: Iterable[Mapping[str, Any]], names: Iterable[str]) -> dict[str, dict[str, float]]:
    """{name: {test_case_id: value}}, a case's trials averaged; unscored values left out."""
    tally = CustomTally(names)
    for record in records:
        tally.add(record)
    return tally.per_case()


def custom_definitions(metrics: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{name: its stored block} of a run's metrics.json (empty when it has none)."""
    agg = (metrics or {}).get(Met.AGGREGATE)
    block = agg.get(CUSTOM_METRICS) if isinstance(agg, Mapping) else None
    if not isinstance(block, Mapping):
        return {}
    return {str(k): dict(v) for k, v in block.items() if is_custom_name(str(k)) and isinstance(v, Mapping)}


def custom_value(agg: Mapping[str, Any], name: str) -> tuple[float | None, int, dict[str, Any] | None]:
    """(mean, n, definition) of a custom metric in an aggregate cell; (None, 0, None) if absent."""
    block = agg.get(CUSTOM_METRICS)
    entry = block.get(name) if isinstance(block, Mapping) else None
    if not isinstance(entry, Mapping):
        return None, 0, None
    mean = entry.get("mean")
    return (float(mean) if isinstance(mean, int | float) else None), int(entry.get("n") or 0), dict(entry)


def custom_label(name: str, entry: Mapping[str, Any]) -> str:
    """How every report names a custom metric: its name, marked "(heuristic)" when the offline
    rubric proxy scored it (as a built-in judge score the heuristic gave is)."""
    return name + (" (heuristic)" if entry.get("judge") == "heuristic" else "")


def source_version(data: bytes) -> str:
    """The version of what a custom metric's values depend on: sha256 of its bytes, 16 hex."""
    return hashlib.sha256(data).hexdigest()[:16]
