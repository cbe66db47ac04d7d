"""Conversations in an eval set: a line with `turns` is one case per turn (DESIGN.md §10).

    {"id": "c1", "tags": ["harbor"], "turns": [
        {"question": "Who leads Harbor?", "answerable": true, "gold_supports": [...],
         "expected_answer": "Ravi Menon."},
        {"question": "What did he decide about the index?", "answerable": true,
         "gold_supports": [...], "follow_up": "follow-up"}]}

The loader (evalset/load.py) reads that line as the turn cases `c1#1`, `c1#2`, ...: each
holds the line's other fields (its tags with the turn's added), the turn's own fields, and
`conversation` (schema.TurnOf): the conversation's id, the turn's position, its kind
(`follow_up`) and the reference history before it (each earlier question and its
`expected_answer`). Everything after the loader (the runner, records, scoring, slices,
compare) sees ordinary cases; what a conversation needs beyond that reads
`case.conversation`. Errors inside a turn are named `turns[i].<field>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalkit.errors import Problem

TURNS = "turns"
TURN_SEPARATOR = "#"
# What only a turn can say: at the line's level of a conversation it would be ambiguous.
TURN_ONLY = ("question", "answerable", "gold_supports", "required_support_groups", "expected_key_facts",
             "expected_topics", "expected_answer", "recency_conflict_rule", "expected", "constraints")
# A turn's own key beyond a case's fields.
FOLLOW_UP = "follow_up"
_NOT_IN_A_TURN = ("id", TURNS, "conversation")


def turn_id(conversation_id: str, turn: int) -> str:
    """The case id of a conversation's `turn` (1-based): `<conversation id>#<turn>`."""
    return f"{conversation_id}{TURN_SEPARATOR}{turn}"


def case_turn(case: Any) -> tuple[str, int] | None:
    """(conversation id, turn) of a case as a record holds it (its JSON `case`), or None for
    a single question: the one reading of a stored turn's place."""
    conv = case.get("conversation") if isinstance(case, Mapping) else None
    if not isinstance(conv, Mapping) or conv.get("id") is None or not isinstance(conv.get("turn"), int):
        return None
    return str(conv["id"]), conv["turn"]


def record_turn(record: Mapping[str, Any]) -> tuple[tuple[str, int], int] | None:
    """((conversation id, trial), turn) of a results.jsonl record, or None for a single question:
    a `--trials` run asks each conversation once per trial."""
    found = case_turn(record.get("case"))
    if found is None:
        return None
    trial = record.get("trial")
    return (found[0], trial if type(trial) is int else 1), found[1]


def turn_place(case: Any) -> str | None:
    """Where a stored turn sits, as the reports say it ("c1 · turn 2 of 3"); None otherwise."""
    found = case_turn(case)
    if found is None:
        return None
    return f"{found[0]} \u00b7 turn {found[1]} of {case['conversation'].get('turns')}"


def reference_history(case: Any) -> list[dict[str, Any]] | None:
    """What a labeler sends with a turn (an EvalCase): the turns before it with the eval set's
    answers, as `--history reference` does, an earlier turn without an `expected_answer`
    with its question alone; None for a single question."""
    conv = getattr(case, "conversation", None)
    if conv is None:
        return None
    return [m.model_dump() for m in conv.history if m.content is not None]


