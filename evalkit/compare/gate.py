"""The regression gate: did a headline metric get worse than the baseline by more than allowed?

Shared by run_eval (`--baseline RUN_ID`) and compare_runs. Pure functions over two
metrics.json bodies (or their `aggregate_metrics`); no I/O.

Every threshold is an absolute change on the metric's own scale (seed 000: "Recall@K drops
by >X% (e.g., >5% absolute)"), except the relative ones (`Thresholds.relative`, below):

| metric (metrics.json key)        | regression when             | flag                                    | default |
| -------------------------------- | --------------------------- | --------------------------------------- | ------- |
| recall_at_k_avg (Recall@K)       | new < baseline - threshold  | --regression-threshold-recall           | 0.05    |
| mrr_avg (MRR@K)                  | new < baseline - threshold  | --regression-threshold-mrr              | 0.10    |
| scope_miss_rate                  | new > baseline + threshold  | --regression-threshold-scope-miss       | 0.10    |
| attribution_hit_rate             | new < baseline - threshold  | --regression-threshold-attribution      | 0.05    |
| groundedness_avg (0-5)           | new < baseline - threshold  | --regression-threshold-groundedness     | 0.5     |
| correctness_avg (0-5)            | new < baseline - threshold  | --regression-threshold-correctness      | 0.5     |
| abstention_accuracy              | new < baseline - threshold  | --regression-threshold-abstention       | 0.05    |
| hallucination_rate_unanswerable  | new > baseline + threshold  | --regression-threshold-hallucination    | 0.05    |
| false_abstention_rate            | new > baseline + threshold  | --regression-threshold-false-abstention | 0.05    |

Recall@K and MRR@K are compared at one K both runs measured (`comparison_k`: the
baseline's primary K first). A metric that either run did not compute (null, e.g.
groundedness of a retrieval-only run, scope miss with folder_mode off), or a retrieval
metric when the runs share no K, is skipped and listed with the reason, never counted as 0;
a skipped Recall@K or MRR@K fails the gate unless `allow_missing_metrics`. Runs that asked
their target for different K keep retrieval comparable at a shared K, but their answer
metrics (ANSWER_METRICS: what the answerer saw changed) are skipped with that reason. Groundedness and
correctness are also skipped when one run was judged by the offline heuristic and the
other by an LLM (their scales are not comparable) unless mixed judges are allowed.

A gate that compared nothing (every metric skipped) has not passed: `passed` is False and
`nothing_compared` True, with the reasons, so `--k 10 --baseline B --retrieval-only`
against a K=5 baseline is a visible outcome, not a green one.

Before any metric is compared, `check_invariants` says whether the two runs may be compared
at all (seed 000 §10.1): same eval set (dataset version; the same cases with other gold labels
are named apart, `gold labels differ`, and `allow_label_change` accepts them) and number of cases, same judge
model, judge prompt version and judge temperature (when both runs were judged), the
same scorer (the metric registry hash: seed 004's "metric definitions are
contract"; two evalkit versions with the same definitions only get a warning) and, with `same_corpus`, the same notes and index (the index stats' version,
document and chunk counts and coverage). A broken invariant fails the gate unless
`ignore_invariants`. `invariant_warnings` says what may explain a difference without
refusing the pair: a changed corpus (without `same_corpus`), a scorer only one run recorded,
a contract field one target leaves out. Such a field refuses nothing (issue 36): the
metrics that read it (`fields.field_gaps`) are skipped with the field and the side as the
reason, and a field no metric reads (`score_vector`) blocks nothing.
Changes are compared with a 1e-9 tolerance so that 0.85 -> 0.80 with threshold 0.05 is
not a regression because of float rounding.

Beyond the nine, any metric the registry lists can be gated (issue 30: seed 001's "Recall
drop > 5%" is its fractional recall, `recall_frac`, which none of the nine watches):
`Thresholds.metrics` holds {gate name: largest worsening} (`--regression-threshold
recall_frac=0.05`; names resolved by `gate_metric`), with the registry's direction, and a
skipped one fails like Recall@K. `Thresholds.by` (`--gate-by domain`) applies every
threshold within each slice of those groupings too, over slices both runs have and whose
n reaches `min_slice_n`; a slice regression names its slice (`recall_frac_avg in
domain:install dropped ...`). `Thresholds.relative` holds thresholds on a share of the
baseline's value (`recall_frac_avg dropped by 33.3% of the baseline (1 -> 0.6667; allowed
5%)`), overall and per slice, skipped where the baseline's value is 0. `GATE_PRESETS` holds
seed 001's gate as one name: its "drop > X%" read once, as a share of the baseline's value,
for recall and MRR alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from evalkit.compare.fields import blinded, field_gaps
from evalkit.metrics.keys import HEADLINE_AT_K, canonical_key
from evalkit.metrics.registry import ANSWER_SIDE_KEYS, METRICS, OPERATIONAL_KEYS, Metric, by_key, registry_hash
from evalkit.metrics.retrieval import AT_K_METRICS

_EPS = 1e-9


# A gated metric's default threshold is its registry margin: one number for the threshold gate
# and the merge verdict (issue 30).
_DEFAULT = {m.gated: float(m.margin) for m in METRICS if m.gated is not None and m.margin is not None}


# The nine built-in thresholds (Thresholds' float fields, one --regression-threshold-<name> each).
BUILTIN_THRESHOLDS: tuple[str, ...] = tuple(m.gated for m in METRICS if m.gated is not None)
# What `--gate-by` may name: metrics.aggregate.GROUPINGS without "by_" (not imported here:
# aggregate loads numpy, and config imports this module; a test keeps the two equal).
GATE_BY: tuple[str, ...] = ("tag", "category", "difficulty", "domain", "answerable", "language", "scenario")
# A slice whose n for a metric is below this is not gated on it (a slice of one case is a
# flip: --fail-on-flip covers it).
DEFAULT_MIN_SLICE_N = 2


@dataclass(frozen=True)
class Thresholds:
    """Largest allowed absolute worsening per metric (see the module table; the defaults are
    the registry's `margin`), any other metric's (`metrics`), and where they apply (`by`)."""

    recall: float = _DEFAULT["recall"]
    mrr: float = _DEFAULT["mrr"]
    scope_miss: float = _DEFAULT["scope_miss"]
    groundedness: float = _DEFAULT["groundedness"]
    correctness: float = _DEFAULT["correctness"]
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
        nine = [f.name for f in fields(self) if f.name in BUILTIN_THRESHOLDS]  # in the module table's order
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


@dataclass(frozen=True)
class Regression:
    """One metric that got worse by more than its threshold, overall or in one slice."""

    metric: str
    baseline: float
    new: float
    delta: float
    threshold: float
    direction: Literal["higher_is_better", "lower_is_better"]
    scope: str = "overall"  # or a slice: `domain:install` (--gate-by)
    n: int | None = None  # the slice's n for the metric (the smaller of the two runs')
    relative: bool = False  # `threshold` is a share of the baseline's value (Thresholds.relative)

    @property
    def relative_change(self) -> float | None:
        """The worsening as a share of the baseline's value (relative thresholds only)."""
        return abs(self.delta) / abs(self.baseline) if self.relative and self.baseline else None

    @property
    def message(self) -> str:
        worse = "dropped" if self.direction == "higher_is_better" else "rose"
        where = "" if self.scope == "overall" else f" in {self.scope}"
        n = "" if self.n is None else f"; n = {self.n}"
        if self.relative:
            return (
                f"{self.metric}{where} {worse} by {self.relative_change:.1%} of the baseline "
                f"({self.baseline:.4g} -> {self.new:.4g}; allowed {self.threshold * 100:.4g}%{n})"
            )
        return (
            f"{self.metric}{where} {worse} by {abs(self.delta):.4g} "
            f"({self.baseline:.4g} -> {self.new:.4g}; allowed {self.threshold:.4g}{n})"
        )

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "message": self.message}
        if self.relative:
            out["relative_change"] = self.relative_change
        return out


