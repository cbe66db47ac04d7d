"""The failure stage of one case: where in the pipeline it went wrong, or `pass` (issue 30
item 7). EVAL.md, "Failure stages", is the spec; this docstring is the rule.

Checks, in order (the first that fails names the stage; a check whose value was not
measured is skipped, so the case falls through to the next):

1. `error`: the target gave no usable answer (`error` set, any kind, an empty answer
   included: the case's `error_rate` value).
2. An unanswerable case: abstained -> `pass`; answered -> `answered_unanswerable`;
   abstention unknown -> `unknown` (its only check was not measured).
3. An answerable case that abstained -> `abstained_answerable` (abstention unknown: skipped).
4. No gold supports -> `unlabeled` (the checks below need gold).
5. `retrieval_miss`: no gold support in the top K (recall_any@K = 0, K the primary K).
6. `not_cited`: retrieved, but no reference cites a gold support (attribution_hit false;
   a run without references has attribution null and skips this check).
7. `unsupported`: cited, but groundedness judged below `JUDGE_PASS` (3 of 5).
8. `incorrect`: supported, but correctness judged below `JUDGE_PASS`. (A judge that did not
   run, or failed, is skipped.)
9. `pass`.

A yes/no value may be a share over `--trials` (a case's mean over its trials): it counts as
yes when it is at least 0.5, the flips' reading of a value. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from evalkit.metrics.aggregate import extract_case
from evalkit.store.runlog import Cell

__all__ = ["JUDGE_PASS", "STAGES", "STAGE_CODE", "STAGE_LABELS", "case_stage", "record_stage"]

# Every stage, in the order the reports list them (rows and columns of compare's matrix);
# a stage's code is its index (CaseTable stores one signed byte per case).
STAGES = (
    "pass", "retrieval_miss", "not_cited", "unsupported", "incorrect", "abstained_answerable",
    "answered_unanswerable", "error", "unlabeled", "unknown",
)
STAGE_CODE = {name: code for code, name in enumerate(STAGES)}
STAGE_LABELS = {
    "pass": "pass",
    "retrieval_miss": "retrieval miss",
    "not_cited": "retrieved, not cited",
    "unsupported": "cited, unsupported",
    "incorrect": "supported, incorrect",
    "abstained_answerable": "abstained (answerable)",
    "answered_unanswerable": "answered (unanswerable)",
    "error": "target error",
    "unlabeled": "unlabeled",
    "unknown": "unknown",
}
# A judge score (0-5) at or above this passes: 3 is the rubric's "some unsupported or
# citations missing", 2 "major claims unsupported or uncited".
JUDGE_PASS = 3.0


def _yes(v: float | None) -> bool | None:
    return None if v is None or math.isnan(v) else v >= 0.5


def _fails(score: float | None) -> bool:
    """A judge score (0-5) below JUDGE_PASS; not judged (None, NaN) never fails."""
    return score is not None and not math.isnan(score) and score < JUDGE_PASS


def case_stage(
    *,
    error: float,
    answerable: bool,
    labeled: bool,
    abstained: float | None,
    recall_hit: float | None,
    cited: float | None,
    groundedness: float | None,
    correctness: float | None,
) -> int:
    """The stage code (an index into STAGES) of one case, from its reduced values.

    Args:
        error: 1 if the target gave no usable answer (the case's error_rate value), else 0.
        answerable: the case's `answerable` label.
        labeled: the case has gold supports.
        abstained: 1 abstained, 0 answered; None or NaN: unknown.
        recall_hit: recall_any at the primary K (1 hit, 0 miss); None or NaN: not measured.
        cited: attribution_hit (1 a reference cites a gold support); None or NaN: not measured.
        groundedness, correctness: judge scores 0-5; None or NaN: not judged.

    A value may be a mean over trials: yes/no values count as yes at >= 0.5 (see module doc).
    """
    if _yes(error):
        return STAGE_CODE["error"]
    decided = _yes(abstained)
    if not answerable:
        if decided is None:
            return STAGE_CODE["unknown"]
        return STAGE_CODE["pass" if decided else "answered_unanswerable"]
    if decided:
        return STAGE_CODE["abstained_answerable"]
    if not labeled:
        return STAGE_CODE["unlabeled"]
    if _yes(recall_hit) is False:
        return STAGE_CODE["retrieval_miss"]
    if _yes(cited) is False:
        return STAGE_CODE["not_cited"]
    if _fails(groundedness):
        return STAGE_CODE["unsupported"]
    if _fails(correctness):
        return STAGE_CODE["incorrect"]
    return STAGE_CODE["pass"]


def record_stage(record: Mapping[str, Any], k: int) -> str:
    """The stage of one results.jsonl record at K (the run's primary K), by `case_stage` over
    the values `aggregate.extract_case` reduces it to (the values metrics.json averages)."""
    x = extract_case(record, [k])
    values = x["values"]
    abstention = x["abstention"]
    return STAGES[case_stage(
        error=float(x["error_kind"] is not None),
        answerable=x["answerable"],
        labeled=not x["unlabeled"],
        abstained=None if abstention is None or abstention[1] is None else float(abstention[1]),
        recall_hit=x[Cell.AT_K][str(k)]["recall_any"],
        cited=values.get("attribution_hit_rate"),
        groundedness=values.get("groundedness_avg"),
        correctness=values.get("correctness_avg"),
    )]
