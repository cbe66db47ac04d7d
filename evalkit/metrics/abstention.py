"""Abstention outcomes per case and their aggregate (seed 000 §3.C, plus false abstentions).

Positive class = "abstained". Unanswerable cases should abstain, answerable ones should
answer. EVAL.md, section "Abstention", is the spec.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["AbstentionTally", "aggregate_abstention", "score_case_abstention"]


def score_case_abstention(answerable: bool, abstained: bool | None) -> dict:
    """Per-case abstention outcome.

    Returns:
        {"abstained": abstained,
         "hallucinated": unanswerable and answered (None for answerable cases),
         "false_abstention": answerable and abstained (None for unanswerable cases)}.
        Every derived value is None when `abstained` is None (unknown).
    """
    if abstained is None:
        return {"abstained": None, "hallucinated": None, "false_abstention": None}
    abstained = bool(abstained)
    return {
        "abstained": abstained,
        "hallucinated": None if answerable else not abstained,
        "false_abstention": abstained if answerable else None,
    }


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


class AbstentionTally:
    """Streaming confusion counts {answerable, unanswerable} x {answered, abstained}."""

    def __init__(self) -> None:
        self.counts = {
            "answerable": {"answered": 0, "abstained": 0},
            "unanswerable": {"answered": 0, "abstained": 0},
        }
        self.n_unknown = 0

    def add(self, answerable: bool, abstained: bool | None) -> None:
        """Count one case; `abstained=None` is counted as unknown and excluded from rates."""
        if abstained is None:
            self.n_unknown += 1
            return
        row = self.counts["answerable" if answerable else "unanswerable"]
        row["abstained" if abstained else "answered"] += 1

    def result(self) -> dict:
        """Rates with their n; a rate over no cases is None.

        - abstention_accuracy = UA / (UA + UN)        (unanswerable cases)
        - hallucination_rate_unanswerable = UN / (UA + UN)
        - false_abstention_rate = AA / (AA + AN)     (answerable cases)
        - abstention_precision = UA / (UA + AA)       (cases that abstained)
        - abstention_recall = UA / (UA + UN)          (= abstention_accuracy)
        - abstention_f1 = 2PR / (P + R), None when P or R is None or P + R = 0
        - abstention_decision_accuracy = (UA + AN) / all known
        with U/A = unanswerable/answerable case and A/N = abstained/answered.
        """
        aa = self.counts["answerable"]["abstained"]
        an = self.counts["answerable"]["answered"]
        ua = self.counts["unanswerable"]["abstained"]
        un = self.counts["unanswerable"]["answered"]
        prec = _rate(ua, ua + aa)
        rec = _rate(ua, ua + un)
        f1 = None if prec is None or rec is None or prec + rec == 0 else 2 * prec * rec / (prec + rec)
        known = aa + an + ua + un
        return {
            "abstention_accuracy": rec,
            "hallucination_rate_unanswerable": _rate(un, ua + un),
            "false_abstention_rate": _rate(aa, aa + an),
            "abstention_precision": prec,
            "abstention_recall": rec,
            "abstention_f1": f1,
            "abstention_decision_accuracy": _rate(ua + an, known),
            "abstention_confusion": {k: dict(v) for k, v in self.counts.items()},
            "n": {
                "abstention_accuracy": ua + un,
                "hallucination_rate_unanswerable": ua + un,
                "false_abstention_rate": aa + an,
                "abstention_precision": ua + aa,
                "abstention_recall": ua + un,
                "abstention_f1": ua + aa + un,
                "abstention_decision_accuracy": known,
            },
            "n_abstention_unknown": self.n_unknown,
        }


def aggregate_abstention(items: Iterable[tuple[bool, bool | None]]) -> dict:
    """Aggregate (answerable, abstained) pairs into the rates of `AbstentionTally.result`.

    Args:
        items: one (answerable, abstained) pair per case; abstained None = unknown.

    Returns:
        The dict described in `AbstentionTally.result`.
    """
    tally = AbstentionTally()
    for answerable, abstained in items:
        tally.add(answerable, abstained)
    return tally.result()
