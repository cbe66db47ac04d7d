"""Scoring a stored run with the project's own metrics: rubric judges and python: scorers
(judges/rubric.py) write each record's `custom_scores`, config.json their definitions, and the
run is derived again. A rescore, like answers.py: it sits above both judges and derive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalkit.derive import RunFacts, rederive
from evalkit.judges.rubric import PythonScorer, Rubric, score_records
from evalkit.metrics.custom import CUSTOM_FAILED, CUSTOM_METRICS
from evalkit.store.runs import config_hash

__all__ = ["score_run_custom"]


def score_run_custom(
    run: Any, rubrics: Sequence[Rubric] = (), scorers: Sequence[PythonScorer] = (), *, llm: Any = None,
    concurrency: int = 4, samples: int = 1,
) -> dict[str, Any]:
    """Score a stored run (`store.runs.RunDir`) with rubrics and scorers: each record gets its
    `custom_scores`, config.json the metrics' definitions (`custom_metrics`, beside those of
    earlier rubrics), and metrics.json is derived again from the records (its
    `custom_metrics` block, the `--threshold` floors and the baseline gate judged anew), all
    as one update. `samples`: --judge-samples (judges.rubric.score_records). Returns
    metrics.json as written."""
    records = run.read_results()
    metrics = score_records(records, rubrics, scorers, llm=llm, concurrency=concurrency, samples=samples)
    cfg = run.read_config()
    defined = dict(cfg.get(CUSTOM_METRICS) or {})
    defined.update({m.name: m.definition() for m in metrics})
    cfg[CUSTOM_METRICS] = dict(sorted(defined.items()))
    # As a re-judged run does: what scored its numbers is part of its config, so "same
    # config_hash => same metrics" stays true.
    if isinstance(cfg.get("hashed"), dict):
        cfg["hashed"][CUSTOM_METRICS] = cfg[CUSTOM_METRICS]
        cfg["config_hash"] = config_hash(cfg["hashed"])
    facts = RunFacts.stored(run, cfg, run.read_metrics() or {})
    # The run's end could not score them (a scorer raised: runner._score_custom); now it is.
    facts.pre_run_warnings = [w for w in facts.pre_run_warnings if w.get("kind") != CUSTOM_FAILED]
    written, _ = rederive(run, facts, records, config=cfg)
    return written
