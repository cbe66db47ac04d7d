"""Canonical metric keys: `recall_any@5`, `ndcg@10`, `mrr@5`, `groundedness_avg`.

Every module that names a metric at a K builds the name here and parses it here,
so compare.py and report/ never split strings themselves.
"""

from __future__ import annotations

import re

from evalkit.metrics.registry import METRICS

_KEY = re.compile(r"^(?P<name>[a-z_][a-z0-9_/]*)(?:@(?P<k>\d+))?$")

# The lists below are read off the registry (evalkit.metrics.registry), never kept by hand.
# A cell's headline name -> the @K metric it holds at the primary K.
HEADLINE_AT_K = {m.key: m.at_k for m in METRICS if m.at_k is not None}
# Rates where less is better (the gate, compare_runs and thresholds read them as ceilings).
LOWER_IS_BETTER = frozenset(m.key for m in METRICS if m.direction == "lower")


# The metrics compare_runs reports as one row each (not @K), in report order after the @K
# metrics; `--expect-order` and the matrix accept exactly these (and the @K names). One list,
# so that a metric compare reports is never refused as unknown by the matrix.
PLAIN_METRIC_ORDER: tuple[str, ...] = tuple(m.key for m in METRICS if m.compared and m.at_k is None)


# ir_measures' names (terrierteam/ir_measures, after trec_eval's measures) of the @K metrics,
# as in `R@10`: recall_frac is R (the fraction of relevant items retrieved), recall_any is
# Success (a hit), precision P, mrr RR (reciprocal rank, cut at K), ndcg nDCG. One
# difference: our nDCG's gain is 2^rel - 1 (ranx's ndcg_burges), theirs rel; the two agree
# on binary relevance. recall_all has none. Anchor matching credits each gold support once
# (EVAL.md "Anchors").
IR_MEASURES = {m.at_k: m.ir_measure for m in METRICS if m.at_k is not None and m.ir_measure is not None}
_FROM_IR_MEASURES = {v.casefold(): k for k, v in IR_MEASURES.items()}


def ir_measure_name(name: str, k: int | None) -> str | None:
    """The ir_measures name of an @K metric: ir_measure_name("ndcg", 10) -> "nDCG@10"; None
    for a metric without one (recall_all, the means that are not @K)."""
    short = IR_MEASURES.get(name)
    return None if short is None or k is None else f"{short}@{int(k)}"


def ir_measures_values(at_k: object) -> dict[str, float | None]:
    """A cell's `at_k` blocks ({"10": {"ndcg": ..}}) by ir_measures name ({"nDCG@10": ..}),
    for the `--json` outputs; sorted by K, then name."""
    out: dict[str, float | None] = {}
    if not isinstance(at_k, dict):
        return out
    for k in sorted(at_k, key=lambda x: int(x) if str(x).isdigit() else 0):
        block = at_k[k]
        if not isinstance(block, dict) or not str(k).isdigit():
            continue
        for name in IR_MEASURES:
            if name in block:
                out[f"{IR_MEASURES[name]}@{int(k)}"] = block[name]
    return out


def canonical_key(key: str) -> str:
    """A metric key given in either vocabulary as evalkit's: "nDCG@10" -> "ndcg@10",
    "RR@5" -> "mrr@5", "Success@10" -> "recall_any@10"; anything else unchanged."""
    name, sep, k = key.strip().partition("@")
    ours = _FROM_IR_MEASURES.get(name.casefold()) if sep else None
    return f"{ours}@{k}" if ours is not None and k.isdigit() else key


def metric_key(name: str, k: int | None = None) -> str:
    """Build a canonical key: metric_key("recall_any", 5) -> "recall_any@5"."""
    if not _KEY.match(name) or "@" in name:
        raise ValueError(f"not a metric name: {name!r}")
    return name if k is None else f"{name}@{int(k)}"


def parse_metric_key(key: str) -> tuple[str, int | None]:
    """Inverse of metric_key: "ndcg@10" -> ("ndcg", 10); "mrr_avg" -> ("mrr_avg", None)."""
    m = _KEY.match(key)
    if not m:
        raise ValueError(f"not a metric key: {key!r}")
    k = m.group("k")
    return m.group("name"), (int(k) if k is not None else None)
