"""The programmatic door: `from evalkit import run_eval` (seed 001's "Programmatic API").

    from evalkit import run_eval

    result = run_eval(eval_set="eval_set.jsonl", k=5)
    if result.success:
        print(f"Recall@5: {result.data['recall_at_k']:.2f}")   # the hit rate, as in every record
        print(f"Recall_frac@5: {result.data['recall_frac']:.2f}")   # B.O.B's recall
        print(f"Precision@5: {result.data['precision_at_k']:.2f}")
        print(f"MRR: {result.data['mrr']:.2f}")

`result.data` has seed 001's keys with seed 000's meaning: `recall_at_k` is Recall@K (any),
the hit rate, the mean of every results.jsonl record's `recall_at_k` (metrics.json's
`recall_at_k_avg`). B.O.B's recall, |relevant ∩ retrieved@k| / |relevant|, is
`result.data['recall_frac']`: every @K metric is there by its registry name too.
Keyword arguments are run_eval.py's flags with `-` -> `_` (see evalkit.config.RunSettings);
`k` may be one int or a list (the first is the primary K); `params` is a dict;
`golden_path` is accepted as B.O.B's name for `eval_set`. Nothing is printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.run.result import RunResult
from evalkit.run.runner import arun, run
from evalkit.run.session import ProgressSink

__all__ = ["arun_eval", "run_eval"]


def _values(
    eval_set: str | Path | Sequence[str | Path] | None,
    k: int | Sequence[int] | None,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    golden = kwargs.pop("golden_path", None)
    if eval_set is None:
        eval_set = golden
    values = dict(kwargs)
    if eval_set is not None:
        values["eval_set"] = [eval_set] if isinstance(eval_set, str | Path) else list(eval_set)
    if k is not None:
        values["k"] = [k] if isinstance(k, int) else list(k)
    if "json" in values:
        values["json_output"] = values.pop("json")
    if "output_dir" in values:
        values["results_dir"] = values.pop("output_dir")
    for key in ("results_dir", "vault"):
        if isinstance(values.get(key), Path):
            values[key] = str(values[key])
    return values


def run_eval(
    eval_set: str | Path | Sequence[str | Path] | None = None,
    *,
    k: int | Sequence[int] | None = None,
    progress: ProgressSink | None = None,
    **kwargs: Any,
) -> RunResult:
    """Run an eval set against a target and write `results/<run_id>/`.

    Args:
        eval_set: a .jsonl file, several, or a folder of per-domain .jsonl files
            (default eval_set.jsonl).
        k: cut-off(s); the first is the primary K (default 5).
        progress: optional progress sink (see evalkit.run.ProgressSink).
        **kwargs: any other run_eval.py flag, e.g. api_url=, retrieval_only=True,
            folder_mode="on", results_dir=, baseline=, resume=.

    Returns:
        RunResult: `.success`, `.data` (seed 001's dict at the primary K: recall_at_k,
        the hit rate = metrics.json's recall_at_k_avg, precision_at_k, mrr, k; plus every
        @K metric by its registry name: recall_any, recall_frac (B.O.B's recall), ...),
        `.metrics` (metrics.json), `.run_dir`, `.run_id`, `.gate`.

    Raises:
        evalkit.errors.InputError: bad eval set or settings (nothing is written).
        RunInterrupted: Ctrl-C; the run can be finished with `run_eval(resume=run_id)`.
    """
    return run(_values(eval_set, k, kwargs), progress)


async def arun_eval(
    eval_set: str | Path | Sequence[str | Path] | None = None,
    *,
    k: int | Sequence[int] | None = None,
    progress: ProgressSink | None = None,
    **kwargs: Any,
) -> RunResult:
    """`run_eval` for callers already inside an event loop (notebooks, async apps)."""
    return await arun(_values(eval_set, k, kwargs), progress)