# (metrics.json key, at_k key, Thresholds attribute, direction): the registry's `gated`.
_GATED: tuple[tuple[str, str | None, str, str], ...] = tuple(
    (m.key, m.at_k, m.gated, f"{m.direction}_is_better") for m in METRICS if m.gated is not None
)
# Judge scores on the heuristic's scale and an LLM's are not comparable (the registry's judge stage).
_JUDGED = frozenset(m.key for m in METRICS if m.stage == "judge")
# The gated metrics a gate must compare: without them it cannot say retrieval held (the
# registry's gated @K means: Recall@K and MRR@K).
HEADLINE_GATED = tuple(m.key for m in METRICS if m.gated is not None and m.at_k is not None)
# What depends on the chunks the answerer was given, i.e. on how many the target was asked
# for: not comparable between runs that asked for different K (retrieval at a K both
# measured still is: the top K of a deeper list is the same list). The registry's
# `answer_side`, and latency.
ANSWER_METRICS: tuple[str, ...] = (*ANSWER_SIDE_KEYS, "latency")


def gated_metrics() -> list[str]:
    """The metric keys the gate looks at by default (the nine), in report order."""
    return [key for key, *_ in _GATED]


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
            v = _parse_threshold_value(raw)
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


@dataclass(frozen=True)
class _Spec:
    """One metric the gate checks: the name it reports, where its value is, its threshold."""

    name: str  # recall_at_k_avg, recall_frac_avg, recall_frac@10
    key: str  # the registry key (recall_frac_avg)
    at_k: str | None  # the @K metric's name when the value is read at a K
    k: str | None  # the K the name fixes (recall_frac@10), else None: the gate's K
    threshold: float
    direction: str  # higher_is_better | lower_is_better
    named: bool  # given beyond the nine: a skip fails the gate, as a skipped Recall@K does
    relative: bool = False  # threshold is a share of the baseline's value

    @property
    def label(self) -> str:
        """The name `compared` and `skipped` list it by: a relative one as `<name>_relative`."""
        return f"{self.name}_relative" if self.relative else self.name


def _specs(thresholds: Thresholds) -> list[_Spec]:
    """The nine, then each metric of `thresholds.metrics` (one naming a built-in replaces it),
    then each relative threshold (which replaces the absolute one of its metric)."""
    out: dict[str, _Spec] = {
        key: _Spec(key, key, at_k, None, float(getattr(thresholds, attr)), direction, False)
        for key, at_k, attr, direction in _GATED
    }
    for name, value in thresholds.metrics:
        gname, entry, k = gate_metric(name)
        builtin = out.get(gname)
        out[gname] = _Spec(
            gname, entry.key, entry.at_k, k, float(value), f"{entry.direction}_is_better",
            named=builtin is None or builtin.named,
        )
    for name, share in thresholds.relative:
        gname, entry, k = gate_metric(name)
        spec = _Spec(gname, entry.key, entry.at_k, k, float(share), f"{entry.direction}_is_better", True, relative=True)
        out.pop(gname, None)  # one reading per metric: a relative threshold replaces its absolute one
        out[spec.label] = spec
    return list(out.values())


def _aggregate(metrics: Mapping[str, Any]) -> Mapping[str, Any]:
    agg = metrics.get("aggregate_metrics")
    return agg if isinstance(agg, Mapping) else metrics


def _number(value: Any) -> float | None:
    # Cells may be plain numbers or {"value": x, "n": n} dicts; bools are not metrics.
    if isinstance(value, Mapping):
        value = value.get("value", value.get("mean"))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _primary_k(agg: Mapping[str, Any]) -> str | None:
    k = agg.get("k")
    return str(k) if isinstance(k, int) and not isinstance(k, bool) else None


def _value(agg: Mapping[str, Any], key: str, at_k_key: str | None, k: str | None) -> float | None:
    """The metric at K: from `at_k[K]`, or the headline key when K is this run's primary K.

    None when the run did not measure K, so Recall@5 is never set against Recall@20.
    """
    if at_k_key is None or k is None:
        if key not in agg and key in _OPERATIONAL:  # a full cell holds these in its operational_metrics
            return _number((agg.get("operational_metrics") or {}).get(key))
        return _number(agg.get(key))
    cell = (agg.get("at_k") or {}).get(k)
    if isinstance(cell, Mapping) and at_k_key in cell:
        return _number(cell[at_k_key])
    return _number(agg.get(key)) if _primary_k(agg) == k else None


def _measured_ks(agg: Mapping[str, Any]) -> list[str]:
    """The K a run has numbers for, primary first."""
    out = [k for k in (agg.get("at_k") or {}) if isinstance(k, str)]
    primary = _primary_k(agg)
    if primary is not None:
        out = [primary, *[k for k in out if k != primary]]
    return out


