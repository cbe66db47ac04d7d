"""How much worse a metric may get before the gate fails, and where: `Thresholds`, the gate
flags' parsing (`--regression-threshold NAME=VALUE`, `--gate-by`), the metric names the gate
takes (`gate_metric`) and the named gates (`--gate-preset`). Pure; no I/O, no numpy (config
and every `--help` import this module).

Every threshold is the largest allowed worsening on the metric's own scale (seed 000:
"Recall@K drops by >X% (e.g., >5% absolute)"), except the relative ones
(`Thresholds.relative`): a share of the baseline's value. The nine built-in ones are the
registry's gated metrics (`metrics/registry.py`, `Metric.gated`), each with a
`--regression-threshold-<name>` flag whose default is the metric's registry `margin`:
`run_eval --help` shows them, and EVAL.md ("The regression gate") lists them with the
direction each is read in. Beyond the nine, any registry metric can be gated (issue 30):
`Thresholds.metrics` holds {gate name: largest worsening}, names resolved by `gate_metric`.
`Thresholds.by` (`--gate-by domain`) applies every threshold within each slice too.
`GATE_PRESETS` holds seed 001's gate as one name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from evalkit.metrics.keys import canonical_key
from evalkit.metrics.registry import METRICS, Metric, by_key
from evalkit.store.runlog import Rec

__all__ = [
    "BUILTIN_THRESHOLDS",
    "DEFAULT_MIN_SLICE_N",
    "GATED",
    "GATE_BY",
    "GATE_PRESETS",
    "HEADLINE_GATED",
    "GatePreset",
    "Thresholds",
    "gate_metric",
    "gate_metric_names",
    "gate_preset",
    "gated_metrics",
    "parse_gate_by",
    "parse_regression_thresholds",
    "parse_threshold_value",
]

# A gated metric's default threshold is its registry margin: one number for the threshold gate
# and the merge verdict (issue 30).
_DEFAULT = {m.gated: float(m.margin) for m in METRICS if m.gated is not None and m.margin is not None}


# The nine built-in thresholds (Thresholds' float fields, one --regression-threshold-<name> each).
BUILTIN_THRESHOLDS: tuple[str, ...] = tuple(m.gated for m in METRICS if m.gated is not None)
# What `--gate-by` may name: metrics.aggregate.GROUPINGS without "by_" (not imported here:
# aggregate loads numpy, and config imports this module; a test keeps the two equal).
GATE_BY: tuple[str, ...] = ("tag", "category", "difficulty", "domain", "answerable", "language", "scenario", "turn",
                            "follow_up")
# A slice whose n for a metric is below this is not gated on it (a slice of one case is a
# flip: --fail-on-flip covers it).
DEFAULT_MIN_SLICE_N = 2


@dataclass(frozen=True)
class Thresholds:
    """Largest allowed absolute worsening per gated metric (the nine fields: each defaults to its
    metric's registry `margin`), any other metric's (`metrics`), and where they apply (`by`)."""

    recall: float = _DEFAULT["recall"]
    mrr: float = _DEFAULT["mrr"]
    scope_miss: float = _DEFAULT["scope_miss"]
    groundedness: float = _DEFAULT[Rec.GROUNDEDNESS]
    correctness: float = _DEFAULT[Rec.CORRECTNESS]
    attribution: float = _DEFAULT["attribution"]
    abstention: float = _DEFAULT["abstention"]
    hallucination: float = _DEFAULT["hallucination"]
    false_abstention: float = _DEFAULT["false_abstention"]
    # Any other registry metric: (gate name, largest worsening) pairs, the gate name as
    # `gate_metric` gives it (`recall_frac_avg` at the gate's K, `recall_frac@10` at K=10).
    metrics: tuple[tuple[str, float], ...] = ()
    # --gate-by: groupings (GATE_BY) within whose every slice each threshold applies too.
    by: tuple[str, ...] = ()
    # --gate-min-n: the smallest n of a metric in a slice that the slice is gated on.
    min_slice_n: int = DEFAULT_MIN_SLICE_N
    # --gate-preset: the preset these came from (reported in the gate, never read).
    preset: str | None = None
    # Largest worsening as a share of the baseline's value, (gate name, share) pairs: seed
    # 001's "Recall drop > 5%" / "MRR drop > 10%" (`--gate-preset bob`). A metric read so is
    # not also read absolutely; checked overall and in every --gate-by slice, never on a
    # baseline value of 0.
    relative: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        bad = [g for g in self.by if g not in GATE_BY]
        if bad:
            raise ValueError(f"unknown grouping {bad[0]!r} for --gate-by; expected some of {', '.join(GATE_BY)}")
        if self.min_slice_n < 1:
            raise ValueError(f"--gate-min-n must be >= 1, got {self.min_slice_n}")
        for name, _ in self.metrics:
            gate_metric(name)  # raises ValueError on an unknown name
        for name, share in self.relative:
            gate_metric(name)
            if not 0.0 <= float(share):
                raise ValueError(f"{name}: a relative threshold is a share of the baseline's value >= 0, got {share!r}")

    def as_dict(self) -> dict[str, float]:
        """The thresholds as the gate reports them (`gate.thresholds`): the nine by their
        name, then each other gated metric by its gate name, then each relative one as
        `<gate name>_relative` (a share: 0.05 is 5% of the baseline's value), which replaces
        the absolute one of its metric (so `mrr` is left out when `mrr_avg` is relative)."""
        nine = [f.name for f in fields(self) if f.name in BUILTIN_THRESHOLDS]  # in the registry's order
        read_relatively = {gate_metric(name)[0] for name, _ in self.relative}
        absolute = {**{name: float(getattr(self, name)) for name in nine}, **dict(self.metrics)}
        return {**{name: v for name, v in absolute.items() if _gate_key(name) not in read_relatively},
                **{f"{name}_relative": float(share) for name, share in self.relative}}

    def with_relative(self, named: Mapping[str, float]) -> Thresholds:
        """These thresholds with `named` ({metric name: largest worsening as a share of the
        baseline's value}) set as relative thresholds, by gate name (`gate_metric`).

        Raises:
            ValueError: an unknown name.
        """
        out = dict(self.relative)
        for name, share in named.items():
            out[gate_metric(name)[0]] = float(share)
        return replace(self, relative=tuple(out.items()))

    def with_named(self, named: Mapping[str, float]) -> Thresholds:
        """These thresholds with `named` ({metric name: largest worsening}, as
        `parse_regression_thresholds` gives them) set: a gated metric's name (`mrr_avg`,
        `mrr`) sets its built-in threshold, any other adds (or replaces) an entry of `metrics`.

        Raises:
            ValueError: an unknown name.
        """
        builtin: dict[str, float] = {}
        extra = dict(self.metrics)
        for name, value in named.items():
            gname, entry, k = gate_metric(name)
            if k is None and entry.gated is not None:
                builtin[entry.gated] = float(value)
            else:
                extra[gname] = float(value)
        return replace(self, **builtin, metrics=tuple(extra.items()))


def _gate_key(name: str) -> str:
    """The gate name a `Thresholds.as_dict` key stands for: a built-in threshold's name (`mrr`)
    is its metric's key (`mrr_avg`); any other key already is one."""
    entry = _BY_GATED.get(name)
    return entry.key if entry is not None else name


# (metrics.json key, at_k key, Thresholds attribute, direction): the registry's `gated`.
GATED: tuple[tuple[str, str | None, str, str], ...] = tuple(
    (m.key, m.at_k, m.gated, f"{m.direction}_is_better") for m in METRICS if m.gated is not None
)
# The gated metrics a gate must compare: without them it cannot say retrieval held (the
# registry's gated @K means: Recall@K and MRR@K).
HEADLINE_GATED = tuple(m.key for m in METRICS if m.gated is not None and m.at_k is not None)


def gated_metrics() -> list[str]:
    """The metric keys the gate looks at by default (the nine), in report order."""
    return [key for key, *_ in GATED]


# ---------------------------------------------------------------- any metric (issue 30 item 3)

_BY_AT_K: dict[str, Metric] = {m.at_k: m for m in METRICS if m.at_k is not None}
_BY_GATED: dict[str, Metric] = {m.gated: m for m in METRICS if m.gated is not None}
# "recall" names two metrics: evalkit's Recall@K (any), the hit rate the nine gate, and
# seed 001's recall, |relevant ∩ retrieved| / |relevant| (recall_frac). It is refused, with both.
_AMBIGUOUS = {
    "recall": "'recall' names two metrics: recall_at_k_avg (Recall@K (any): did any gold chunk come back, the "
    "hit rate; --regression-threshold-recall) or recall_frac (the share of gold chunks that came back: "
    "seed 001's recall, |relevant ∩ retrieved| / |relevant|); say which",
}


def gate_metric_names() -> list[str]:
    """Every name `gate_metric` takes, for messages (an @K metric as `name@K`)."""
    return [*(m.key for m in METRICS), *(f"{name}@K" for name in _BY_AT_K)]


def gate_metric(name: str) -> tuple[str, Metric, str | None]:
    """(the name the gate reports, the registry entry, the K it fixes or None) of a metric
    name given to the gate.

    Accepted: a metrics.json key (`recall_frac_avg`, `error_rate`), an @K metric without K
    (`recall_frac`: its headline key, at the gate's K), an @K key (`recall_frac@10`, at K = 10),
    ir_measures' names (`R@10`, `nDCG@5`), and the nine thresholds' own names (`mrr`,
    `scope_miss`, ...). `recall` is refused: it names two metrics (`_AMBIGUOUS`).

    Raises:
        ValueError: an unknown or ambiguous name, with a suggestion.
    """
    import difflib

    given = str(name).strip()
    canonical = canonical_key(given)
    base, sep, k = canonical.partition("@")
    if sep:
        entry = _BY_AT_K.get(base)
        if entry is not None and k.isdigit() and int(k) >= 1:
            return f"{base}@{int(k)}", entry, str(int(k))
        if entry is not None:
            raise ValueError(f"{given!r}: K must be a whole number >= 1 (e.g. {base}@5)")
        headline = by_key(base)
        if headline is not None and headline.at_k is not None:
            raise ValueError(f"unknown metric {given!r}; did you mean '{headline.at_k}@{k}'?")
    else:
        if canonical in _AMBIGUOUS:
            raise ValueError(_AMBIGUOUS[canonical])
        entry = by_key(canonical) or _BY_AT_K.get(canonical) or _BY_GATED.get(canonical)
        if entry is not None:
            return entry.key, entry, None
    names = [n for n in gate_metric_names() if not n.endswith("@K")] + list(_BY_AT_K) + list(_BY_GATED)
    close = difflib.get_close_matches(base, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0] + (sep + k if sep and close[0] in _BY_AT_K else '')!r}?" if close else ""
    raise ValueError(
        f"unknown metric {given!r}{hint} (a metrics.json key such as recall_frac_avg or error_rate, an @K key such "
        "as recall_frac@5, or ir_measures' R@5)"
    )


def parse_threshold_value(text: Any) -> float:
    """0.7, "0.7" or "70%" -> 0.7 (a threshold's value, absolute or a floor).

    Raises:
        ValueError: not a number.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a number: {text!r}")
    if isinstance(text, int | float):
        return float(text)
    s = str(text).strip()
    if s.endswith("%"):
        return float(s[:-1].strip()) / 100.0
    return float(s)


def parse_regression_thresholds(value: Any) -> dict[str, float]:
    """`--regression-threshold NAME=VALUE` (repeatable; later wins) -> {gate name: VALUE}.

    NAME: anything `gate_metric` takes. VALUE: the largest allowed worsening, absolute, on
    the metric's own scale: a number or `N%` = N/100 (`5%` is 0.05, as seed 000 reads "drops
    by >X%"; seed 001's "drop > X%" is a share of the baseline's value: `Thresholds.relative`,
    `--gate-preset bob`). A value must lie in [0, the metric's scale].
    A dict {name: value} is taken as well.

    Raises:
        ValueError: one message naming every bad entry.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    else:
        entries = [value] if isinstance(value, str) else list(value)
        items = []
        problems = []
        for entry in entries:
            name, sep, raw = str(entry).partition("=")
            if not sep or not name.strip():
                problems.append(f"expected NAME=VALUE (e.g. recall_frac=0.05 or recall_frac=5%), got {entry!r}")
                continue
            items.append((name.strip(), raw.strip()))
        if problems:
            raise ValueError("; ".join(problems))
    out: dict[str, float] = {}
    problems = []
    for name, raw in items:
        try:
            gname, entry, _ = gate_metric(name)
        except ValueError as e:
            problems.append(str(e))
            continue
        try:
            v = parse_threshold_value(raw)
        except (TypeError, ValueError):
            problems.append(f"{name}: not a number: {raw!r} (e.g. 0.05 or 5%)")
            continue
        if v != v or not 0.0 <= v <= entry.scale:
            problems.append(f"{name}: {raw!r} is off the metric's scale: the largest worsening must be in "
                            f"[0, {entry.scale:g}] (absolute; 5% = 0.05)")
            continue
        out[gname] = v
    if problems:
        raise ValueError("; ".join(problems))
    return out


def parse_gate_by(value: Any) -> list[str]:
    """`--gate-by domain` (repeatable, or `domain,category`; `by_domain` too) -> groupings.

    Raises:
        ValueError: an unknown grouping (the message lists GATE_BY).
    """
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            name = part.strip().lower().removeprefix("by_")
            if not name:
                continue
            if name not in GATE_BY:
                raise ValueError(f"unknown grouping {part.strip()!r}; expected some of {', '.join(GATE_BY)}")
            if name not in out:
                out.append(name)
    return out


@dataclass(frozen=True)
class GatePreset:
    """A named gate (`--gate-preset NAME`): thresholds, groupings and compare_runs' own checks."""

    name: str
    summary: str
    thresholds: tuple[tuple[str, float], ...]  # as --regression-threshold NAME=VALUE (absolute)
    by: tuple[str, ...]  # as --gate-by
    fail_on_flip: bool  # compare_runs' --fail-on-flip
    relative: tuple[tuple[str, float], ...] = ()  # Thresholds.relative: shares of the baseline's value

    @property
    def mrr_relative(self) -> float:
        """compare_runs' --regression-threshold-mrr-relative under this preset: its relative MRR
        threshold (compare_runs gates MRR through `relative`, so the flag beside it replaces it)."""
        return dict(self.relative).get("mrr_avg", 0.10)


# Seed 001's "Flag regressions", read once: "Recall drop > 5%" and "MRR drop > 10%" are both
# drops relative to the baseline's value (seed 001 writes metric values as fractions of 1 and
# "%" only for drops; MRR is no share of anything, so "10% of MRR" is 10% of the baseline's
# MRR). Its recall is recall_frac. Any individual query from pass to fail is --fail-on-flip;
# its per-domain deltas are the gate per domain (docs/comparing.md, "Seed 001's regression flags").
GATE_PRESETS: dict[str, GatePreset] = {
    "bob": GatePreset(
        name="bob",
        summary="seed 001 (B.O.B): recall_frac drop > 5% and MRR drop > 10% of the baseline's value, any case "
        "pass -> fail, per domain",
        thresholds=(),
        relative=(("recall_frac_avg", 0.05), ("mrr_avg", 0.10)),
        by=("domain",),
        fail_on_flip=True,
    ),
}
_PRESET_ALIASES = {"seed001": "bob", "seed-001": "bob", "b.o.b": "bob"}


def gate_preset(name: str) -> GatePreset:
    """The preset called `name` (`bob`, alias `seed001`).

    Raises:
        ValueError: an unknown name (the message lists the presets).
    """
    key = str(name).strip().lower()
    preset = GATE_PRESETS.get(_PRESET_ALIASES.get(key, key))
    if preset is None:
        known = ", ".join(f"{p.name} ({p.summary})" for p in GATE_PRESETS.values())
        raise ValueError(f"unknown gate preset {name!r}; expected one of: {known}")
    return preset