def expand(obj: Mapping[str, Any], where: Mapping[str, Any]) -> tuple[list[tuple[int, dict[str, Any]]], list[Problem]]:
    """The turn cases of a conversation line, as JSON objects to validate as EvalCase:
    [(turn index, object)], and the problems of the line's own shape (each turn's fields
    are checked by the caller's validation, named through `in_turn`)."""
    problems: list[Problem] = []
    turns = obj.get(TURNS)
    if not isinstance(turns, list) or not turns:
        problems.append(Problem("expected a non-empty list of turns, each an object with its question", field=TURNS, **where))
        return [], problems
    for key in TURN_ONLY:
        if key in obj:
            problems.append(Problem(f"{key} belongs in each turn of a conversation, not beside `turns`", field=key, **where))
    if "conversation" in obj:
        problems.append(Problem("set by evalkit from `turns`; leave it out", field="conversation", **where))
    cid = obj.get("id")
    if isinstance(cid, int) and not isinstance(cid, bool):
        cid = str(cid)
    if not isinstance(cid, str) or not cid.strip():
        problems.append(Problem("a conversation needs an id (a non-blank string)", field="id", **where))
        return [], problems
    shared = {k: v for k, v in obj.items() if k not in (TURNS, *TURN_ONLY)}
    history: list[dict[str, Any]] = []
    out: list[tuple[int, dict[str, Any]]] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            problems.append(Problem(f"expected an object, got {type(turn).__name__}", field=f"{TURNS}[{i}]", **where))
            continue
        for key in _NOT_IN_A_TURN:
            if key in turn:
                why = "set by evalkit" if key != TURNS else "a turn cannot hold turns"
                problems.append(Problem(f"{why}; leave it out", field=f"{TURNS}[{i}].{key}", **where))
        follow_up = turn.get(FOLLOW_UP)
        if follow_up is not None and not isinstance(follow_up, str):
            problems.append(Problem(f"expected a string, got {follow_up!r}", field=f"{TURNS}[{i}].{FOLLOW_UP}", **where))
            follow_up = None
        flat = {**shared, **{k: v for k, v in turn.items() if k not in (*_NOT_IN_A_TURN, FOLLOW_UP)}}
        tags, own = shared.get("tags"), turn.get("tags")
        if isinstance(tags, list) and isinstance(own, list):
            flat["tags"] = [*tags, *(t for t in own if t not in tags)]
        flat["id"] = turn_id(cid, i + 1)
        flat["conversation"] = {"id": cid, "turn": i + 1, "turns": len(turns), "follow_up": follow_up,
                                "history": list(history)}
        question, answer = turn.get("question"), turn.get("expected_answer")
        history += [{"role": "user", "content": question if isinstance(question, str) else None},
                    {"role": "assistant", "content": answer if isinstance(answer, str) else None}]
        out.append((i, flat))
    return out, problems


def in_turn(problems: Iterable[Problem], index: int, turn: Mapping[str, Any]) -> list[Problem]:
    """`problems` of one turn's case, their fields named inside the line: a field the turn
    gave (or one only a turn can give) as `turns[i].<field>`; the line's own as it is."""
    out = []
    for p in problems:
        root = (p.field or "").split(".")[0].split("[")[0]
        if p.field and (root in turn or root in TURN_ONLY):
            p = Problem(p.message, path=p.path, line=p.line, field=f"{TURNS}[{index}].{p.field}")
        out.append(p)
    return out


def conversation_ids(ids: Sequence[str], turns: Mapping[int, tuple[str, int]], given: Sequence[str]) -> list[str]:
    """`--ids` as case ids: a conversation's id stands for its turns."""
    by_conversation: dict[str, list[str]] = {}
    for i, (cid, _) in sorted(turns.items()):
        by_conversation.setdefault(cid, []).append(ids[i])
    return [x for given_id in given for x in by_conversation.get(given_id, [given_id])]


def whole_conversations(chosen: Sequence[int], turns: Mapping[int, tuple[str, int]], limit: int | None = None) -> list[int]:
    """The selected case indices with every turn of each conversation they touch (a turn is
    asked with the turns before it, and a conversation is scored whole), in order; `limit`
    counts a conversation as one case."""
    touched = {turns[i][0] for i in chosen if i in turns}
    out = sorted(set(chosen) | {i for i, (cid, _) in turns.items() if cid in touched}) if touched else list(chosen)
    if limit is None:
        return out
    kept, seen = [], set()
    for i in out:
        unit = turns[i][0] if i in turns else i
        if unit not in seen:
            if len(seen) == limit:
                continue
            seen.add(unit)
        kept.append(i)
    return kept
