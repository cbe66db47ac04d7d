"""A conversation turn's judge context (judges/context.py `with_earlier_turns`): own chunks
first, then earlier turns' chunks latest turn first, each once, at most the cap."""

from __future__ import annotations

from evalkit.judges.context import EARLIER_TURN_CHUNKS, with_earlier_turns


def _chunks(turn: int, n: int) -> list[dict]:
    return [{"chunk_id": f"t{turn}-{i}", "text": f"chunk {i} of turn {turn}"} for i in range(n)]


def test_earlier_turns_come_latest_first_once_each() -> None:
    own = _chunks(3, 2)
    shared = {"chunk_id": "t3-0", "text": "chunk 0 of turn 3"}  # retrieved again at turn 2
    got = with_earlier_turns(own, [(1, _chunks(1, 2)), (2, [shared, *_chunks(2, 1)])])
    # By hand: own t3-0, t3-1; then turn 2 (t3-0 already there, so t2-0), then turn 1.
    assert [c["chunk_id"] for c in got] == ["t3-0", "t3-1", "t2-0", "t1-0", "t1-1"]
    assert [c.get("earlier_turn") for c in got] == [None, None, 2, 1, 1]


def test_a_long_conversation_adds_at_most_the_cap() -> None:
    # Eight earlier turns of 20 chunks: 160 candidates, the cap keeps the latest 20 (turn 8's).
    earlier = [(t, _chunks(t, 20)) for t in range(1, 9)]
    got = with_earlier_turns(_chunks(9, 5), earlier)
    assert EARLIER_TURN_CHUNKS == 20
    assert len(got) == 5 + 20
    assert {c["earlier_turn"] for c in got[5:]} == {8}
    assert len(with_earlier_turns(_chunks(9, 5), earlier, limit=3)) == 8
