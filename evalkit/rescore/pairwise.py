"""Asking the pairwise judge (judges/pairwise.py) about two stored runs' answers: every case both
runs answered, both ways round, its verdicts appended to run b's pairwise_judge.jsonl
(compare/pairwise.py keeps and tallies them beside the human side-by-side reviews). A rescore:
it reads two runs and judges, above both judges and compare.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from evalkit.compare.pairwise import (
    JUDGE_PREFIX,
    SCHEMA_VERSION,
    answer_sha256,
    append_judge_verdicts,
)
from evalkit.errors import InputError, Problem
from evalkit.judges.pairwise import judge_pairs, pairwise_llm
from evalkit.store.runlog import Rec

__all__ = ["judge_runs"]


def _answered(record: Mapping[str, Any]) -> bool:
    answer = record.get(Rec.ANSWER)
    return not record.get("error") and isinstance(answer, str) and bool(answer.strip())


def _by_case(source: Any) -> dict[str, dict[str, Any]]:
    """case id -> its record (a --trials run's first trial: one answer per case, as a pair shows it)."""
    out: dict[str, dict[str, Any]] = {}
    for r in source.iter_records():
        cid = r.get(Rec.CASE_ID)
        if cid is not None and (r.get("trial") in (None, 1) or str(cid) not in out):
            out[str(cid)] = r
    return out


def judge_runs(a: Any, b: Any, spec: str, *, concurrency: int = 4) -> dict[str, Any]:
    """Ask the pairwise judge `spec` (`judges.pairwise.pairwise_llm`: heuristic, openai:MODEL...)
    which of run a's and run b's answers is better on every case both answered (`a`, `b`:
    `compare.sources.RunSource`s; b a run folder), and append its verdicts to run b's
    pairwise_judge.jsonl. Returns {judge, n_pairs, n_failed} (a pair whose judgment failed
    either way round has no line).

    Raises:
        InputError: run b is not a run folder; JudgeConfigError: a judge that cannot be built.
    """
    if b.run is None or a.run_id is None:
        raise InputError(Problem("--pairwise-judge needs run folders (the verdicts are kept in run b's)",
                                 field="--pairwise-judge"))
    llm, name, version = pairwise_llm(spec)
    ra, rb = _by_case(a), _by_case(b)
    pairs = [(cid, ra[cid], rb[cid]) for cid in sorted(set(ra) & set(rb)) if _answered(ra[cid]) and _answered(rb[cid])]
    verdicts = judge_pairs(pairs, llm, concurrency=concurrency)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    lines = [
        {"schema_version": SCHEMA_VERSION, Rec.CASE_ID: v.case_id, "run_a": a.run_id, "run_b": b.run_id,
         "answer_a_sha256": answer_sha256(ra[v.case_id]), "answer_b_sha256": answer_sha256(rb[v.case_id]),
         "choice": v.choice, "reviewer": JUDGE_PREFIX + name, "reviewed_at": now, "first": v.first,
         "swapped": v.swapped, "flipped": v.flipped, "prompt_version": version, "reasoning": v.reasoning}
        | ({"verbosity": v.verbosity} if v.verbosity is not None else {})
        for v in verdicts if v.choice is not None
    ]
    append_judge_verdicts(b.run, lines)
    return {"judge": name, "n_pairs": len(pairs), "n_failed": len(pairs) - len(lines)}
