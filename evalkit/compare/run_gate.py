"""run_eval's `--baseline` gate by the merge decision (issue 36): the run against its baseline
run through compare_runs, kept in metrics.json's `gate` object in the shape every reader of
that object knows (`passed`, `allowed`, `regressions`, `failures`, `skipped`, `compared`,
`invariants`, `baseline_run_id`), plus what the decision adds (`mode`, `outcome`,
`exit_code`, `headline`, `inconclusive`, `verdict`). One decision, one implementation:
`compare_runs.py BASELINE RUN` says the same words and exits with the same code
(`gate.decision.gate_exit_code` reads it back). It runs compare_runs, so it lives in compare/,
above the deciders in gate/."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.compare.sources import RunSource, open_source
from evalkit.gate.thresholds import Thresholds
from evalkit.store.runlog import Met
from evalkit.store.runs import RunDir

__all__ = ["verdict_gate"]

# The paired rows' bootstrap is not part of the decision (the verdict draws nothing): a
# smaller count keeps the gate quick at large n without changing a word of it.
_RESAMPLES = 1000


def verdict_gate(
    run: RunDir, metrics: Mapping[str, Any], config: Mapping[str, Any] | None, baseline: RunDir, *,
    thresholds: Thresholds, on_inconclusive: str, allow_regressions: bool, ignore_invariants: bool,
    allow_missing_metrics: bool, same_corpus: bool, allow_label_change: bool = False,
) -> dict[str, Any] | None:
    """The gate object of `run` (its `metrics`, not yet on disk) against `baseline`, decided by
    the verdict; None when the baseline has no per-case records (the threshold gate decides)."""
    from evalkit.compare.compute import compare_runs

    a = open_source(baseline, flag="--baseline")
    if not a.has_records:
        return None
    b = RunSource(run_id=run.run_id, kind="run", path=run.path, metrics=dict(metrics),
                  config=dict(config) if config is not None else None, run=run)
    c = compare_runs(
        a, b, gate="verdict", on_inconclusive=on_inconclusive,  # type: ignore[arg-type]
        thresholds=thresholds, allow_regressions=allow_regressions, ignore_invariants=ignore_invariants,
        allow_missing_metrics=allow_missing_metrics, same_corpus=same_corpus, allow_label_change=allow_label_change,
        show_drift=0, top_chunks=0,
        resamples=_RESAMPLES,
    )
    g, d = c.gate, c.decision
    assert d is not None
    return {
        "mode": "verdict",
        "passed": g.passed,
        "outcome": g.outcome,
        "exit_code": d.exit_code,
        "on_inconclusive": d.on_inconclusive,
        "headline": d.headline,
        "allowed": bool(allow_regressions),
        "nothing_compared": g.nothing_compared,
        "baseline_run_id": a.run_id,
        "k": g.k,
        "thresholds": g.thresholds,
        "preset": None,
        Met.INVARIANTS: {"ok": c.invariants.ok, "violations": list(c.invariants.violations),
                       "ignored": c.invariants.ignored, "warnings": list(c.invariants.warnings)},
        "regressions": [{**detail, "message": line} for detail, line in zip(g.regression_details, g.regressions, strict=False)],
        "inconclusive": list(g.inconclusive),
        "compared": list(g.compared),
        "skipped": list(g.skipped),
        "slices": None,
        "failures": list(g.failures),
        "verdict": {
            "verdict": c.verdict.verdict, "summary": c.verdict.summary, "family_size": c.verdict.family_size,
            "confidence": c.verdict.confidence,
            "metrics": [{"metric": m.metric, "k": m.k, "label": m.label, "verdict": m.verdict, "gated": m.gated,
                         "delta": m.delta, "ci": m.ci, "margin": m.margin, "n": m.n} for m in c.verdict.metrics],
        },
    }
