"""Canonical metric keys: `recall_any@5`, `ndcg@10`, `mrr@5`, `groundedness_avg`.

Every module that names a metric at a K builds the name here and parses it here,
so compare.py and report/ never split strings themselves.
"""

from __future__ import annotations

import re

from evalkit.metrics.expectations import LOWER_IS_BETTER_EXPECTATIONS

_KEY = re.compile(r"^(?P<name>[a-z_][a-z0-9_/]*)(?:@(?P<k>\d+))?$")

# A cell's headline name -> the @K metric it holds at the primary K.
HEADLINE_AT_K = {
    "recall_at_k_avg": "recall_any",
    "mrr_avg": "mrr",
    "precision_at_k_avg": "precision",
    "ndcg_at_k_avg": "ndcg",
    "recall_all_avg": "recall_all",
    "recall_frac_avg": "recall_frac",
}
# Rates where less is better (the gate, compare_runs and thresholds read them as ceilings).
LOWER_IS_BETTER = frozenset(
    {"scope_miss_rate", "hallucination_rate_unanswerable", "false_abstention_rate", "error_rate", "timeout_rate",
     "empty_response_rate", *LOWER_IS_BETTER_EXPECTATIONS}
)


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