def comparison_k(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> str | None:
    """The K at which the gate compares Recall@K and MRR@K: the baseline's primary K when the
    new run measured it too, else the new run's primary K when the baseline measured it, else
    the first other K both measured; None when they share no K."""
    base, new = _measured_ks(_aggregate(baseline_metrics)), _measured_ks(_aggregate(new_metrics))
    for k in (base[:1] + new[:1] + new[1:]):
        if k in base and k in new:
            return k
    return None


def asked_k_of(metrics: Mapping[str, Any]) -> int | None:
    """How many chunks a run asked its target for: `invariants.asked_k` (run_eval records it),
    else the largest K of metrics.json's `ks` (a re-score to smaller K would hide a deeper ask)."""
    inv = metrics.get("invariants") if isinstance(metrics.get("invariants"), Mapping) else {}
    asked = inv.get("asked_k")
    if isinstance(asked, int) and not isinstance(asked, bool):
        return asked
    ks = [k for k in metrics.get("ks") or [] if isinstance(k, int) and not isinstance(k, bool)]
    return max(ks) if ks else None


def asked_k_difference(asked_baseline: int | None, asked_new: int | None) -> str | None:
    """The reason the answer metrics are not comparable, when the runs asked for different K."""
    if asked_baseline is None or asked_new is None or asked_baseline == asked_new:
        return None
    return f"K differs: the target was asked for {asked_baseline} vs {asked_new} chunks"


def _judge_is_heuristic(agg: Mapping[str, Any]) -> bool | None:
    judge = agg.get("judge")
    return bool(judge.get("heuristic")) if isinstance(judge, Mapping) else None


def _judge_is_mixed(agg: Mapping[str, Any]) -> bool:
    judge = agg.get("judge")
    return bool(judge.get("mixed")) if isinstance(judge, Mapping) else False


def _skip_reason(
    base: Mapping[str, Any], new: Mapping[str, Any], key: str, at_k_key: str | None, k: str | None,
    allow_mixed_judges: bool, not_comparable: str | None = None, blind: Mapping[str, str] | None = None,
) -> str | None:
    """Why a gated metric cannot be compared, or None when it can. `blind`: {metric: reason}
    of the fields one target leaves out (`fields.blinded`)."""
    if not_comparable is not None and key in ANSWER_METRICS:
        return not_comparable
    if blind and key in blind:
        return blind[key]
    if at_k_key is not None and k is None:
        kb, kn = _measured_ks(base), _measured_ks(new)
        return (f"no K measured by both runs (baseline K={', '.join(kb) or '?'}, new run K={', '.join(kn) or '?'}); "
                "re-score one with score_retrieval --k")
    if key in _JUDGED and not allow_mixed_judges:
        hb, hn = _judge_is_heuristic(base), _judge_is_heuristic(new)
        if hb is not None and hn is not None and hb != hn:
            return "one run was judged by the offline heuristic, the other by an LLM"
        mixed = [name for name, agg in (("baseline", base), ("new run", new)) if _judge_is_mixed(agg)]
        if mixed:
            return f"the {' and the '.join(mixed)}'s answers were judged by several judges (a partial re-judge)"
    if at_k_key is not None and k is not None and k not in _measured_ks(new):
        return f"the new run did not measure K={k} (its K: {', '.join(_measured_ks(new)) or '?'})"
    if _value(new, key, at_k_key, k) is None:
        return "not computed in the new run"
    if _value(base, key, at_k_key, k) is None:
        if at_k_key and k is not None and _number(base.get(key)) is not None:
            return f"the baseline did not measure K={k} (its primary K is {_primary_k(base)})"
        return "not computed in the baseline"
    return None


def case_count(metrics: Mapping[str, Any]) -> int | None:
    """The cases a run asked: total_tests counts records, which a `--trials N` run has N of
    per case (issue 30: a 3-trial run against a 1-trial one was refused as "partial")."""
    trials = metrics.get("trials")
    if isinstance(trials, Mapping) and isinstance(trials.get("n_cases"), int):
        return int(trials["n_cases"])
    total = metrics.get("total_tests")
    return total if isinstance(total, int) else None


def trial_count(metrics: Mapping[str, Any]) -> int:
    trials = metrics.get("trials")
    n = trials.get("n_trials") if isinstance(trials, Mapping) else None
    return n if isinstance(n, int) and n > 0 else 1


# ---------------------------------------------------------------- scorer and corpus (issue 30)


def scorer_identity() -> dict[str, str]:
    """What computes a run's metrics: evalkit's version and the metric registry's hash
    (`registry_hash`). run_eval records it in config.json `scorer`, metrics.json carries it
    in `invariants.scorer`, and score_retrieval stamps its own when it re-scores a run."""
    from evalkit import __version__

    return {"evalkit_version": __version__, "registry_hash": registry_hash()}


def scorer_of(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """metrics.json's `invariants.scorer`; None for a run made before evalkit recorded it."""
    inv = metrics.get("invariants") if isinstance(metrics.get("invariants"), Mapping) else {}
    scorer = inv.get("scorer")
    return dict(scorer) if isinstance(scorer, Mapping) else None


def scorer_text(scorer: Mapping[str, Any]) -> str:
    """`evalkit 0.1.0, registry 5ed7b6d5051d`: a scorer as messages name it."""
    return f"evalkit {scorer.get('evalkit_version')}, registry {str(scorer.get('registry_hash'))[:12]}"


# What a run's index stats say about the notes it searched (metrics.json
# `aggregate_metrics.indexing_coverage`, summarize_indexing_coverage's shape): the index's
# version, its document and chunk counts and its coverage rates (seed 000's
# "Indexing Coverage Stats").
CORPUS_KEYS = ("index_version", "chunker_version", "docs_processed", "docs_with_0_chunks", "no_chunks_generated_rate",
               "chunks_attempted", "chunks_embedded", "chunks_skipped", "chunks_skipped_rate")


def corpus_of(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The notes and index a run searched, from its index stats ({key: value} over
    CORPUS_KEYS it has): {} when its target served none."""
    cov = ((metrics or {}).get("aggregate_metrics") or {}).get("indexing_coverage")
    if not isinstance(cov, Mapping):
        return {}
    return {k: cov.get(k) for k in CORPUS_KEYS if k in cov}


def corpus_changes(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """{key: [a, b]} of the index stats that differ between two runs' metrics.json; {} when
    they agree or when either target served no index stats."""
    ca, cb = corpus_of(a), corpus_of(b)
    if not ca or not cb:
        return {}
    return {k: [ca.get(k), cb.get(k)] for k in CORPUS_KEYS if (k in ca or k in cb) and ca.get(k) != cb.get(k)}


def _changes_text(changes: Mapping[str, list[Any]]) -> str:
    def fmt(v: Any) -> str:  # rates to 4 significant digits: 2 of 62 -> 2 of 63 is 0.03226 -> 0.03175
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return "; ".join(f"{k} {fmt(va)} -> {fmt(vb)}" for k, (va, vb) in changes.items())


def _scorer_violation(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> str | None:
    sb, sn = scorer_of(baseline_metrics), scorer_of(new_metrics)
    # The definitions are the contract, not the release: the same registry hash under two
    # evalkit versions computes the same numbers (`invariant_warnings` names the versions),
    # so a committed baseline file does not break on every upgrade.
    keys = ("registry_hash",)
    if sb is None or sn is None or all(sb.get(k) == sn.get(k) for k in keys):
        return None
    current = scorer_identity()
    stale = [m for m, s in ((baseline_metrics, sb), (new_metrics, sn)) if any(s.get(k) != current[k] for k in keys)]
    ids = " and ".join(f"score_retrieval.py --run-id {m.get('run_id') or 'RUN_ID'}" for m in stale)
    return (f"scorers differ ({scorer_text(sb)} vs {scorer_text(sn)}): the metrics were computed by different "
            f"definitions; re-score the run(s) made with another scorer than this evalkit's ({scorer_text(current)}): "
            f"{ids or 'score_retrieval.py --run-id RUN_ID'}, then compare again")


def label_change(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> bool:
    """Whether two runs hold the same cases with other gold labels: their `dataset_version`s
    (the eval set whose labels scored each) differ while their `cases_version`s (the cases'
    ids and questions, `evalset.load.CaseIdentity`) agree. False when either lacks one."""
    vb, vn = baseline_metrics.get("dataset_version"), new_metrics.get("dataset_version")
    cb, cn = baseline_metrics.get("cases_version"), new_metrics.get("cases_version")
    return bool(vb and vn and vb != vn and cb and cn and cb == cn)


def relabelled_from(metrics: Mapping[str, Any]) -> list[str] | None:
    """The eval set file(s) whose labels a run was last re-scored with, when that is not the
    eval set it ran with (its metrics.json `dataset_version` is then theirs); else None."""
    for block in ("retrieval_scoring", "abstention_scoring"):
        es = (metrics.get(block) or {}).get("eval_set") if isinstance(metrics.get(block), Mapping) else None
        if isinstance(es, Mapping) and es.get("changed") and es.get("version") == metrics.get("dataset_version"):
            return [str(p) for p in es.get("paths") or []]
    return None


def _label_change_text(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> str:
    vb, vn = str(baseline_metrics.get("dataset_version")), str(new_metrics.get("dataset_version"))
    # The side, not metrics.json's run_id: a copied run folder keeps the id it was made under.
    why = [f"{side} was re-scored with {', '.join(paths) or 'another eval set'}"
           for side, m in (("the baseline", baseline_metrics), ("the new run", new_metrics))
           if (paths := relabelled_from(m)) is not None]
    return (f"gold labels differ (dataset_version {vb[:12]}… vs {vn[:12]}…): the runs hold the same cases (ids and "
            f"questions) scored with other labels" + (f"; {'; '.join(why)}" if why else ""))


def check_invariants(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], *, same_corpus: bool = False,
    allow_label_change: bool = False,
) -> list[str]:
    """Why two runs must not be compared (seed 000 §10.1); empty when they may be.

    Reads each metrics.json's `dataset_version`, `total_tests` and `invariants` block
    ({"judge": {provider, model, prompt_version(s), temperature} | [those] | None,
    "scorer": {evalkit_version, registry_hash}}); a run without a value (an older
    metrics.json, a retrieval-only run's judge) is not held against the other
    (`invariant_warnings` says so for the scorer). Debug payload fields one target leaves
    out are no invariant (issue 36): `fields.field_gaps` says which metrics they blind,
    and the gate skips those. With `same_corpus`
    (`--same-corpus`), the index stats (CORPUS_KEYS) must agree, and a run whose target
    served none breaks it too: the corpus cannot be checked. One line per broken invariant,
    baseline first.

    Runs whose `dataset_version`s differ but whose `cases_version`s agree hold the same
    cases with other gold labels (a re-scoring with `--eval-set relabelled.jsonl`): that is
    `gold labels differ`, naming both versions and the run re-scored, unless
    `allow_label_change` (then `invariant_warnings` says the deltas mix the label change in);
    other cases are `eval sets differ`.
    """
    out: list[str] = []
    vb, vn = baseline_metrics.get("dataset_version"), new_metrics.get("dataset_version")
    if label_change(baseline_metrics, new_metrics):
        # The same cases relabelled (issue 36): named apart from another eval set, and acceptable.
        if not allow_label_change:
            out.append(f"{_label_change_text(baseline_metrics, new_metrics)}: retrieval deltas would mix the label "
                       "change with the chatbot's; re-score one run with the other's eval set (score_retrieval.py "
                       "--run-id RUN --eval-set FILE), or pass --allow-label-change")
    elif vb and vn and vb != vn:
        out.append(f"eval sets differ (dataset_version {vb[:12]}… vs {vn[:12]}…)")
    nb, nn = case_count(baseline_metrics), case_count(new_metrics)
    if isinstance(nb, int) and isinstance(nn, int) and nb != nn:
        out.append(f"case counts differ ({nb} vs {nn}): a filtered or partial run")
    ib = baseline_metrics.get("invariants") if isinstance(baseline_metrics.get("invariants"), Mapping) else {}
    inn = new_metrics.get("invariants") if isinstance(new_metrics.get("invariants"), Mapping) else {}
    out += _judge_violations(ib.get("judge"), inn.get("judge"))
    scorer = _scorer_violation(baseline_metrics, new_metrics)
    if scorer is not None:
        out.append(scorer)
    if same_corpus:
        changes = corpus_changes(baseline_metrics, new_metrics)
        blind = [name for name, m in (("the baseline's", baseline_metrics), ("the new run's", new_metrics)) if not corpus_of(m)]
        if changes:
            out.append(f"the notes or the index differ (--same-corpus): {_changes_text(changes)}")
        elif blind:
            out.append(f"the corpus cannot be checked (--same-corpus): {' and '.join(blind)} target served no index "
                       "stats (GET /api/v1/index/stats, or a Python target's index_stats())")
    return out


def invariant_warnings(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], *, same_corpus: bool = False,
    allow_label_change: bool = False,
) -> list[str]:
    """What may explain a difference between two runs without refusing the pair: the notes
    or the index changed (unless `same_corpus`, which makes it an invariant), or only one run
    recorded the scorer that computed its metrics (a run made before evalkit recorded it).
    One line each, baseline first; then each contract field one target leaves out that
    blinds a metric (`fields.field_gaps`: the metrics not compared, and why). A label change
    let through by `allow_label_change` comes first."""
    out: list[str] = []
    if allow_label_change and label_change(baseline_metrics, new_metrics):
        out.append(f"{_label_change_text(baseline_metrics, new_metrics)} (--allow-label-change): every delta that "
                   "reads the labels (retrieval above all) mixes the label change with the chatbot's")
    changes = {} if same_corpus else corpus_changes(baseline_metrics, new_metrics)
    if changes:
        out.append(f"the notes or the index changed between the runs ({_changes_text(changes)}): a difference in "
                   "retrieval may come from the corpus, not from the chatbot (--same-corpus refuses such a pair)")
    sb, sn = scorer_of(baseline_metrics), scorer_of(new_metrics)
    if (sb is not None and sn is not None and sb.get("registry_hash") == sn.get("registry_hash")
            and sb.get("evalkit_version") != sn.get("evalkit_version")):
        out.append(f"the runs were scored by evalkit {sb.get('evalkit_version')} and {sn.get('evalkit_version')}, with "
                   "the same metric definitions (registry hash): their numbers are comparable")
    sides = (("the baseline", "the new run", sn, baseline_metrics), ("the new run", "the baseline", sb, new_metrics))
    for missing, other, known, m in sides:
        if known is not None and (sb is None) != (sn is None):
            out.append(f"{missing} recorded no scorer (made before evalkit recorded one); {other} was scored by "
                       f"{scorer_text(known)}: if evalkit's metrics changed in between, the numbers differ for that "
                       f"reason too; re-score {missing} to be sure: score_retrieval.py --run-id {m.get('run_id') or 'RUN_ID'}")
    out += [gap.message for gap in field_gaps(baseline_metrics, new_metrics) if gap.metrics]
    return out


def _judge_fields(judge: Any) -> dict[str, set[str]] | None:
    """{"model": {...}, "prompt_version": {...}, "temperature": {...}} over one or several judges."""
    judges = judge if isinstance(judge, list) else [judge]
    judges = [j for j in judges if isinstance(j, Mapping)]
    if not judges:
        return None
    out: dict[str, set[str]] = {"model": set(), "prompt_version": set(), "temperature": set()}
    for j in judges:
        out["model"].add(f"{j.get('provider')}:{j.get('model')}" if j.get("model") else str(j.get("provider")))
        pv = j.get("prompt_versions") if j.get("prompt_versions") is not None else j.get("prompt_version")
        out["prompt_version"].add(repr(sorted(pv.items())) if isinstance(pv, Mapping) else str(pv))
        out["temperature"].add(str(j.get("temperature")))
    return out


def _judge_violations(jb: Any, jn: Any) -> list[str]:
    fb, fn = _judge_fields(jb), _judge_fields(jn)
    if fb is None or fn is None:
        return []
    out = []
    for key, label in (("model", "judge model"), ("prompt_version", "judge prompt version"), ("temperature", "judge temperature")):
        if fb[key] != fn[key]:
            out.append(f"{label} differs ({', '.join(sorted(fb[key]))} vs {', '.join(sorted(fn[key]))})")
    return out


def _regression(spec: _Spec, b: float, n: float, scope: str = "overall", count: int | None = None) -> Regression | None:
    """A Regression when `spec`'s metric got worse from b to n by more than its threshold: on
    the metric's scale, or for a relative threshold as a share of b (the caller skips b = 0)."""
    delta = n - b
    worse = -delta if spec.direction == "higher_is_better" else delta
    limit = spec.threshold * abs(b) if spec.relative else spec.threshold
    if worse > limit + _EPS:
        return Regression(spec.name, b, n, delta, spec.threshold, spec.direction, scope, count,  # type: ignore[arg-type]
                          relative=spec.relative)
    return None


# Why a relative threshold cannot judge a baseline value of 0 (any change is infinitely many of it).
_ZERO_BASE = "the baseline's value is 0: a relative change is undefined"


def _slice_value(cell: Any, spec: _Spec, k: str | None, primary: str | None) -> tuple[float | None, int]:
    """(value, n) of a gated metric in a slice cell; (None, 0) when the cell does not hold it.

    An @K metric comes from the cell's `at_k[K]` (compare's slices hold every K), else from
    its headline key when K is the run's primary K: metrics.json's slices hold the registry's
    sliced metrics at the primary K only, each with its n."""
    if not isinstance(cell, Mapping):
        return None, 0
    ns = cell.get("n") if isinstance(cell.get("n"), Mapping) else {}
    if spec.at_k is not None:
        block = (cell.get("at_k") or {}).get(k) if k is not None else None
        if isinstance(block, Mapping) and spec.at_k in block:
            n = (block.get("n_by_metric") or {}).get(spec.at_k, block.get("n"))
            return _number(block[spec.at_k]), int(n) if isinstance(n, int | float) else 0
        if k is None or primary != k:
            return None, 0
    if spec.key in cell:
        n = ns.get(spec.key)
        return _number(cell.get(spec.key)), int(n) if isinstance(n, int | float) else 0
    op = cell.get("operational_metrics")
    if spec.key in _OPERATIONAL and isinstance(op, Mapping) and spec.key in op:
        n = op.get("n")
        return _number(op[spec.key]), int(n) if isinstance(n, int | float) else 0
    return None, 0


@dataclass
class _Outcome:
    """What the gate found: overall regressions and skips, then (with --gate-by) per slice."""

    regressions: list[Regression]
    skipped: list[dict[str, str]]  # overall: [{metric, reason}]
    compared: list[str]
    failing_skips: list[dict[str, str]]  # skipped metrics whose skip fails the gate (named ones)
    slice_skipped: list[dict[str, str]]  # [{metric, scope, reason}]
    slices: dict[str, Any] | None


def _check_slices(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
    specs: list[tuple[_Spec, str | None]], thresholds: Thresholds,
) -> tuple[list[Regression], list[dict[str, str]], dict[str, Any]]:
    """--gate-by: each compared metric within each slice of each grouping that both runs have,
    with the slice's own n (the smaller run's), skipping (and listing) n < min_slice_n."""
    body_a, body_b = slices if slices is not None else (baseline_metrics, new_metrics)
    pa, pb = _primary_k(_aggregate(baseline_metrics)), _primary_k(_aggregate(new_metrics))
    min_n = thresholds.min_slice_n
    regressions: list[Regression] = []
    skipped: list[dict[str, str]] = []
    compared: dict[str, list[str]] = {}
    for grouping in thresholds.by:
        ga, gb = body_a.get(f"by_{grouping}"), body_b.get(f"by_{grouping}")
        if not isinstance(ga, Mapping) or not isinstance(gb, Mapping) or not ga or not gb:
            which = [w for w, g in (("the baseline", ga), ("the new run", gb)) if not isinstance(g, Mapping) or not g]
            skipped.append({"metric": "*", "scope": f"{grouping}:*",
                            "reason": f"{' and '.join(which)} {'have' if len(which) > 1 else 'has'} no {grouping} slices"})
            continue
        held: set[str] = set()
        for key in sorted(set(ga) | set(gb)):
            scope = f"{grouping}:{key}"
            if key not in ga or key not in gb:
                only = "the new run" if key in gb else "the baseline"
                skipped.append({"metric": "*", "scope": scope, "reason": f"the slice is in {only} only"})
                continue
            for spec, k in specs:
                va, na = _slice_value(ga[key], spec, k, pa)
                vb, nb = _slice_value(gb[key], spec, k, pb)
                if va is None or vb is None or not na or not nb:
                    continue  # not in this slice (no unanswerable case in it, ...)
                held.add(spec.label)
                n = min(na, nb)
                if n < min_n:
                    skipped.append({"metric": spec.label, "scope": scope, "reason": f"n = {n} is below --gate-min-n {min_n}"})
                    continue
                if spec.relative and va == 0:
                    skipped.append({"metric": spec.label, "scope": scope, "reason": _ZERO_BASE})
                    continue
                compared.setdefault(scope, []).append(spec.label)
                reg = _regression(spec, va, vb, scope, n)
                if reg is not None:
                    regressions.append(reg)
        for spec, k in specs:
            if spec.label in held:
                continue
            if spec.at_k is not None and (pa != k or pb != k):
                why = f"the {grouping} slices hold each run's primary K ({pa}, {pb}), not K={k}"
            else:
                why = f"no {grouping} slice of both runs holds it"
            skipped.append({"metric": spec.label, "scope": f"{grouping}:*", "reason": why})
    return regressions, skipped, {"by": list(thresholds.by), "min_n": min_n, "compared": compared}


def _evaluate(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], thresholds: Thresholds, *,
    allow_mixed_judges: bool, not_comparable: str | None, slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
) -> _Outcome:
    base, new = _aggregate(baseline_metrics), _aggregate(new_metrics)
    k = comparison_k(baseline_metrics, new_metrics)
    out = _Outcome([], [], [], [], [], None)
    checked: list[tuple[_Spec, str | None]] = []
    blind = blinded(field_gaps(baseline_metrics, new_metrics))
    for spec in _specs(thresholds):
        at = spec.k if spec.k is not None else k
        reason = _skip_reason(base, new, spec.key, spec.at_k, at, allow_mixed_judges, not_comparable, blind)
        b, n = _value(base, spec.key, spec.at_k, at), _value(new, spec.key, spec.at_k, at)
        if reason is None and spec.relative and b == 0:
            reason = _ZERO_BASE
        if reason is not None:
            out.skipped.append({"metric": spec.label, "reason": reason})
            if spec.named and reason != _ZERO_BASE:  # a zero baseline cannot drop: nothing was missed
                out.failing_skips.append(out.skipped[-1])
            continue
        if b is None or n is None:  # pragma: no cover - _skip_reason said comparable
            continue
        out.compared.append(spec.label)
        checked.append((spec, at))
        reg = _regression(spec, b, n)
        if reg is not None:
            out.regressions.append(reg)
    if thresholds.by:
        regs, out.slice_skipped, out.slices = _check_slices(baseline_metrics, new_metrics, slices, checked, thresholds)
        out.regressions += regs
    return out


def check_regressions(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
    *,
    allow_mixed_judges: bool = False,
    not_comparable: str | None = None,
    slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> list[Regression]:
    """Compare two runs' gated metrics (Recall@K and MRR@K at `comparison_k`).

    Args:
        baseline_metrics: metrics.json of the baseline run (or its aggregate_metrics).
        new_metrics: metrics.json of the new run (or its aggregate_metrics).
        thresholds: allowed absolute worsening per metric; defaults as in the module table;
            `thresholds.metrics` adds metrics, `thresholds.by` checks each slice too.
        allow_mixed_judges: compare groundedness even when one run's judge was the heuristic.
        not_comparable: why the answer metrics are not comparable (asked K differs), or None.
        slices: (baseline, new) bodies holding the `by_*` slices, when not the metrics.json
            bodies themselves (compare_runs: slices recomputed from the records, every K).

    Returns:
        The regressions: overall in the module table's order, then any other gated metric,
        then per slice (grouping, slice, metric). Empty = passed.
    """
    return _evaluate(
        baseline_metrics, new_metrics, thresholds or Thresholds(), allow_mixed_judges=allow_mixed_judges,
        not_comparable=not_comparable, slices=slices,
    ).regressions


def skipped_metrics(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], *, allow_mixed_judges: bool = False,
    not_comparable: str | None = None, thresholds: Thresholds | None = None,
) -> list[dict[str, str]]:
    """Gated metrics the gate could not check overall: [{"metric", "reason"}]."""
    return _evaluate(
        baseline_metrics, new_metrics, replace(thresholds or Thresholds(), by=()), allow_mixed_judges=allow_mixed_judges,
        not_comparable=not_comparable, slices=None,
    ).skipped


def gate_result(
    baseline_metrics: Mapping[str, Any],
    new_metrics: Mapping[str, Any],
    thresholds: Thresholds | None = None,
    *,
    baseline_run_id: str | None = None,
    allow_regressions: bool = False,
    allow_mixed_judges: bool = False,
    ignore_invariants: bool = False,
    allow_missing_metrics: bool = False,
    asked_k: tuple[int | None, int | None] | None = None,
    slices: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    same_corpus: bool = False,
    allow_label_change: bool = False,
) -> dict[str, Any]:
    """The `gate` object written to metrics.json and printed by `--json`; run_eval's
    `--baseline` gate and compare_runs' gate are this function on the same pair.

    Recall@K and MRR@K are compared at `comparison_k`; a gate that could not compare one of
    them, or a metric named in `thresholds.metrics`, fails unless `allow_missing_metrics`.
    Runs that asked their target for different K (`asked_k`: baseline, new; default
    `asked_k_of` each) are compared on retrieval at a K both measured, and their answer
    metrics (ANSWER_METRICS) are skipped with the reason. With `thresholds.by`, every
    compared metric is checked in each slice too (`slices`: see check_regressions).
    `same_corpus` (`--same-corpus`) makes a changed corpus an invariant (check_invariants);
    `allow_label_change` (`--allow-label-change`) lets the same cases with other labels through,
    with a warning.

    Returns:
        {"passed", "allowed", "nothing_compared", "baseline_run_id", "k", "thresholds",
        "preset", "invariants": {"ok", "violations", "ignored", "warnings"}, "regressions": [{metric,
        baseline, new, delta, threshold, direction, scope, n, message}], "compared":
        [metric], "skipped": [{metric, reason} overall, then {metric, scope, reason} per
        slice], "slices": {by, min_n, compared: {scope: [metric]}} or None, "failures":
        [str]}. `passed` is False when there is a regression, when nothing could be
        compared, or when an invariant is broken and not ignored; `failures` says why in one
        line each. `allowed` records --allow-regressions.
    """
    thresholds = thresholds or Thresholds()
    asked = asked_k if asked_k is not None else (asked_k_of(baseline_metrics), asked_k_of(new_metrics))
    partial = asked_k_difference(*asked)
    found = _evaluate(
        baseline_metrics, new_metrics, thresholds, allow_mixed_judges=allow_mixed_judges, not_comparable=partial,
        slices=slices,
    )
    violations = check_invariants(baseline_metrics, new_metrics, same_corpus=same_corpus,
                                  allow_label_change=allow_label_change)
    compared = found.compared
    failures = [r.message for r in found.regressions]
    if not compared:
        reasons = "; ".join(f"{s['metric']}: {s['reason']}" for s in found.skipped)
        failures.append(f"nothing comparable — {reasons}")
    elif not allow_missing_metrics:
        failures += [
            f"{s['metric']} not compared: {s['reason']} (--allow-missing-metrics gates without it)"
            for s in found.skipped if s["metric"] in HEADLINE_GATED or s in found.failing_skips
        ]
    if violations and not ignore_invariants:
        failures += [f"invariant broken: {v}" for v in violations]
    k = comparison_k(baseline_metrics, new_metrics)
    return {
        "passed": not failures,
        "allowed": bool(allow_regressions),
        "nothing_compared": not compared,
        "baseline_run_id": baseline_run_id,
        "k": k if k is not None else _primary_k(_aggregate(new_metrics)),
        "not_comparable": (
            [{"reason": partial, "metrics": [m for m in gated_metrics() if m in ANSWER_METRICS]}] if partial else []
        ) + [{"reason": gap.reason, "metrics": list(gap.metrics)} for gap in field_gaps(baseline_metrics, new_metrics)
             if gap.metrics],
        "thresholds": thresholds.as_dict(),
        "preset": thresholds.preset,
        "invariants": {
            "ok": not violations, "violations": violations, "ignored": bool(ignore_invariants and violations),
            "warnings": invariant_warnings(baseline_metrics, new_metrics, same_corpus=same_corpus,
                                           allow_label_change=allow_label_change),
        },
        "regressions": [r.to_dict() for r in found.regressions],
        "compared": compared,
        "skipped": [*found.skipped, *found.slice_skipped],
        "slices": found.slices,
        "failures": failures,
    }


# --------------------------------------------------------------------------- absolute thresholds
# Issue 13 item 4: `--threshold 0.7` / `--threshold recall_at_k_avg=0.8` (seed 002's
# MVP/Beta/GA 70/80/90 % strategy). An absolute floor on this run's own numbers, beside the
# baseline gate; no baseline needed.

# The key under which a bare `--threshold 0.7` is stored in RunSettings.thresholds.
ALL_DEFAULT = "*"
# What a bare threshold applies to: the headline scores on [0, 1] where higher is better.
# Not precision (bounded by |gold| / K, it measures the labels as much as the retriever),
# not the judges' 0-5 means (another scale), not the lower-is-better rates.
DEFAULT_THRESHOLD_METRICS: tuple[str, ...] = tuple(m.key for m in METRICS if m.default_threshold)
# metrics.json aggregate key -> (largest value of its scale, direction). "min": the value
# must be >= the threshold; "max" (lower is better): the value must be <= the threshold.
_THRESHOLD_SCALE: dict[str, tuple[float, str]] = {
    m.key: (m.scale, "max" if m.direction == "lower" else "min") for m in METRICS if m.threshold
}
_OPERATIONAL = frozenset(OPERATIONAL_KEYS)  # read from a cell's operational_metrics block
# Per-K names (`ndcg@10`): metrics.keys.metric_key over retrieval.AT_K_METRICS, all on [0, 1].
_AT_K_NAMES = AT_K_METRICS
_AT_K_HEADLINE = {at_k: headline for headline, at_k in HEADLINE_AT_K.items()}
# Why a metric can be unmeasured, said next to "not measured".
_NOT_MEASURED_HINT = {
    "latency_budget_score_avg": "no latency budget applied: set --latency-budget-ms or a case's constraints.latency_budget_ms",
    "within_budget_rate": "no latency budget applied: set --latency-budget-ms or a case's constraints.latency_budget_ms",
    "groundedness_avg": "no judge ran (retrieval-only?) or every case was excluded",
    "correctness_avg": "no judge ran (retrieval-only?) or every case was excluded",
    "abstention_accuracy": "no unanswerable case with a known abstention",
    "hallucination_rate_unanswerable": "no unanswerable case with a known abstention",
    "false_abstention_rate": "no answerable case with a known abstention",
    "scope_miss_rate": "folder mode off, or no answerable case",
}


def _threshold_scale(name: str) -> tuple[float, str] | None:
    """(scale max, direction) of a threshold-able metric name; None when unknown."""
    if name in _THRESHOLD_SCALE:
        return _THRESHOLD_SCALE[name]
    base, sep, k = name.partition("@")
    if sep and base in _AT_K_NAMES and k.isdigit() and int(k) >= 1:
        return (1.0, "min")
    return None


def threshold_metric_names() -> list[str]:
    """Every metric name a threshold may name (the registry's `threshold`; the per-K form
    shown as `name@K`)."""
    return [*_THRESHOLD_SCALE, *(f"{m}@K" for m in _AT_K_NAMES)]


def _parse_threshold_value(text: Any) -> float:
    """0.7, "0.7" or "70%" -> 0.7. Raises ValueError."""
    if isinstance(text, bool):
        raise ValueError(f"not a number: {text!r}")
    if isinstance(text, int | float):
        return float(text)
    s = str(text).strip()
    if s.endswith("%"):
        return float(s[:-1].strip()) / 100.0
    return float(s)


def parse_thresholds(value: Any, ks: Sequence[int] | None = None) -> dict[str, float]:
    """Thresholds as given (CLI strings, a number, a dict) -> {metric: threshold}.

    Accepted: a number (`0.7`: every DEFAULT_THRESHOLD_METRICS the run measures, stored
    under ALL_DEFAULT "*"), a string "0.7" / "70%" / "name=0.8" / "name=80%", a list of
    those (repeated --threshold), or a dict {name: value} ("*" for the bare form). Later
    entries win. A name is a metrics.json aggregate key ("recall_at_k_avg", "mrr_avg",
    "abstention_accuracy", ...) or a per-K key ("ndcg@10"; K must be one of the run's `ks`).
    A value must lie on its metric's scale: [0, 1] for rates and retrieval means, [0, 5]
    for groundedness_avg / correctness_avg.

    Raises:
        ValueError: one message naming every bad entry, with a suggestion for an unknown
            name (difflib over threshold_metric_names()).
    """
    import difflib

    if value is None:
        return {}
    if isinstance(value, Mapping):
        items: list[tuple[str, Any]] = [(str(k), v) for k, v in value.items()]
    else:
        entries = [value] if isinstance(value, str | int | float) else list(value)
        items = []
        for entry in entries:
            if isinstance(entry, str) and "=" in entry:
                name, _, val = entry.partition("=")
                items.append((name.strip(), val.strip()))
            else:
                items.append((ALL_DEFAULT, entry))
    out: dict[str, float] = {}
    problems: list[str] = []
    # ir_measures' names ("nDCG@10", "R@5") are read as ours.
    items = [(name if name == ALL_DEFAULT else canonical_key(name), raw) for name, raw in items]
    for name, raw in items:
        try:
            v = _parse_threshold_value(raw)
        except (TypeError, ValueError):
            problems.append(f"{name if name != ALL_DEFAULT else 'threshold'}: not a number: {raw!r} (e.g. 0.7 or 70%)")
            continue
        if v != v:
            problems.append(f"{name}: not a number: {raw!r}")
            continue
        if name == ALL_DEFAULT:
            scale = (1.0, "min")
        else:
            scale = _threshold_scale(name)
            if scale is None:
                if name in _AT_K_HEADLINE:  # "mrr": the headline key, or the per-K form
                    k0 = int(ks[0]) if ks else 5
                    hint = f"; did you mean {_AT_K_HEADLINE[name]!r} (at the primary K) or '{name}@{k0}'?"
                else:
                    names = [n for n in threshold_metric_names() if not n.endswith("@K")]
                    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                problems.append(
                    f"unknown metric {name!r}{hint} (a metrics.json aggregate key such as recall_at_k_avg, "
                    f"mrr_avg, ndcg_at_k_avg, or a per-K key such as ndcg@10)"
                )
                continue
            base, sep, k = name.partition("@")
            if sep and ks is not None and int(k) not in {int(x) for x in ks}:
                problems.append(
                    f"{name}: the run measures K = {', '.join(str(x) for x in ks)} only; add --k {int(k)} or use "
                    f"{base}@{ks[0]}"
                )
                continue
        top = scale[0]
        if not 0.0 <= v <= top:
            pct = f" or {v:g}%" if top == 1.0 and 1.0 < v <= 100.0 else ""
            what = "threshold" if name == ALL_DEFAULT else name
            problems.append(f"{what}: {v:g} is off the metric's scale [0, {top:g}] (did you mean {v / 100:g}{pct}?)"
                            if pct else f"{what}: {v:g} is off the metric's scale [0, {top:g}]")
            continue
        out[name] = v
    if problems:
        raise ValueError("; ".join(problems))
    return out


def _measured(agg: Mapping[str, Any], name: str) -> tuple[float | None, int]:
    """(value, n) of `name` in an aggregate_metrics cell; (None, 0) when not there."""
    base, sep, k = name.partition("@")
    if sep:
        block = (agg.get("at_k") or {}).get(k)
        if not isinstance(block, Mapping) or base not in block:
            return None, 0
        n = (block.get("n_by_metric") or {}).get(base, block.get("n", 0))
        return _number(block.get(base)), int(n or 0)
    if name in _OPERATIONAL:
        op = agg.get("operational_metrics") or {}
        return _number(op.get(name)), int(op.get("n") or 0)
    n = (agg.get("n") or {}).get(name)
    return _number(agg.get(name)), int(n or 0) if isinstance(n, int | float) else 0


def threshold_check(metrics: Mapping[str, Any], thresholds: Mapping[str, float]) -> dict[str, Any]:
    """Check a run's metrics against absolute thresholds (issue 13 item 4).

    A named metric passes when value >= threshold ("min"; value <= threshold for a
    lower-is-better rate, "max"), with a 1e-9 tolerance, so 0.7 against 0.7 passes. A
    named metric the run did not measure (null, or n = 0) fails: "not measured" is never
    a pass. The bare form ("*": 0.7) applies to each DEFAULT_THRESHOLD_METRICS the run
    measured and not named on its own; the ones it did not measure are listed in
    `not_measured` (no budget, no unanswerable case...) and fail nothing, but a bare
    threshold that found nothing measured at all fails.

    Args:
        metrics: metrics.json (or its aggregate_metrics).
        thresholds: {metric: threshold} as from parse_thresholds ("*" for the bare form).

    Returns:
        {"passed", "thresholds" (as given), "checked": [{metric, value, n, threshold,
        direction, passed}], "not_measured": [{metric, threshold, reason}], "failures":
        [one line each]}.
    """
    agg = _aggregate(metrics)
    named = [(name, float(t)) for name, t in thresholds.items() if name != ALL_DEFAULT]
    bare = thresholds.get(ALL_DEFAULT)
    explicit = {name for name, _ in named}
    wanted: list[tuple[str, float, bool]] = [(name, t, True) for name, t in named]
    if bare is not None:
        wanted = [(name, float(bare), False) for name in DEFAULT_THRESHOLD_METRICS if name not in explicit] + wanted
    checked: list[dict[str, Any]] = []
    not_measured: list[dict[str, Any]] = []
    failures: list[str] = []
    for name, t, strict in wanted:
        scale = _threshold_scale(name) or (1.0, "min")
        direction = scale[1]
        value, n = _measured(agg, name)
        if value is None or n == 0:
            reason = _NOT_MEASURED_HINT.get(name, "null or n = 0 in this run")
            not_measured.append({"metric": name, "threshold": t, "reason": reason})
            if strict:
                failures.append(f"{name}: not measured by this run ({reason}); threshold {t:g} cannot pass")
            continue
        ok = value >= t - _EPS if direction == "min" else value <= t + _EPS
        checked.append(
            {"metric": name, "value": value, "n": n, "threshold": t, "direction": direction, "passed": ok}
        )
        if not ok:
            word = "below" if direction == "min" else "above"
            failures.append(f"{name} {value:.4g} is {word} the threshold {t:g} (n = {n})")
    bare_names = {name for name, _, strict in wanted if not strict}
    if bare_names and not any(c["metric"] in bare_names for c in checked):
        failures.append(
            f"threshold {float(bare):g}: none of {', '.join(DEFAULT_THRESHOLD_METRICS)} was measured by this run"
        )
    return {
        "passed": not failures,
        "thresholds": dict(thresholds),
        "checked": checked,
        "not_measured": not_measured,
        "failures": failures,
    }
