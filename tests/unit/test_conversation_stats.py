"""metrics.json's `conversations` block (metrics/conversations.py), on turns whose failure
stages are set by hand; each expected value is counted by hand in the comments."""

from __future__ import annotations

from evalkit.metrics.conversations import ConversationStats


def _turn(conv: str, turn: int, *, hit: float | None, labeled: bool = True, error: bool = False) -> tuple[dict, dict]:
    record = {"test_case_id": f"{conv}#{turn}", "case": {"conversation": {"id": conv, "turn": turn}}}
    x = {"values": {}, "abstention": (True, False), "answerable": True, "unlabeled": not labeled,
         "error_kind": "timeout" if error else None, "at_k": {"5": {"recall_any": hit}}}
    return record, x


def test_first_failures_and_pass_rate_skip_turns_nothing_was_checked_on() -> None:
    stats = ConversationStats(5)
    for record, x in [
        _turn("a", 1, hit=1.0), _turn("a", 2, hit=0.0), _turn("a", 3, hit=1.0),   # fails first at turn 2
        _turn("b", 1, hit=None, labeled=False), _turn("b", 2, hit=1.0),          # turn 1 unlabeled: passes
        _turn("c", 1, hit=None, labeled=False),                                  # nothing checked: left out
        _turn("d", 2, hit=1.0, error=True), _turn("d", 1, hit=1.0),              # out of order; error at turn 2
    ]:
        stats.add(record, x)
    got = stats.result()
    assert (got["n_conversations"], got["n_turns"]) == (4, 8)
    # a: 2/3, b: 1/1, d: 1/1 (an error's recall still counts as the record holds it); c: none.
    assert got["recall_at_k_avg"] == (2 / 3 + 1 + 1) / 3 and got["n"]["recall_at_k_avg"] == 3
    # Checked conversations a, b, d; only b passes every checked turn.
    assert got["pass_rate"] == 1 / 3 and got["n"]["pass_rate"] == 3
    assert got["first_failure_by_turn"] == {"2": 2, "none": 1}
    assert got["first_failure_stage"] == {"error": 1, "retrieval_miss": 1}
