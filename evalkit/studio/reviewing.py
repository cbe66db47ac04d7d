"""Reviewing generated candidates in the browser, through `authoring.review.ReviewSession`.

The same review as `evalkit label --review-auto --into EVAL_SET`: each decision is one line
appended to the candidates' review log (`ReviewSession.accept` / `reject`, under the log
folder's lock), then the new version is written again from `into` and every accepted case
(`ReviewSession.write`: atomic, checked by loading it, never writing `into`). A session is
opened afresh for each decision, so a decision made meanwhile in another tab or in the
terminal is seen: a candidate already decided is refused (`AlreadyDecided`), not decided
twice. An edit before accepting goes through `review.apply_edits`, as the terminal's `e`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import InputError, Problem

__all__ = ["AlreadyDecided", "Review", "decide", "review_rows", "review_view"]

_lock = threading.Lock()


class AlreadyDecided(InputError):
    """The candidate was decided since the page was loaded (another tab, or the terminal)."""


@dataclass(frozen=True)
class Review:
    """What to review: the candidates file, the eval set accepted cases are added to, and the
    new version (default: `labeling.next_version_path(into)`)."""

    candidates: Path
    into: Path
    results_dir: Path
    output: Path | None = None

    def open(self, reviewer: str | None = None) -> Any:
        from evalkit.authoring.review import ReviewSession

        return ReviewSession(self.candidates, self.into, output=self.output, results_dir=self.results_dir, reviewer=reviewer)


def review_rows(review: Review) -> dict[str, Any]:
    """The candidates in file order with their decision (None: pending), and where accepted cases go."""
    session = review.open()
    rows = [{"id": c["id"], "question": str(c.get("question") or ""),
             "decision": session.decisions[c["id"]].decision if c["id"] in session.decisions else None}
            for c in session.candidates_all]
    return {"rows": rows, "dest": session.dest.name, "into": session.into.name, "log": session.log.name,
            "n_pending": sum(r["decision"] is None for r in rows)}


def review_view(review: Review, case_id: str, corpus: Any) -> dict[str, Any] | None:
    """One candidate's page, or None when the candidates file has no reviewable `case_id`."""
    from evalkit.authoring.review import section_preview

    session = review.open()
    candidate = next((c for c in session.candidates_all if c["id"] == case_id), None)
    if candidate is None:
        return None
    pending = [c["id"] for c in session.pending()]
    order = [c["id"] for c in session.candidates_all]
    after = [i for i in pending if order.index(i) > order.index(case_id)]
    decided = session.decisions.get(case_id)
    supports = [s for s in candidate.get("gold_supports") or [] if isinstance(s, Mapping)]
    return {
        "case_id": case_id, "case": candidate, "question": str(candidate.get("question") or ""),
        "facts": [str(f) for f in candidate.get("expected_key_facts") or []],
        "supports": [{**s, "preview": section_preview(corpus, dict(s))} for s in supports],
        "tags": [str(t) for t in candidate.get("tags") or []], "duplicate": session.in_into(case_id),
        "decision": decided.decision if decided else None, "next": after[0] if after else None,
        "dest": session.dest.name, "into": session.into.name,
        "position": order.index(case_id) + 1, "total": len(order), "n_pending": len(pending),
    }


def decide(review: Review, case_id: str, decision: str, *, question: str | None = None, facts: Sequence[str] | None = None,
           reviewer: str | None = None) -> dict[str, Any]:
    """Accept (with the edits given) or reject a pending candidate, then write the new version.

    Returns:
        {"dest": the new version's name or None, "appended": how many cases it adds to `into`}.

    Raises:
        AlreadyDecided: the candidate is not pending any more.
        InputError: no such candidate, an edit that does not validate, a destination that
            may not be written.
    """
    from evalkit.authoring.review import apply_edits

    if decision not in ("accept", "reject"):
        raise InputError(Problem(f"decision must be accept or reject, got {decision!r}", field="decision"))
    with _lock:
        session = review.open(reviewer)
        candidate = next((c for c in session.candidates_all if c["id"] == case_id), None)
        if candidate is None:
            raise InputError(Problem(f"no candidate {case_id!r} to review", path=str(review.candidates)))
        if case_id in session.decisions:
            raise AlreadyDecided(Problem(f"candidate {case_id!r} was decided meanwhile ({session.decisions[case_id].decision}); "
                                         "nothing written", path=str(session.log)))
        if decision == "reject":
            session.reject(candidate)
        else:
            kept = [f.strip() for f in facts if f.strip()] if facts is not None else None
            edited = apply_edits(candidate, question=(question.strip() or None) if question is not None else None,
                                 key_facts=kept)
            session.accept(candidate, edited if edited != candidate else None)
        dest, appended, _ = session.write()
    return {"dest": dest.name if dest is not None else None, "appended": len(appended)}
