"""What a run returns: `RunResult` (metrics, gate, verdicts), and `RunInterrupted` for Ctrl-C.

`RunResult.data` is seed 001's result dict, built by `seed_data` from metrics.json.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.derive.health import UNMEASURABLE
from evalkit.gate.decision import gate_exit_code
from evalkit.metrics.keys import ir_measures_values
from evalkit.metrics.registry import METRICS, Metric
from evalkit.store.runlog import Cell, Met

__all__ = ["RunInterrupted", "RunResult", "seed_data"]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run. What was written is kept; `--resume run_id` finishes the run."""

    def __init__(self, run_id: str, run_dir: Path, results_dir: str):
        self.run_id = run_id
        self.run_dir = run_dir
        self.results_dir = results_dir
        super().__init__(f"interrupted run {run_id}")

    @property
    def resume_command(self) -> str:
        """The command that finishes the run, shell-quoted so that pasting it runs only that."""
        cmd = f"python scripts/run_eval.py --resume {shlex.quote(self.run_id)}"
        if Path(self.results_dir) != Path("results"):
            cmd += f" --results-dir {shlex.quote(str(self.results_dir))}"
        return cmd


@dataclass
class RunResult:
    """What `run_eval()` returns.

    Attributes:
        run_id: the run folder's name.
        run_dir: path of `results/<run_id>/`.
        metrics: the whole metrics.json body.
        data: seed 001's result dict, at the primary K, with the meanings its keys have in
            every results.jsonl record (seed 000): `recall_at_k` is Recall@K (any), the hit
            rate, = the mean of the records' `retrieval_metrics.recall_at_k` = metrics.json
            `recall_at_k_avg`; `precision_at_k` (`precision_at_k_avg`), `mrr` (`mrr_avg`), `k`.
            Beside them every @K metric by its registry name: `recall_any` (= recall_at_k),
            `recall_frac` (B.O.B's recall, |gold hit in top K| / |gold|, `recall_frac_avg`),
            `recall_all`, `precision`, `mrr`, `ndcg`. EVAL.md, "One number, its names", lists
            every name of each. Every other aggregate is in `metrics["aggregate_metrics"]`.
        gate: the gate object ({passed, allowed, regressions, ...}) or None without --baseline.
        success: False when the gate failed (without --allow-regressions), or the run is
            incomplete: the target failed on more than `max_error_rate` of the cases.
            Also False when an absolute threshold failed (`thresholds_failed`).
        thresholds: metrics.json's `thresholds` ({passed, checked, not_measured, failures})
            when thresholds were given (`thresholds=` / --threshold), else None.
        n_cases / n_errors: records in the run / records with a target error.
        error_rate / max_error_rate: n_errors / n_cases, and the share allowed.
        warnings: metrics.json's `warnings` (runs that measured less than they seem to).
        resumed / repaired_tail / skipped: whether this call resumed a run, cut a torn
            last line, and how many cases were already done.
        judge: the judge's describe() ({"provider": None} for retrieval-only).
        trials: metrics.json's `trials` (per-trial values, mean, std, flake rates) with
            `trials=N` > 1, else None. n_cases then counts records (cases x trials).
        stopped: when the target failed every request and the run stopped asking
            (`evalkit.net.breaker`): {"after_failures", "last", "n_not_asked", "message"};
            the run is then incomplete and resumable. None otherwise.
    """

    run_id: str
    run_dir: Path
    metrics: dict[str, Any]
    data: dict[str, Any]
    gate: dict[str, Any] | None
    success: bool
    n_cases: int = 0
    n_errors: int = 0
    resumed: bool = False
    repaired_tail: bool = False
    skipped: int = 0
    judge: dict[str, Any] | None = None
    max_error_rate: float = 0.0
    warnings: list[dict[str, Any]] = field(default_factory=list)
    thresholds: dict[str, Any] | None = None  # metrics.json "thresholds" (issue 13), None without --threshold
    allow_format_mismatch: bool = False
    trials: dict[str, Any] | None = None  # metrics.json "trials" (issue 13), None without --trials N > 1
    stopped: dict[str, Any] | None = None  # the circuit breaker stopped the run (issue 28), else None

    @property
    def error_rate(self) -> float:
        return self.n_errors / self.n_cases if self.n_cases else 0.0

    @property
    def incomplete(self) -> bool:
        """True when the target failed on more cases than --max-error-rate allows: the
        metrics score those cases as misses, so they do not describe the chatbot. Also True
        when the run stopped asking a target that failed every request (`stopped`)."""
        return self.stopped is not None or self.error_rate > self.max_error_rate + 1e-12

    @property
    def unmeasurable(self) -> bool:
        """True when not one retrieved chunk matched any gold support (the run warning
        `retrieval_unmeasurable`): the run did not measure retrieval, usually because the
        answers and the labels are in different forms. Silenced by --allow-format-mismatch."""
        return not self.allow_format_mismatch and any(w.get("kind") == UNMEASURABLE for w in self.warnings)

    @property
    def thresholds_failed(self) -> bool:
        """True when an absolute --threshold failed (below it, or not measured). Not
        silenced by --allow-regressions, which is about the baseline gate."""
        return bool(self.thresholds and not self.thresholds.get("passed"))

    @property
    def gate_failed(self) -> bool:
        """True when the gate failed (regressions, nothing compared, broken invariants) or
        found not enough evidence (exit 4, unless --on-inconclusive pass), and that was not
        allowed."""
        return bool(self.gate and gate_exit_code(self.gate) != 0 and not self.gate.get("allowed"))

    def to_json(self) -> dict[str, Any]:
        """The object `run_eval.py --json` prints (DESIGN.md §9)."""
        gate = self.gate or {"passed": True, "regressions": []}
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            Met.AGGREGATE: self.metrics.get(Met.AGGREGATE, {}),
            "ir_measures": ir_measures_values((self.metrics.get(Met.AGGREGATE) or {}).get(Cell.AT_K)),
            "gate": {
                "passed": bool(gate["passed"]),
                "outcome": gate.get("outcome", "pass" if gate["passed"] else "fail"),
                "headline": gate.get("headline"),
                "regressions": list(gate["regressions"]),
                "failures": list(gate.get("failures") or []),
                "skipped": list(gate.get("skipped") or []),
            },
            "success": self.success,
            "error_rate": self.error_rate,
            "incomplete": self.incomplete,
            "unmeasurable": self.unmeasurable,
            "thresholds": self.thresholds,
            "trials": self.trials,
            "warnings": list(self.warnings),
        }


