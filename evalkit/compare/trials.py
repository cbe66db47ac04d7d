"""Trials (`run_eval --trials N`, Evalite's `trialCount`): every case asked N times.

A stochastic pipeline (an LLM rewriting the query, a sampled answer, a nondeterministic
ANN index) gives another number each time it runs. Asking each case N times shows how far
the numbers move: per metric, its value in each trial, their mean and sample standard
deviation, and how many cases changed outcome between trials (the flake rate).

Each answer is one results.jsonl record with its `trial` (1..N); (test_case_id, trial) is
the record's key. metrics.json's cells pool every record, so a mean there is the mean over
all N x cases answers (equal to the mean of the per-trial means when no trial failed);
`trials` holds the per-trial view built here. compare_runs pairs cases on their per-case
trial mean (`evalkit.compare.cases.CaseTable`). Definitions: EVAL.md "Trials".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from evalkit.metrics.registry import label_of, shown_in
from evalkit.store.runlog import Met

__all__ = ["HEADLINE", "TrialStats", "headline_rows", "trials_block"]

_IDS_SHOWN = 20
# Per-case values are means of 0/1 outcomes or judge scores: a difference this small is
# float noise from the same value computed twice, not a changed outcome.
_SAME = 1e-12


class TrialStats:
    """Streams a run's records; `result()` is metrics.json's `trials` block (None when no
    record has a `trial`, so single-trial runs are unchanged)."""

    def __init__(self, ks: Sequence[int]) -> None:
        # Imported here, once: compare's models are not needed to import this module.
        from evalkit.compare.cases import CaseTable
        from evalkit.metrics.aggregate import RecordTable

        self.ks = list(ks)
        self._record_table, self._case_table = RecordTable, CaseTable
        self.tables: dict[int, Any] = {}  # trial -> RecordTable (its metrics.json cell)
        self.cases: dict[int, Any] = {}  # trial -> CaseTable (its per-case values)
        self.n_records = 0

    def add(self, record: Mapping[str, Any]) -> None:
        trial = record.get("trial")
        if type(trial) is not int:
            return
        if trial not in self.tables:
            self.tables[trial] = self._record_table(self.ks)
            self.cases[trial] = self._case_table(self.ks, self.ks)
        self.tables[trial].add_record(record)
        self.cases[trial].add(record)
        self.n_records += 1

    def result(self) -> dict[str, Any] | None:
        if not self.tables:
            return None
        from evalkit.metrics.aggregate import flatten_cell
        from evalkit.metrics.keys import HEADLINE_AT_K, metric_key

        trials = sorted(self.tables)
        cells = [flatten_cell(self.tables[t].result()[Met.AGGREGATE]) for t in trials]
        flakes, flaky_ids, ids = self._flakes(trials)
        metrics: dict[str, Any] = {}
        for key in sorted({key for cell in cells for key in cell}):
            per_trial = [cell[key][0] if key in cell else None for cell in cells]
            got = [v for v in per_trial if v is not None]
            entry: dict[str, Any] = {
                "mean": math.fsum(got) / len(got) if got else None,
                # Sample standard deviation (ddof = 1) of the per-trial values: None below 2.
                "std": _sample_std(got),
                "min": min(got) if got else None,
                "max": max(got) if got else None,
                "per_trial": per_trial,
                "n": [cell[key][1] if key in cell else 0 for cell in cells],
            }
            # A headline mean is the primary K's @K metric: its flakes are that metric's.
            flake_key = metric_key(HEADLINE_AT_K[key], self.ks[0]) if key in HEADLINE_AT_K else key
            if flake_key in flakes:
                entry.update(flakes[flake_key])
            metrics[key] = entry
        counts = [self.tables[t].n for t in trials]
        return {
            "n_trials": len(trials),
            "trials": trials,
            "n_cases": len(ids),
            "n_records": self.n_records,
            "records_per_trial": counts,
            # Every case answered in every trial: otherwise per-trial values are over
            # different cases, and a pooled mean weighs cases unevenly.
            "complete": len(set(counts)) == 1 and counts[0] == len(ids),
            "n_flaky_cases": len(flaky_ids),
            "flake_rate": len(flaky_ids) / len(ids) if ids else None,
            "flaky_case_ids": sorted(flaky_ids)[:_IDS_SHOWN],
            "metrics": metrics,
        }

    def _flakes(self, trials: list[int]) -> tuple[dict[str, dict[str, Any]], set[str], list[str]]:
        """Per metric: cases scored in >= 2 trials whose values differ; and the ids of
        cases that differ on any metric."""
        tables = [self.cases[t] for t in trials]
        ids = sorted({cid for table in tables for cid in table.ids})
        pos = {cid: i for i, cid in enumerate(ids)}
        flaky_any = np.zeros(len(ids), dtype=bool)
        out: dict[str, dict[str, Any]] = {}
        for key in tables[0].keys:
            grid = np.full((len(ids), len(tables)), np.nan)
            for j, table in enumerate(tables):
                if len(table):
                    rows = np.fromiter((pos[cid] for cid in table.ids), dtype=np.intp, count=len(table))
                    grid[rows, j] = table.column(key)
            scored = np.count_nonzero(~np.isnan(grid), axis=1)
            compared = scored >= 2
            if not compared.any():
                continue
            sub = grid[compared]
            spread = np.nanmax(sub, axis=1) - np.nanmin(sub, axis=1)
            flaky = spread > _SAME
            flaky_any[np.flatnonzero(compared)[flaky]] = True
            n = int(compared.sum())
            out[key] = {"n_flaky": int(flaky.sum()), "n_cases_compared": n, "flake_rate": float(flaky.sum()) / n}
        return out, {ids[i] for i in np.flatnonzero(flaky_any)}, ids


# What the terminal and summary.md show of a `trials` block, in this order, when measured:
# the registry's `trials` metrics, with the latency percentiles (no registry entry) before the
# target's failures.
HEADLINE = (
    *(m.key for m in shown_in("trials") if m.block is None),
    "latency_p50_ms",
    "latency_p95_ms",
    *(m.key for m in shown_in("trials") if m.block is not None),
)


def headline_rows(block: Mapping[str, Any], k: int | None = None) -> list[tuple[str, str, str, str]]:
    """(metric, "mean ± std", per-trial values, flaky cases) for each HEADLINE metric measured;
    the metric by the registry's label at the run's primary K `k`."""
    rows = []
    metrics = block.get("metrics") or {}
    for key in HEADLINE:
        m = metrics.get(key)
        if not m or m.get("mean") is None:
            continue
        fmt = _fmt_ms if key.endswith("_ms") else _fmt
        spread = f"{fmt(m['mean'])} ± {fmt(m['std'])}" if m.get("std") is not None else fmt(m["mean"])
        per_trial = " / ".join(fmt(v) for v in m.get("per_trial") or [])
        flaky = "—" if "n_flaky" not in m else f"{m['n_flaky']}/{m['n_cases_compared']} ({m['flake_rate']:.0%})"
        rows.append((label_of(key, k), spread, per_trial, flaky))
    return rows


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _fmt_ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.0f} ms"


def _sample_std(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def trials_block(records: Iterable[Mapping[str, Any]], ks: Sequence[int]) -> dict[str, Any] | None:
    """metrics.json's `trials` block from a run's records (None when they have no `trial`)."""
    stats = TrialStats(ks)
    for record in records:
        stats.add(record)
    return stats.result()