def seed_data(metrics: Mapping[str, Any], k: int) -> dict[str, Any]:
    """`RunResult.data`: seed 001's keys at the primary K, each meaning what it means in every
    results.jsonl record (seed 000, the main spec; issue 37: `recall_at_k` here was B.O.B's
    recall while each record's was the hit rate, one name for two numbers), then every @K
    metric by its registry name. Each value is the metrics.json `aggregate_metrics.at_k[K]`
    entry (else the cell's headline key); the whole metrics.json is `.metrics`.
    """
    agg = metrics.get(Met.AGGREGATE) or {}
    cell = (agg.get(Cell.AT_K) or {}).get(str(k)) or {}

    def value(m: Metric) -> Any:
        v = cell.get(m.at_k) if m.at_k in cell else agg.get(m.key)
        return v.get("value", v.get("mean")) if isinstance(v, Mapping) else v

    by_name = {m.at_k: value(m) for m in METRICS if m.at_k is not None}
    return {
        "recall_at_k": by_name["recall_any"],  # the hit rate, as every record's recall_at_k: recall_at_k_avg
        "precision_at_k": by_name["precision"],  # |relevant ∩ retrieved@k| / k: precision_at_k_avg
        "mrr": by_name["mrr"],  # mrr_avg
        "k": k,  # aggregate_metrics.k, the primary K
        **by_name,  # recall_any, recall_frac (B.O.B's recall: recall_frac_avg), recall_all, precision, ndcg
    }
